"""Each device at its best setting for time to a quality target: the ``best_setting``
table (docs/statistics.md §4), from the cells of :mod:`.targets`.

One row per training workload × device column (the device labels of every table: cpu,
cpu-t1, cpu-t2, cuda, cuda-compile; ``cpu@<hardware>`` on merged results), the baseline
device's first. A device's **best setting** is its batch size with the shortest median
time to target among its cells (``candidates``: how many it had); it is compared with
the baseline device's best setting (the baseline of the workload's other tables), across
batch sizes, by the verdict rules of :mod:`.targets` (``sooner`` / ``later`` / ``no clear
difference`` from the interval over every repeat, censored ones included; ``disturbed``;
``insufficient data`` below 3 ok repeats a side). So a thread variant (cpu-t2) is
compared with its baseline (cpu-t1) as any device is. The choice is made on point
estimates: the interval does not account for it (a winner's curse biases the chosen
time low with few repeats).

Columns: workload, device, backend (the device's backend, with @hardware: informative);
batch_size (the best setting; empty where no cell reaches the target in its median
repeat), candidates (the device's cells with a quality curve); metric, target,
direction; repeats, reached, median_s, low, high, interval (the best cell's training time
to target and its interval, as ``time_to_target``), wall_median_s, samples_median;
baseline_device, baseline_batch_size, baseline_median_s (the baseline's best setting);
speedup = baseline median ÷ this median (times sooner), speedup_low, speedup_high,
speedup_interval; verdict (``baseline`` on the baseline's own row), reason, note (how the
setting was chosen); summary: the row in one sentence, the ⏱ line of the console and of
results/report.md (:func:`.target_words.summary`): every device's, the baseline's own time
included ("cpu reaches accuracy ≥ 0.64 in 2.31 s of training (bs 32; median of 3 repeats,
range 2.2–2.5 s)").

A workload whose records cannot give a time to target (no quality curve, a metric not
reported or never finite, a direction unknown) keeps its rows, insufficient data with the
reason, which only the first row's summary says. Workloads **without a target** get no
per-device rows: one row for all of them (workload: their names joined by ";", no
device), whose summary is the single line "No time to target for text_a, mlp_c: no
target set (workloads.<name>.target)".
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import pandas as pd
from trainbench.analysis.stats import frames as fr
from trainbench.analysis.stats import target_words as words
from trainbench.analysis.stats.intervals import INSUFFICIENT
from trainbench.analysis.stats.target_words import BASELINE, NOT_REACHED
from trainbench.analysis.stats.targets import base_workload, judge, ratio_columns, workload_cells
from trainbench.analysis.tables import compact
from trainbench.config.device_ids import DeviceId

BEST_SETTING_COLUMNS = [
    "workload", "device", "backend", "batch_size", "candidates", "metric", "target",
    "direction", "repeats", "reached", "median_s", "low", "high", "interval",
    "wall_median_s", "samples_median", "baseline_device", "baseline_batch_size",
    "baseline_median_s", "speedup", "speedup_low", "speedup_high", "speedup_interval",
    "verdict", "reason", "note", "summary",
]  # fmt: skip
CELL_COLUMNS = ("repeats", "reached", "median_s", "low", "high", "interval", "wall_median_s",
                "samples_median")  # fmt: skip


def backend_of(device: str) -> str:
    """The backend (with its @hardware) a device column belongs to."""
    try:
        parsed = DeviceId.parse(device)
    except ValueError:
        return str(device)
    return parsed.backend + (f"@{parsed.hardware}" if parsed.hardware else "")


def best_cell(cells, device: str) -> tuple[tuple | None, list[tuple]]:
    """The device's cell with the shortest median time to target (None: no cell reaches
    it in its median repeat; ties to the smaller batch size) and its cells with stats."""
    keys = [k for k in cells.keys if k[0] == device and k in cells.stats]
    reached = [k for k in keys if math.isfinite(cells.stats[k]["median_s"])]
    if not reached:
        return None, keys
    return min(reached, key=lambda k: (cells.stats[k]["median_s"], k[1])), keys


def _not_reached_reason(cells, keys: list[tuple]) -> str:
    """Why none of the device's cells reached the target in the median repeat."""
    if len(keys) == 1:
        _, reason = judge(keys[0][0], None, cells.stats[keys[0]], None, None, [])
        return f"at bs {keys[0][1]}, {reason}"
    counts = ", ".join(
        f"bs {b} in {cells.stats[(d, b)]['reached']} of {cells.stats[(d, b)]['repeats']}"
        for d, b in keys
    )
    longest = max(cells.stats[k]["censored_after_s"] for k in keys)
    return (f"the median repeat reached it at none of its batch sizes ({counts} repeats; "
            f"within {compact(longest)} s of training at most)")  # fmt: skip


