"""Samples to target as a check beside the time-to-target verdict (docs/statistics.md §4):
the ``time_to_target`` table's samples columns.

At one batch size a device trains the same model on the same batches as the baseline
device (the workload's baseline, as :mod:`.targets` uses it), so it should need about as
many training samples to reach the target. A device that needs clearly more may be
training wrong even where parity passes (a numerics fault that slows learning without
moving the final metric past the gross check). MLPerf Training checks a submission the
same way with its reference convergence points: the samples (epochs) a submission needs
to converge, non-converged runs counted as infinite, against the distribution of the
reference's runs at that batch size. Here the check is stated, not a failure.

**The rule** (the first that applies; every count is an integer):

1. the baseline's own row: no check ("");
2. ``insufficient data``: this cell or the baseline's cell at this batch size has no
   samples to target (no usable target or curve), fewer than 3 ok repeats on a side
   (:data:`.speed.MIN_REPEATS`), or the baseline's median repeat does not reach the
   target (no anchor);
3. with a repeat's samples to target = ``samples`` of its first evaluation pass that
   meets the target, a censored repeat +inf (never dropped, as in :mod:`.targets`);
   m = this device's median over repeats; [lo, hi] = the baseline's range over its
   repeats (hi = +inf when one of its repeats is censored); r = the resolution, one
   evaluation interval in samples (the median spacing between consecutive passes,
   the first from sample 0, of each cell's records; the larger of the two cells'):
   ``more samples`` when m > hi + r, ``fewer samples`` when m < lo − r, else
   ``as the baseline``.

Samples to target lie on the grid of evaluation passes, so "beyond the range by more
than one evaluation" means at least two passes after the baseline's slowest repeat
(before its quickest): a device one evaluation later is not flagged, one needing twice
the samples of a baseline that reaches the target at its second pass or later is.
Among repeats of one distribution, a median beyond the other side's whole range by two
passes needs the spread over repeats to span three passes or more, so a flag is rare
for a device that trains as the baseline does. Disturbed repeats are kept: samples are
counted, not timed.

Columns (appended to ``time_to_target`` by :func:`with_samples_check`):
samples_resolution (r, in samples), baseline_samples_min and baseline_samples_max
(lo, hi), samples_ratio (m ÷ the baseline's median; +inf where the median repeat did
not reach the target), samples_check (``more samples``, ``fewer samples``,
``as the baseline``, ``insufficient data``, or "" on the baseline's row) and
samples_note (the check in one sentence, the console's and the reports' line).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd
from trainbench.analysis.stats import frames as fr
from trainbench.analysis.stats.intervals import INSUFFICIENT
from trainbench.analysis.stats.speed import MIN_REPEATS
from trainbench.analysis.stats.targets import workload_cells
from trainbench.analysis.tables import ratio_text

MORE = "more samples"
FEWER = "fewer samples"
AS_BASELINE = "as the baseline"
FLAGGED = (MORE, FEWER)

SAMPLES_CHECK_COLUMNS = [
    "samples_resolution", "baseline_samples_min", "baseline_samples_max", "samples_ratio",
    "samples_check", "samples_note",
]  # fmt: skip


@dataclass(frozen=True)
class SamplesToTarget:
    """One cell's repeats: samples to target (+inf where censored), how many samples the
    censored ones trained, and one evaluation interval in samples."""

    samples: np.ndarray
    budget: int
    resolution: int

    @property
    def repeats(self) -> int:
        return int(self.samples.size)

    @property
    def reached(self) -> int:
        return int(np.isfinite(self.samples).sum())

    @property
    def median(self) -> float:
        return float(np.median(self.samples))


def _resolution(curve: pd.DataFrame) -> int:
    """The median spacing in samples between consecutive passes of a cell's records
    (the first from sample 0)."""
    gaps: list[float] = []
    for _, g in curve.groupby("record", sort=True):
        samples = np.sort(pd.to_numeric(g["samples"], errors="coerce").dropna().to_numpy(float))
        gaps += np.diff(np.concatenate([[0.0], samples])).tolist()
    return int(round(float(np.median(gaps)))) if gaps else 0


def samples_to_target(
    quality: pd.DataFrame | None,
    runs: pd.DataFrame,
    targets: Mapping[str, Mapping | None],
    workloads: list[str],
) -> dict[tuple[str, str, int], SamplesToTarget]:
    """{(workload, device, batch_size): its repeats' samples to target}, for the cells
    whose records carry the target's metric: the repeat outcomes of :mod:`.targets`
    (its target resolution and reached rule), not computed here again."""
    out = {}
    for workload, cells in workload_cells(quality, runs, targets, workloads):
        if cells.outcomes.empty:
            continue
        for (device, batch_size), g in cells.outcomes.groupby(["device", "batch_size"], sort=True):
            if not g["has_metric"].any():
                continue
            cell = cells.curve[
                (cells.curve["device"] == device) & (cells.curve["batch_size"] == batch_size)
            ]
            budget = pd.to_numeric(cell["samples"], errors="coerce").max()
            out[(str(workload), str(device), int(batch_size))] = SamplesToTarget(
                samples=g["samples"].to_numpy(dtype=float),
                budget=int(budget) if pd.notna(budget) else 0,
                resolution=_resolution(cell),
            )
    return out


def _count(x: float) -> str:
    return str(int(x)) if math.isfinite(x) else "∞"


def _range(ref: SamplesToTarget) -> str:
    low, high = float(np.min(ref.samples)), float(np.max(ref.samples))
    text = f"{_count(low)}–{_count(high)}"
    missed = ref.repeats - ref.reached
    return text + (f" ({fr.plural(missed, 'repeat')} not reaching it)" if missed else "")


def _insufficient(why: str) -> dict:
    return {"samples_check": INSUFFICIENT, "samples_note": f"no samples check: {why}"}


def _gate(device, base, batch_size, mine, ref) -> dict | None:
    """The rows that get no comparison (rules 1 and 2), else None."""
    if device == base:
        return {"samples_check": "", "samples_note": ""}
    if mine is None:
        return _insufficient("no samples to target in this cell's records")
    if ref is None:
        return _insufficient(f"no samples to target of the baseline {base} at bs {batch_size}")
    for name, side in ((device, mine), (base, ref)):
        if side.repeats < MIN_REPEATS:
            return _insufficient(
                f"{name} has {fr.plural(side.repeats, 'ok repeat')}; the check needs {MIN_REPEATS}"
            )
    if not math.isfinite(ref.median):
        return _insufficient(
            f"the baseline {base} does not reach the target in its median repeat at bs {batch_size}"
        )
    return None


def samples_check(
    device: str,
    base: str | None,
    batch_size: int,
    mine: SamplesToTarget | None,
    ref: SamplesToTarget | None,
) -> dict:
    """The samples columns of one ``time_to_target`` row: the rule of the module docstring."""
    gated = _gate(device, base, batch_size, mine, ref)
    empty = {c: np.nan for c in SAMPLES_CHECK_COLUMNS[:4]}
    if gated is not None:
        if ref is not None and mine is not None and device != base:
            empty.update(baseline_samples_min=float(np.min(ref.samples)),
                         baseline_samples_max=float(np.max(ref.samples)))  # fmt: skip
        return {**empty, **gated}
    assert mine is not None and ref is not None
    resolution = max(mine.resolution, ref.resolution)
    low, high = float(np.min(ref.samples)), float(np.max(ref.samples))
    median = mine.median
    ratio = median / ref.median
    if median > high + resolution:
        check = MORE
    elif median < low - resolution:
        check = FEWER
    else:
        check = AS_BASELINE
    anchor = f"{base}'s range {_range(ref)} at bs {batch_size}"
    step = f"one evaluation: {resolution} samples"
    if check == AS_BASELINE:
        note = (f"{device} needs {_count(median)} samples in its median repeat: within "
                f"{anchor} ({step})")  # fmt: skip
    elif not math.isfinite(median):
        note = (f"{device}'s median repeat does not reach the target within {mine.budget} "
                f"samples ({mine.reached} of {mine.repeats} repeats reach it; {anchor}, {step}): "
                "it may train wrong; a check, not a failure")  # fmt: skip
    else:
        side = "beyond" if check == MORE else "short of"
        note = (f"{device} needs {ratio_text(ratio)} the baseline's median samples "
                f"({_count(median)} in its median repeat, more than one evaluation {side} "
                f"{anchor}; {step}): it may train {'wrong' if check == MORE else 'differently'}; "
                "a check, not a failure")  # fmt: skip
    return {"samples_resolution": resolution, "baseline_samples_min": low,
            "baseline_samples_max": high, "samples_ratio": ratio, "samples_check": check,
            "samples_note": note}  # fmt: skip


def with_samples_check(
    table: pd.DataFrame,
    quality: pd.DataFrame | None,
    runs: pd.DataFrame,
    baselines: fr.Baselines,
    targets: Mapping[str, Mapping | None],
    workloads: list[str],
) -> pd.DataFrame:
    """The ``time_to_target`` table with :data:`SAMPLES_CHECK_COLUMNS` appended."""
    cells = samples_to_target(quality, runs, targets, workloads)
    rows = []
    for workload, device, batch_size in zip(
        table["workload"], table["device"], table["batch_size"], strict=True
    ):
        base = fr.baseline_of(baselines, workload)
        key, ref_key = (workload, device, int(batch_size)), (workload, base, int(batch_size))
        rows.append(
            samples_check(device, base, int(batch_size), cells.get(key), cells.get(ref_key))
        )
    checks = fr.frame(rows, SAMPLES_CHECK_COLUMNS)
    checks["samples_resolution"] = checks["samples_resolution"].astype("Int64")  # a count
    checks.index = table.index
    return (
        pd.concat([table, checks], axis=1)
        if len(table)
        else table.reindex(columns=[*table.columns, *SAMPLES_CHECK_COLUMNS])
    )
