"""Speed: the ``speedup``, ``eval_speed`` and ``matmul_summary`` tables.

``speedup`` — one row per workload × batch size × device with at least one ok or
failed record at that batch size (training workloads; devices whose records there are
all unavailable get no row). Columns:

* workload, batch_size, device; baseline: the workload's baseline device;
* n: ok records with a finite samples_per_s; median, low, high: their median and its
  interval; interval: the interval's kind ("range of 3 runs", "95% BCa CI", …);
* baseline_n, baseline_median: the same for the baseline at this batch size;
* speedup: median / baseline_median; speedup_low, speedup_high: its interval (the
  extreme pairwise ratios below 5 runs a side, else a bootstrap CI of the ratio of
  medians); speedup_interval: that interval's kind ("range of 3 vs 3 runs", …);
* halfwidth: (speedup_high − speedup_low) / 2 / speedup, the relative half-width the
  adaptive repeats aim at (NaN on baseline rows and where there is no ratio);
* verdict: baseline, faster, slower, no clear difference, insufficient data or
  disturbed — the first matching rule of docs/statistics.md §3; reason: that rule
  with its numbers, one sentence;
* window_phase: what the training windows cover where the workload's work per step
  changes by epoch (two_tower's mining schedule): the schedule phase both sides'
  windows are held to ("epochs 2-3: in-batch and FAISS-mined hard negatives"), or
  "differs: …" with each side's; empty where every step does the same work;
* disturbed_runs, short_window_runs, no_steady_state_runs: this device's ok records
  here that were disturbed / had a short window / found no steady state;
* bimodal: this device's throughputs here split into two groups (see
  :func:`trainbench.analysis.stats.quality.is_bimodal`).

``eval_speed`` — the same columns for warm evaluation (eval_samples_per_s), for the
training workloads that measured it; its short-window check reads eval_short_window,
and a training run without steady state does not block an evaluation verdict.

``matmul_summary`` — one row per workload × device × matmul batch size × matrix size
n (rows of matmul.csv): baseline; repeats (ok records); gflops, gflops_low, gflops_high
and interval (median GFLOP/s and its interval); median_s (median time); speedup
(baseline median_s / median_s), speedup_low, speedup_high, speedup_interval (the
ratio interval of the times, inverted); verdict and reason (rules as for speedup:
disturbed, fewer than 3 repeats → no verdict); noisy_runs (repeats torch flagged
noisy at this n), disturbed_runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from trainbench.analysis.stats import frames as fr
from trainbench.analysis.stats.intervals import (
    INSUFFICIENT,
    Interval,
    ratio_intervals,
    summarize_many,
    verdict,
)
from trainbench.analysis.stats.machine_state import disturbance_words
from trainbench.analysis.stats.quality import is_bimodal
from trainbench.analysis.tables import compact, interval_text, ratio_text

BASELINE = "baseline"
DISTURBED = "disturbed"
MIN_REPEATS = 3

SPEEDUP_COLUMNS = [
    "workload", "batch_size", "device", "baseline", "n", "median", "low", "high", "interval",
    "baseline_n", "baseline_median", "speedup", "speedup_low", "speedup_high", "speedup_interval",
    "halfwidth", "verdict", "reason", "window_phase", "disturbed_runs", "short_window_runs",
    "no_steady_state_runs", "bimodal",
]  # fmt: skip
MATMUL_COLUMNS = [
    "workload", "device", "batch_size", "n", "baseline", "repeats", "gflops", "gflops_low",
    "gflops_high", "interval", "median_s", "speedup", "speedup_low", "speedup_high",
    "speedup_interval", "verdict", "reason", "noisy_runs", "disturbed_runs",
]  # fmt: skip


@dataclass
class Side:
    """One device's records at one cell (workload × batch size [× n])."""

    values: np.ndarray = field(default_factory=lambda: np.empty(0))
    records: int = 0
    ok: int = 0
    unavailable: int = 0
    failed: list[str] = field(default_factory=list)
    disturbed: list[tuple[int, str | float]] = field(default_factory=list)  # (rep, why)
    short: list[str] = field(default_factory=list)
    no_steady: list[int] = field(default_factory=list)
    noisy: int = 0

    @property
    def n(self) -> int:
        return int(self.values.size)


def _rep(value) -> int | str:
    return int(value) if pd.notna(value) and float(value).is_integer() else str(value)