def _compare(cells, device, key, ref_key, base) -> tuple[str, str, str, dict]:
    """verdict, reason, the censored words and the ratio columns of ``device``'s best
    cell ``key`` against the baseline's best ``ref_key``."""
    mine, ref = cells.stats[key], cells.stats.get(ref_key) if ref_key else None
    ratio_cols, ratio = ratio_columns(device == base, mine, ref)
    if device == base:  # its own time, no verdict: a disturbed repeat is still said
        shaken = cells.disturbed.get(key, [])
        return (
            BASELINE,
            ("disturbed repeats: " + ", ".join(shaken)) if shaken else "",
            "",
            ratio_cols,
        )
    if base is None:
        return INSUFFICIENT, "no baseline device for this workload", "", ratio_cols
    if ref is None:
        ran = any(d == base for d, _ in cells.keys)
        why = (f"the baseline {base} reaches the target at none of its batch sizes" if ran
               else f"the baseline {base} has no ok run of this workload")  # fmt: skip
        return INSUFFICIENT, why, "", ratio_cols
    disturbed = cells.disturbed.get(key, []) + cells.disturbed.get(ref_key, [])
    label, base_label = f"{device} bs {key[1]}", f"{base} bs {ref_key[1]}"
    verdict, reason = judge(label, base_label, mine, ref, ratio, disturbed)
    return verdict, reason, words.censored_outcome(device, base, mine, ref), ratio_cols


def _device_row(cells, device: str, base: str | None, ref_key: tuple | None) -> dict:
    key, keys = best_cell(cells, device)
    ref = cells.stats.get(ref_key) if ref_key else None
    n = len(keys)
    note = (f"the shortest median of {fr.plural(n, 'batch size')}; the interval does not "
            "account for the choice" if n > 1 else "its only batch size")  # fmt: skip
    row = {"workload": cells.workload, "device": device, "backend": backend_of(device),
           "candidates": n, **cells.target_columns(), "baseline_device": base,
           "baseline_batch_size": ref_key[1] if ref_key else None,
           "baseline_median_s": ref["median_s"] if ref else np.nan, "note": note}  # fmt: skip
    if not keys:
        return {**row, "verdict": INSUFFICIENT,
                "reason": "no quality curve in this device's records"}  # fmt: skip
    if key is None:
        return {**row, "verdict": NOT_REACHED, "reason": _not_reached_reason(cells, keys)}
    verdict, reason, censored, ratio_cols = _compare(cells, device, key, ref_key, base)
    return {**row, "batch_size": key[1], **{k: cells.stats[key][k] for k in CELL_COLUMNS},
            **ratio_cols, "verdict": verdict, "reason": reason, "_censored": censored}  # fmt: skip


def _workload_rows(cells, base: str | None) -> list[dict]:
    """The rows of one workload that has a target: the baseline device's first."""
    devices = sorted({d for d, _ in cells.keys}, key=lambda d: (d != base, d))
    problem = cells.unusable_reason()
    if problem is not None:
        rows = [{"workload": cells.workload, "device": d, "backend": backend_of(d),
                 "candidates": 0, **cells.target_columns(), "baseline_device": base,
                 "verdict": INSUFFICIENT, "reason": problem} for d in devices]  # fmt: skip
        for i, row in enumerate(rows):
            row["summary"] = words.unusable(problem) if i == 0 else ""
        return rows
    ref_key, _ = best_cell(cells, base) if base else (None, [])
    rows = [_device_row(cells, d, base, ref_key) for d in devices]
    alone = len(devices) == 1
    for row in rows:
        row["summary"] = words.summary(row, row.pop("_censored", ""), alone)
    return rows


def best_setting_table(
    quality: pd.DataFrame | None,
    runs: pd.DataFrame,
    baselines: fr.Baselines,
    targets: Mapping[str, Mapping | None],
    workloads: list[str],
) -> pd.DataFrame:
    """The ``best_setting`` table; see the module docstring."""
    rows, untargeted = [], []
    for workload, cells in workload_cells(quality, runs, targets, workloads):
        if not cells.keys:
            continue
        if cells.target is None:
            untargeted.append(workload)
            continue
        rows += _workload_rows(cells, fr.baseline_of(baselines, workload))
    if untargeted:
        names = list(dict.fromkeys(base_workload(w) for w in untargeted))
        line = words.no_target(names)
        rows.append({"workload": ";".join(untargeted), "candidates": 0,
                     "verdict": INSUFFICIENT, "reason": line.partition(": ")[2],
                     "summary": line})  # fmt: skip
    return fr.frame(rows, BEST_SETTING_COLUMNS)
