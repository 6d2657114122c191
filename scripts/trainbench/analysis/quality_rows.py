"""The record table ``quality`` (rule ``aggregate``): one row per ok training record and
evaluation pass during training — the run's quality curve (trainbench.measure.quality), facts
copied out of the record, nothing computed but the wall clock's origin. Time to a target
is read from it by :mod:`trainbench.analysis.stats.targets`.

Columns: workload, device, batch_size, rep, host; point (0-based), epoch, epoch_end,
steps, samples, train_seconds (the timed training regions so far), wall_seconds (from
the attempt's start to the pass's end, less the canary: what a user of the same training
would wait), eval_seconds, train_joules and energy_window_seconds (training regions
so far; empty where unmeasured), energy_min_seconds (the record's minimum energy
window), eval_every ("epochs 1" / "steps 50"); eval_<metric> for every numeric metric,
and eval_<metric>[<label>] for per-label metrics (text's precision, recall, f1);
not_finite_metrics: the metrics that were not finite at this pass (";"-joined; a record
stores NaN and infinity as null), so that a NaN metric is named, not lost; record.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from trainbench.analysis.record_view import RecordView
from trainbench.analysis.run_rows import viewed
from trainbench.common.vocabulary import MARK_PREFIX

PER_LABEL_METRICS = ("precision", "recall", "f1")


def _metric_columns(metrics: Mapping | None) -> dict:
    out: dict = {}
    not_finite = []
    for key, value in (metrics or {}).items():
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            out[f"eval_{key}"] = value
        elif value is None or isinstance(value, float):  # null in a record: NaN or infinite
            not_finite.append(str(key))
        elif key == "per_label" and isinstance(value, list):
            for row in value:
                if not isinstance(row, Mapping) or "label" not in row:
                    continue
                for name in PER_LABEL_METRICS:
                    if isinstance(row.get(name), (int, float)):
                        out[f"eval_{name}[{row['label']}]"] = row[name]
    if not_finite:
        out["not_finite_metrics"] = ";".join(not_finite)
    return out


def _canary_seconds(marks: Mapping) -> float:
    start, end = marks.get("canary_start"), marks.get("canary_end")
    return float(end - start) if start is not None and end is not None else 0.0


def quality_rows(record: Mapping | RecordView, source: str) -> list[dict]:
    """The rows of one record (none unless it is an ok training record with a curve)."""
    r = viewed(record)
    curve = r.result.quality
    if r.status != "ok" or not r.result.is_training or not curve:
        return []
    marks = (r.wall_time or {}).get("marks") or {}
    canary = _canary_seconds(marks)
    ((unit, every),) = (curve.get("eval_every") or {"epochs": 1}).items()
    energy = r.result.energy
    rows = []
    for point in curve.get("points") or []:
        wall = marks.get(f"{MARK_PREFIX}{point['index']}")
        rows.append(
            {
                "workload": r.cell.workload,
                "device": r.cell.device,
                "batch_size": r.cell.batch_size,
                "rep": r.cell.rep,
                "host": r.environment.host,
                "point": point["index"],
                "epoch": point["epoch"],
                "epoch_end": point["epoch_end"],
                "steps": point["steps"],
                "samples": point["samples"],
                "train_seconds": point["train_seconds"],
                "wall_seconds": wall - canary if wall is not None else None,
                "eval_seconds": point.get("eval_seconds"),
                "train_joules": point.get("train_joules"),
                "energy_window_seconds": point.get("energy_window_seconds"),
                "energy_min_seconds": energy.min_seconds if energy is not None else None,
                "eval_every": f"{unit} {every}",
                **_metric_columns(point.get("metrics")),
                "record": source,
            }
        )
    return rows
