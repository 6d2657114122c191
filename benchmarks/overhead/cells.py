"""Workflow overhead, the cells: a matrix of cells that do almost nothing, run through
the real ``snakemake`` with the tracer, each cell's wall time split into its phases."""

from __future__ import annotations

import copy
from collections import defaultdict
from pathlib import Path

import yaml
from trainbench.evidence.tree import copy_workflow

from .trace import cell_phases, read_trace, snakemake_fixed
from .workflow import median, snakemake, summarise, tracer_dir, workflow_env

CELL_KEYS = [
    "cell_wall_s",
    "overhead_s",
    "snakemake_gap_s",
    "launcher_start_imports_s",
    "child_spawn_imports_s",
    "work_s",
    "child_exit_and_record_s",
]


def cells_config(repeats: int) -> dict:
    """Cells that do almost nothing: one 16x16 matmul on cpu, cuda and mps (unavailable
    here), the last cpu repeat failed on purpose (fault injection)."""
    return {
        "seed": 0,
        "repeats": repeats,
        "devices": ["cpu", "mps", "cuda"],
        "launcher": {"max_attempts": 1, "progress": "never", "allow_fault_injection": True},
        "device_settings": {"cpu": {"threads": None}},
        "workloads": {"matmul": {"sizes": [16], "min_run_time_s": 0.01, "warmup_calls": 1}},
        "fault_injection": [
            {"workload": "matmul", "device": "cpu", "rep": repeats - 1, "fault": "exception"}
        ],
    }


def _targets(workdir: Path, config: dict) -> list[str]:
    """The config's cell records, as the workflow names them (without running anything)."""
    from trainbench import config as tbconfig

    cells = tbconfig.expand_matrix(tbconfig.validate_config(copy.deepcopy(config)))
    return [f"results/runs/{cell.relpath}/metrics.json" for cell in cells]


def measure_cells(tree: Path, tmp: Path, repeats: int, runs: int, log=print) -> dict:
    """``runs`` snakemake runs of :func:`cells_config` in fresh copies of ``tree``: each
    cell's phases, their medians overall and per status, and Snakemake's fixed costs."""
    tracer = tracer_dir(tmp)
    config = cells_config(repeats)
    all_rows, walls, fixed, noop = [], [], [], []
    workdir = None
    for run in range(runs):
        workdir = copy_workflow(tree, tmp / f"cells-{run}")
        (workdir / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
        targets = _targets(workdir, config)
        trace = tmp / f"cells-{run}.jsonl"
        wall, _ = snakemake(
            workdir, "--cores", "1", *targets, env=workflow_env(workdir, tracer, trace)
        )
        procs = read_trace(trace)
        rows = cell_phases(procs, workdir / "results" / "runs")
        for row in rows:
            row["run"] = run
        all_rows += rows
        walls.append(wall)
        fixed.append(snakemake_fixed(procs))
        # Nothing to do: Snakemake's own fixed cost (parse, DAG, file checks).
        noop.append(snakemake(workdir, "--cores", "1", *targets, env=workflow_env(workdir))[0])
        log(
            f"cells run {run + 1}/{runs}: {len(rows)} cells in {wall:.1f} s; median overhead "
            f"{median(r['overhead_s'] for r in rows):.2f} s"
        )
    by_status = defaultdict(list)
    for row in all_rows:
        by_status[row.get("status")].append(row)
    return {
        "config": config,
        "runs": runs,
        "cells_per_run": len(all_rows) // max(runs, 1),
        "snakemake_wall_s": [round(w, 3) for w in walls],
        "snakemake_noop_s": median(noop),
        "snakemake_fixed": {
            key: median(f.get(key) for f in fixed)
            for key in ("start_to_first_job_s", "last_job_to_exit_s")
        },
        "all": summarise(all_rows, CELL_KEYS),
        "by_status": {
            status: summarise(rows, CELL_KEYS) for status, rows in sorted(by_status.items())
        },
        "cells": [
            {k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items()}
            for r in all_rows
        ],
        "records_dir": str(workdir / "results" / "runs") if workdir else None,
    }
