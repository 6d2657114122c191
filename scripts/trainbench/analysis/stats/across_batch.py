"""Devices at their own batch sizes: the ``across_batch_sizes`` table
(docs/statistics.md §4).

With per-device batch sizes (``batch_sizes: {cpu: [16], cuda: [32]}``) a device is judged
only at the sizes the baseline device ran too (:mod:`.verdicts`), so a size it ran alone
has no same-batch verdict, and a device that shares no size with the baseline has none
at all. This table compares such a device's training speed at its own setting with the
baseline's at its own: a comparison **across batch sizes**, labelled so and kept apart
from the same-batch verdict (a larger batch is faster per sample on most devices, so the
ratio says which setting trains faster, not which device). Time to target at each
device's best setting, the other comparison across batch sizes, is ``best_setting``'s
(:mod:`.best_setting`); this table does not repeat it.

**Which pairs.** Per training workload and device D other than the baseline B: D's own
sizes are those D ran and B did not; B's own sizes those B ran and D did not (all of B's
where it has none of its own). One row per own size of D × own size of B. A device that
ran only sizes the baseline ran too gets no row: its same-batch verdicts compare it.

**Numbers and verdict**, by the machinery of the ``speedup`` table (:mod:`.speed`,
:mod:`.intervals`): each side's median training samples/s over its ok records with its
interval (the range below 5 repeats, a bootstrap CI from 5); speedup = D's median ÷ B's
with its interval (the extreme pairwise ratios below 5 runs a side, else a bootstrap CI
of the ratio of medians); verdict and reason by :func:`.speed.judge` (disturbed, short
window, no steady state or fewer than 3 ok repeats on a side: no verdict; else
``faster`` / ``slower`` when the interval lies above / below 1, ``no clear difference``).

Columns: workload, device, batch_size; baseline, baseline_batch_size; same_batch_sizes
(the sizes both ran, where the same-batch verdict is; empty: none); comparison ("across
batch sizes"); n, median, low, high, interval (this device's samples/s); baseline_n,
baseline_median, baseline_low, baseline_high, baseline_interval; speedup, speedup_low,
speedup_high, speedup_interval; verdict, reason; window_phase (what the training windows
cover where a workload's work per step changes by epoch, each side's where they
differ); summary (the row in one sentence: the console's and the reports' line).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pandas as pd
from trainbench.analysis.stats import frames as fr
from trainbench.analysis.stats.intervals import (
    FASTER,
    NO_CLEAR,
    SLOWER,
    ratio_intervals,
    summarize_many,
)
from trainbench.analysis.stats.speed import Side, judge, speed_sides
from trainbench.analysis.tables import interval_text, ratio_text

ACROSS = "across batch sizes"
ACROSS_BATCH_COLUMNS = [
    "workload", "device", "batch_size", "baseline", "baseline_batch_size", "same_batch_sizes",
    "comparison", "n", "median", "low", "high", "interval", "baseline_n", "baseline_median",
    "baseline_low", "baseline_high", "baseline_interval", "speedup", "speedup_low",
    "speedup_high", "speedup_interval", "verdict", "reason", "window_phase", "summary",
]  # fmt: skip


def across_pairs(
    sides: dict[tuple, Side], baselines: fr.Baselines
) -> Iterator[tuple[str, str, int, str, int, list[int]]]:
    """(workload, device, its own size, baseline, the baseline's own size, the shared
    sizes) for every pair of the module docstring, over the cells with a record that is
    ok or failed (a device unavailable everywhere is compared nowhere)."""
    sizes: dict[tuple[str, str], set[int]] = {}
    for (workload, batch_size, device), side in sides.items():
        if side.ok or side.failed:
            sizes.setdefault((str(workload), str(device)), set()).add(int(batch_size))
    for (workload, device), mine in sorted(sizes.items()):
        base = fr.baseline_of(baselines, workload)
        theirs = sizes.get((workload, str(base)), set())
        if base is None or device == base or not theirs:
            continue
        own, shared = sorted(mine - theirs), sorted(mine & theirs)
        base_own = sorted(theirs - mine) or sorted(theirs)
        for batch_size in own:
            for base_size in base_own:
                yield workload, device, batch_size, str(base), base_size, shared


def _phases(runs: pd.DataFrame, workload: str, batch_size: int, device: str) -> str:
    if "window_phase" not in runs:
        return ""
    mine = runs[(runs["workload"] == workload) & (runs["batch_size"] == batch_size)
                & (runs["device"] == device) & (runs["status"] == "ok")]  # fmt: skip
    return "; ".join(sorted({str(v) for v in mine["window_phase"].dropna() if str(v)}))


def _windows(runs: pd.DataFrame, pair: tuple) -> str:
    """What both sides' training windows cover (each side's where they differ; "" where
    every step does the same work), as :func:`.speed.windows_cover` says it."""
    workload, device, batch_size, base, base_size, _ = pair
    own, other = (
        _phases(runs, workload, batch_size, device),
        _phases(runs, workload, base_size, base),
    )
    if own == other:
        return own
    return (f"differs: {device} bs {batch_size} {own or 'whole run'}, "
            f"{base} bs {base_size} {other or 'whole run'}")  # fmt: skip


def _summary(row: dict) -> str:
    """ "across batch sizes, cuda at bs 512 trains 8.1x the samples/s of cpu at bs 64
    (7.2–9x, range of 3 vs 3 runs): faster; not a same-batch verdict"."""
    mine = f"{row['device']} at bs {row['batch_size']}"
    theirs = f"{row['baseline']} at bs {row['baseline_batch_size']}"
    if row["verdict"] in (FASTER, SLOWER, NO_CLEAR):
        span = interval_text(row["speedup_low"], row["speedup_high"])
        what = (f"{mine} trains {ratio_text(row['speedup'])} the samples/s of {theirs} "
                f"({span}x, {row['speedup_interval']}): {row['verdict']}")  # fmt: skip
    else:
        what = f"{mine} vs {theirs}: {row['verdict']} ({row['reason']})"
    return f"{ACROSS}, {what}; not a same-batch verdict"