def _short_text(rep, seconds, steps, eval_) -> str:
    what = "timed" if eval_ else "measured"
    unit = "passes" if eval_ else "steps"
    amount = f" over {int(steps)} {unit}" if np.isfinite(steps) else ""
    return f"rep {_rep(rep)} {what} {compact(seconds)} s{amount}"


def build_sides(
    runs: pd.DataFrame, value: str, keys: Sequence[str], eval_: bool = False
) -> dict[tuple, Side]:
    """{(workload, batch_size, device): Side} over every record of ``runs`` (prepared)."""
    status = runs["status"].to_numpy()
    vals = fr.num(runs, value).to_numpy()
    rep = runs["rep"].to_numpy()
    disturbed = fr.flag(runs, "disturbed").to_numpy()
    cores = fr.num(runs, "other_cpu_cores").to_numpy()
    why = fr.text(runs, "disturbed_reason").to_numpy()
    short = fr.flag(runs, "eval_short_window" if eval_ else "short_window").to_numpy()
    seconds = fr.num(runs, "eval_warm_seconds" if eval_ else "window_seconds").to_numpy()
    steps = fr.num(runs, "eval_warm_passes" if eval_ else "window_steps").to_numpy()
    steady = fr.text(runs, "steady_state").to_numpy()
    classes = fr.text(runs, "error_class").to_numpy()
    noisy = fr.flag(runs, "noisy").to_numpy()
    sides = {}
    for key, idx in fr.groups(runs, keys).items():
        ok = idx[status[idx] == "ok"]
        v = vals[ok]
        side = Side(
            values=np.sort(v[np.isfinite(v)]),
            records=len(idx),
            ok=len(ok),
            unavailable=int((status[idx] == "unavailable").sum()),
            failed=[c or "unknown" for c in classes[idx[status[idx] == "failed"]]],
            disturbed=[(rep[i], why[i] or cores[i]) for i in ok[disturbed[ok]]],
            short=[_short_text(rep[i], seconds[i], steps[i], eval_) for i in ok[short[ok]]],
            no_steady=[rep[i] for i in ok[steady[ok] == fr.NO_STEADY_STATE]],
            noisy=int(noisy[ok].sum()),
        )
        sides[key] = side
    return sides


# ----------------------------------------------------------------------------- verdicts


def _no_ok_text(device: str, side: Side | None, quantity: str, where: str) -> str:
    if side is None or side.records == 0:
        return f"no run of {device} {where}"
    if side.ok:
        return f"no {quantity} in the {fr.plural(side.ok, 'ok run')} of {device}"
    parts = []
    if side.failed:
        parts.append(f"{len(side.failed)} failed: {fr.class_counts(side.failed)}")
    if side.unavailable:
        parts.append(f"{side.unavailable} unavailable")
    return f"no ok run of {device} ({'; '.join(parts)})"


def _disturbed_text(items: list[tuple[str, int, str | float]]) -> str:
    def one(device, rep, why, verb=""):
        words = f"{device} rep {_rep(rep)}{verb}"
        if detail := disturbance_words(why):
            words += f" ({detail})"
        return words

    if len(items) == 1:
        return one(*items[0], verb=" was disturbed")
    return f"{len(items)} runs were disturbed: " + "; ".join(one(*item) for item in items)


def ratio_words(device: str, base: str, ratio: Interval, result: str) -> str:
    """The ratio and its interval in words, for a verdict's reason."""
    span = f"{interval_text(ratio.low, ratio.high)}x"
    if not ratio.is_range:
        tail = " contains 1" if result != "faster" and result != "slower" else ""
        return f"{ratio_text(ratio.estimate)}, {ratio.kind} {span}{tail}"
    if result == "faster":
        return f"every {device} run beat every {base} run: {span} ({ratio.kind})"
    if result == "slower":
        return f"every {device} run was slower than every {base} run: {span} ({ratio.kind})"
    return f"{device} and {base} runs overlap: {span} ({ratio.kind})"


