"""Adaptive repeats: the ``repeats`` table and :func:`next_round`.

``repeats: {min: 3, max: 10, target_ci_halfwidth: 0.03}``: after the minimum, each
round adds one repeat to the cells whose speedup interval is still wider than the
target — the device and its baseline — until the maximum (docs/statistics.md §3).

``repeats`` — one row per workload × batch size × device with ok records:

* baseline: the workload's baseline device; repeats: ok records; records: every record
  of the cell (failed and unavailable included);
* min_repeats, max_repeats, target_halfwidth: the settings in force (without settings:
  the fewest and most records of any cell of the workload, no target);
* halfwidth: the speedup table's relative half-width (NaN for the baseline and where
  there is no ratio, e.g. microbenchmarks);
* converged: halfwidth ≤ target (empty for the baseline, without a target or without a
  half-width); note: in words ("converged after 4 repeats", "stopped at the maximum (10)
  with half-width 5.1%", "no ratio: no ok baseline run").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
from trainbench.analysis.stats import frames as fr
from trainbench.analysis.stats.speed import ratio_block, speed_sides

REPEATS_COLUMNS = [
    "workload", "batch_size", "device", "baseline", "repeats", "records", "min_repeats",
    "max_repeats", "target_halfwidth", "halfwidth", "converged", "note",
]  # fmt: skip


def settings_for(settings, workload: str) -> dict | None:
    """The repeat settings of ``workload`` as {"min", "max", "target_ci_halfwidth"}:
    ``settings`` is one such mapping for every workload, or {workload: mapping or int}
    (an int N means min = max = N); None where there are none."""
    if settings is None:
        return None
    if isinstance(settings, Mapping) and ("max" in settings or "min" in settings):
        value = settings
    else:
        value = settings.get(workload) if isinstance(settings, Mapping) else settings
    if value is None:
        return None
    if isinstance(value, (int, np.integer)):
        return {"min": int(value), "max": int(value), "target_ci_halfwidth": None}
    return {
        "min": value.get("min"),
        "max": value.get("max"),
        "target_ci_halfwidth": value.get("target_ci_halfwidth"),
    }


def _target(setting: dict | None) -> float:
    value = setting.get("target_ci_halfwidth") if setting else None
    return float(value) if value is not None and pd.notna(value) else np.nan


def _note(row: dict) -> str:
    hw, target, repeats = row["halfwidth"], row["target_halfwidth"], row["repeats"]
    if row["device"] == row["baseline"]:
        return f"baseline: {fr.plural(repeats, 'ok repeat')}"
    if not np.isfinite(hw):
        return row["_why"]
    width = f"half-width {fr.percent(hw)}"
    if not np.isfinite(target):
        return f"{width} after {fr.plural(repeats, 'repeat')} (no target set)"
    if hw <= target:
        return f"converged after {fr.plural(repeats, 'repeat')} ({width} ≤ {fr.percent(target)})"
    if pd.notna(row["max_repeats"]) and row["records"] >= row["max_repeats"]:
        return f"stopped at the maximum ({int(row['max_repeats'])}) with {width}"
    return f"{width} > target {fr.percent(target)} after {fr.plural(repeats, 'repeat')}"


def _why_no_ratio(row: dict, base, reason: str, widths: dict, speed_workloads: set) -> str:
    if row["workload"] not in speed_workloads:
        return "no ratio: a microbenchmark (see matmul_summary)"
    if base is None or (row["workload"], row["batch_size"], base) not in widths:
        return "no ratio: no ok baseline run"
    return f"no ratio: {reason}" if reason else "no ratio"


def repeats_table(
    runs: pd.DataFrame, speedup: pd.DataFrame, baselines: fr.Baselines, settings=None
) -> pd.DataFrame:
    """The ``repeats`` table from the record table and the published speedup table;
    ``settings`` as in :func:`settings_for`."""
    runs = fr.prepare_runs(runs)
    if runs.empty:
        return fr.empty(REPEATS_COLUMNS)
    keys = ["workload", "batch_size", "device"]
    counts = runs.groupby(keys, sort=True).agg(
        repeats=("status", lambda s: int((s == "ok").sum())), records=("status", "size")
    )
    records_range = counts["records"].groupby(level=0).agg(["min", "max"])
    counts = counts[counts["repeats"] > 0].reset_index()
    widths, speed_workloads = {}, set()
    if speedup is not None and not speedup.empty:
        speed_workloads = set(speedup["workload"])
        for row in speedup.itertuples(index=False):
            widths[(row.workload, row.batch_size, row.device)] = (row.halfwidth, row.reason)
    rows = []
    for row in counts.to_dict("records"):
        setting = settings_for(settings, row["workload"])
        base = fr.baseline_of(baselines, row["workload"])
        halfwidth, reason = widths.get(
            (row["workload"], row["batch_size"], row["device"]), (np.nan, "")
        )
        low, high = records_range.loc[row["workload"]]
        row.update(
            baseline=base,
            min_repeats=setting["min"] if setting and setting["min"] is not None else low,
            max_repeats=setting["max"] if setting and setting["max"] is not None else high,
            target_halfwidth=_target(setting),
            halfwidth=float(halfwidth) if pd.notna(halfwidth) else np.nan,
        )
        converged = pd.NA
        if (
            row["device"] != base
            and np.isfinite(row["halfwidth"])
            and np.isfinite(row["target_halfwidth"])
        ):
            converged = bool(row["halfwidth"] <= row["target_halfwidth"])
        row["converged"] = converged
        row["_why"] = _why_no_ratio(row, base, reason, widths, speed_workloads)
        row["note"] = _note(row)
        rows.append(row)
    table = fr.frame(rows, REPEATS_COLUMNS)
    table["converged"] = table["converged"].astype("boolean")
    return table


def next_round(
    runs: pd.DataFrame,
    devices: Mapping[str, Sequence[str]],
    baseline: str | None,
    settings,
) -> dict[str, list[tuple[str, int]]]:
    """For each workload, the (device, batch_size) cells that get one more repeat in the
    next round: a non-baseline device at a batch size whose speedup half-width (the one
    the speedup table publishes) is finite and above ``target_ci_halfwidth``, and whose
    records number fewer than ``max``; its baseline at that batch size too (while the
    baseline's records are fewer than ``max``). A NaN half-width never asks for more;
    no target or min == max asks for nothing. ``settings``: {"min", "max",
    "target_ci_halfwidth"} or {workload: such a mapping} (see :func:`settings_for`)."""
    runs = fr.prepare_runs(runs)
    baselines = fr.choose_baselines(runs, devices, baseline)
    kinds = fr.workload_kinds(runs)
    plan: dict[str, set[tuple[str, int]]] = {w: set() for w in kinds}
    training = runs[runs["workload"].isin([w for w, k in kinds.items() if k == "training"])]
    sides = speed_sides(training, "samples_per_s")
    _, ratios = ratio_block(sides, baselines)
    for (workload, batch_size, device), ratio in ratios.items():
        setting = settings_for(settings, workload)
        target = _target(setting)
        if not setting or not np.isfinite(target) or setting.get("max") is None:
            continue
        if setting.get("min") == setting["max"]:
            continue
        width = ratio.halfwidth
        if not (np.isfinite(width) and width > target):
            continue
        if sides[(workload, batch_size, device)].records >= setting["max"]:
            continue
        plan[workload].add((device, int(batch_size)))
        base = baselines[workload]
        if sides[(workload, batch_size, base)].records < setting["max"]:
            plan[workload].add((base, int(batch_size)))
    return {w: sorted(cells, key=lambda c: (c[1], c[0])) for w, cells in plan.items()}