def across_batch_table(
    runs: pd.DataFrame, baselines: fr.Baselines, workloads: Sequence[str] | None = None
) -> pd.DataFrame:
    """The ``across_batch_sizes`` table; see the module docstring."""
    runs = fr.prepare_runs(runs)
    if workloads is None:
        workloads = [w for w, k in fr.workload_kinds(runs).items() if k == "training"]
    runs = runs[runs["workload"].isin(list(workloads))]
    sides = speed_sides(runs, "samples_per_s")
    pairs = list(across_pairs(sides, baselines))
    cells = [((w, b, d), (w, bb, base)) for w, d, b, base, bb, _ in pairs]
    ratios = ratio_intervals([(sides[c].values, sides[r].values) for c, r in cells])
    summaries = summarize_many([sides[c].values for cell in cells for c in cell])
    rows = []
    for i, (pair, (cell, ref), ratio) in enumerate(zip(pairs, cells, ratios, strict=True)):
        workload, device, batch_size, base, base_size, shared = pair
        mine, theirs = summaries[2 * i], summaries[2 * i + 1]
        verdict, reason = judge(f"{device} bs {batch_size}", f"{base} bs {base_size}",
                                sides[cell], sides[ref], ratio, "samples_per_s", "")  # fmt: skip
        row = {
            "workload": workload, "device": device, "batch_size": batch_size,
            "baseline": base, "baseline_batch_size": base_size,
            "same_batch_sizes": fr.sizes_text(shared), "comparison": ACROSS,
            "n": sides[cell].n, "median": mine.estimate, "low": mine.low, "high": mine.high,
            "interval": mine.kind, "baseline_n": sides[ref].n, "baseline_median": theirs.estimate,
            "baseline_low": theirs.low, "baseline_high": theirs.high,
            "baseline_interval": theirs.kind, "speedup": ratio.estimate,
            "speedup_low": ratio.low, "speedup_high": ratio.high,
            "speedup_interval": ratio.kind, "verdict": verdict, "reason": reason,
            "window_phase": _windows(runs, pair),
        }  # fmt: skip
        rows.append({**row, "summary": _summary(row)})
    return fr.frame(rows, ACROSS_BATCH_COLUMNS)