def judge(
    device: str,
    base: str | None,
    dev: Side | None,
    ref: Side | None,
    ratio: Interval | None,
    quantity: str,
    where: str,
    check_steady: bool = True,
) -> tuple[str, str]:
    """(verdict, reason): the first matching rule of docs/statistics.md §3."""
    if device == base:
        return BASELINE, f"the baseline: {fr.plural(dev.n if dev else 0, 'ok run')}"
    if base is None:
        return INSUFFICIENT, "no baseline device: no ok run of this workload"
    for name, side in ((device, dev), (base, ref)):
        if side is None or side.n == 0:
            return INSUFFICIENT, _no_ok_text(name, side, quantity, where)
    disturbed = [(name, r, c) for name, s in ((base, ref), (device, dev)) for r, c in s.disturbed]
    if disturbed:
        return DISTURBED, _disturbed_text(disturbed)
    short = [f"{name} {t}" for name, s in ((device, dev), (base, ref)) for t in s.short]
    if short:
        return INSUFFICIENT, "short window: " + "; ".join(short)
    if check_steady:
        flat = [
            f"{name} rep {_rep(r)}" for name, s in ((device, dev), (base, ref)) for r in s.no_steady
        ]
        if flat:
            return INSUFFICIENT, "no steady state: " + ", ".join(flat)
    for name, side in ((device, dev), (base, ref)):
        if side.n < MIN_REPEATS:
            return INSUFFICIENT, (
                f"{name} has {fr.plural(side.n, 'ok repeat')}; a verdict needs {MIN_REPEATS}"
            )
    result = verdict(ratio.low, ratio.high) if ratio is not None else INSUFFICIENT
    if result == INSUFFICIENT:
        return INSUFFICIENT, f"no ratio: the {base} median is not positive"
    return result, ratio_words(device, base, ratio, result)


# ----------------------------------------------------------------------------- tables


def ratio_block(
    sides: dict[tuple, Side], baselines: fr.Baselines, invert: bool = False
) -> tuple[list[tuple], dict[tuple, Interval]]:
    """The cells (workload, …, device) and the interval of device / baseline (``invert``:
    baseline / device, for times) of each non-baseline cell whose two sides have values.
    Shared by the speedup table and :func:`trainbench.analysis.stats.repeats.next_round`, so the
    adaptive repeats use the published half-widths."""
    cells = list(sides)
    need = []
    for cell in cells:
        base = fr.baseline_of(baselines, cell[0])
        ref = sides.get((*cell[:-1], base))
        if base is not None and cell[-1] != base and ref is not None and ref.n and sides[cell].n:
            need.append((cell, ref))
    pairs = [
        (ref.values, sides[c].values) if invert else (sides[c].values, ref.values)
        for c, ref in need
    ]
    ratios = ratio_intervals(pairs)
    return cells, {cell: r for (cell, _), r in zip(need, ratios, strict=True)}


def _ratio_columns(is_baseline: bool, ratio: Interval | None) -> dict:
    return {
        "speedup": 1.0 if is_baseline else (ratio.estimate if ratio else np.nan),
        "speedup_low": ratio.low if ratio else np.nan,
        "speedup_high": ratio.high if ratio else np.nan,
        "speedup_interval": ratio.kind if ratio else "",
    }


def speed_sides(runs: pd.DataFrame, value: str, eval_: bool = False) -> dict[tuple, Side]:
    """{(workload, batch_size, device): Side} of every cell of ``runs`` (prepared)."""
    return build_sides(runs, value, ["workload", "batch_size", "device"], eval_)


def speedup_table(
    runs: pd.DataFrame,
    baselines: fr.Baselines,
    value: str = "samples_per_s",
    workloads: Sequence[str] | None = None,
) -> pd.DataFrame:
    """The ``speedup`` table (``value="eval_samples_per_s"``: ``eval_speed``); see the
    module docstring. ``workloads`` limits the table (default: every workload with a
    finite ``value``, and those whose records all failed that are no microbenchmark)."""
    runs = fr.prepare_runs(runs)
    eval_ = value != "samples_per_s"
    if workloads is None:
        kinds = fr.workload_kinds(runs)
        with_value = set(runs.loc[np.isfinite(fr.num(runs, value)), "workload"])
        workloads = [
            w for w, k in kinds.items() if k == "training" and (w in with_value or not eval_)
        ]
    runs = runs[runs["workload"].isin(list(workloads))]
    sides = speed_sides(runs, value, eval_)
    cells, ratios = ratio_block(sides, baselines)
    cells = [c for c in cells if sides[c].ok or sides[c].failed]  # all unavailable: no row
    summaries = summarize_many([sides[c].values for c in cells])
    rows = []
    for cell, summary in zip(cells, summaries, strict=True):
        base = fr.baseline_of(baselines, cell[0])
        ref = sides.get((cell[0], cell[1], base))
        row = _speed_row(cell, base, sides[cell], ref, summary, ratios.get(cell), eval_)
        row["window_phase"] = "" if eval_ else windows_cover(runs, cell, base)
        rows.append(row)
    return fr.frame(rows, SPEEDUP_COLUMNS)


