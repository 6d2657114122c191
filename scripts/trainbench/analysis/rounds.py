"""Adaptive repeats (checkpoint ``plan_round``): after the rounds so far, which
cells of a workload get one more repeat. asv adds repeats until a benchmark's
interval is narrow enough; Kalibera & Jones choose repeats for a target precision.
The decision uses the statistics layer's own speedup intervals (trainbench.analysis.stats)."""

from __future__ import annotations

import os
from collections.abc import Sequence

from trainbench.analysis.aggregate import build_tables, load_records
from trainbench.common.records import atomic_write_json


def plan_round(
    record_paths: Sequence[str],
    workload: str,
    rep: int,
    devices: Sequence[str],
    baseline: str | None,
    settings: dict,
    output: str | os.PathLike,
) -> list[list]:
    """Write ``output``: ``{"workload", "rep", "cells": [[device, batch_size], ...]}``,
    the cells that run repeat ``rep``; an empty list ends the rounds."""
    from trainbench.analysis.stats import next_round

    records, _ = load_records(record_paths, skip_invalid=True)
    runs = build_tables(records)["runs"] if records else None
    planned = []
    if runs is not None and not runs.empty:
        wanted = next_round(runs, {workload: list(devices)}, baseline, settings)
        planned = sorted([str(d), int(bs)] for d, bs in wanted.get(workload, []))
    atomic_write_json(
        output,
        {
            "workload": workload,
            "rep": rep,
            "cells": planned,
            "settings": settings,
            "decided_from": len(record_paths),
        },
    )
    return planned