def windows_cover(runs: pd.DataFrame, cell: tuple, base: str) -> str:
    """What the training windows of a speedup row cover, where the workload's work per
    step changes by a schedule: the phase both sides' windows are held to, or, should
    they differ (records of another version), each side's; "" for a workload without
    such a schedule (every step does the same work). A side with no ok run at this batch
    size covers nothing here: a baseline without one leaves this device's phase alone,
    in the words of the baseline's own row ("whole run" only for records that ran
    without the schedule's phase)."""
    workload, batch_size, device = cell
    if "window_phase" not in runs:
        return ""

    def phases(dev: str) -> list[str] | None:
        mine = runs[(runs["workload"] == workload) & (runs["batch_size"] == batch_size)
                    & (runs["device"] == dev) & (runs["status"] == "ok")]  # fmt: skip
        if mine.empty:
            return None
        return sorted({str(v) for v in mine["window_phase"].dropna() if str(v)})

    own, other = phases(device), phases(base)
    if own is None:  # no ok run of this device here: no window to describe
        return ""
    if other is None or device == base or own == other:
        return "; ".join(own)
    return (f"differs: {device} {'; '.join(own) or 'whole run'}, "
            f"{base} {'; '.join(other) or 'whole run'}")  # fmt: skip


def _speed_row(cell, base, side: Side, ref: Side | None, summary, ratio, eval_: bool) -> dict:
    workload, batch_size, device = cell
    quantity = "eval_samples_per_s" if eval_ else "samples_per_s"
    where = f"at bs {batch_size}"
    result, reason = judge(device, base, side, ref, ratio, quantity, where, not eval_)
    return {
        "workload": workload, "batch_size": batch_size, "device": device, "baseline": base,
        "n": side.n, "median": summary.estimate, "low": summary.low, "high": summary.high,
        "interval": summary.kind, "baseline_n": ref.n if ref is not None else 0,
        "baseline_median": float(np.median(ref.values)) if ref is not None and ref.n else np.nan,
        **_ratio_columns(device == base, ratio),
        "halfwidth": ratio.halfwidth if ratio else np.nan, "verdict": result, "reason": reason,
        "disturbed_runs": len(side.disturbed), "short_window_runs": len(side.short),
        "no_steady_state_runs": len(side.no_steady), "bimodal": is_bimodal(side.values),
    }  # fmt: skip


def eval_speed_table(
    runs: pd.DataFrame, baselines: fr.Baselines, workloads: Sequence[str] | None = None
) -> pd.DataFrame:
    """The ``eval_speed`` table: :func:`speedup_table` of eval_samples_per_s."""
    return speedup_table(runs, baselines, "eval_samples_per_s", workloads)


def matmul_summary(matmul: pd.DataFrame | None, baselines: fr.Baselines) -> pd.DataFrame:
    """The ``matmul_summary`` table; see the module docstring."""
    if matmul is None or matmul.empty:
        return fr.empty(MATMUL_COLUMNS)
    mm = fr.prepare(matmul, ("workload", "device")).assign(status="ok")
    for column in ("batch_size", "rep", "n"):
        if column not in mm.columns:
            mm[column] = 0
    keys = ["workload", "batch_size", "n", "device"]
    times, gflops = build_sides(mm, "median_s", keys), build_sides(mm, "gflops", keys)
    cells, ratios = ratio_block(times, baselines, invert=True)
    summaries = summarize_many([gflops[c].values for c in cells])
    rows = []
    for cell, summary in zip(cells, summaries, strict=True):
        workload, batch_size, n, device = cell
        base = fr.baseline_of(baselines, workload)
        side, ref, ratio = times[cell], times.get((workload, batch_size, n, base)), ratios.get(cell)
        result, reason = judge(device, base, side, ref, ratio, "median_s", f"at n {n}")
        rows.append({
            "workload": workload, "device": device, "batch_size": batch_size, "n": n,
            "baseline": base, "repeats": side.ok, "gflops": summary.estimate,
            "gflops_low": summary.low, "gflops_high": summary.high, "interval": summary.kind,
            "median_s": float(np.median(side.values)) if side.n else np.nan,
            **_ratio_columns(device == base, ratio), "verdict": result, "reason": reason,
            "noisy_runs": side.noisy, "disturbed_runs": len(side.disturbed),
        })  # fmt: skip
    table = fr.frame(rows, MATMUL_COLUMNS)
    return table.sort_values(["workload", "device", "batch_size", "n"], ignore_index=True)
