"""Workflow overhead, process start-up: ``python -X importtime`` of the imports each
process pays, and Snakemake's own start-up (``snakemake --version``)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

from .workflow import median, workflow_env

# What each process imports before it does anything (for python -X importtime).
IMPORTS = {
    "torch": "import torch",
    "run_cell script (launcher)": "import trainbench.config, trainbench.launch.launcher",
    "child before its work": (
        "import numpy, torch; from trainbench import workloads, context, devices, "
        "environment, faults, trackers, training"
    ),
    "snakemake script preamble": "import pickle, snakemake.iocontainers, snakemake.logging",
    "aggregate script": "import trainbench.analysis.aggregate",
    "statistics script": "import trainbench.analysis.tables, trainbench.analysis.stats",
    "figures script": "import trainbench.analysis.tables, trainbench.analysis.figures",
    "report scripts": "import trainbench.analysis.report",
}


def _importtime_top(stderr: str, limit: int = 8) -> list[dict]:
    rows = []
    for line in stderr.splitlines():
        match = re.match(r"import time:\s+(\d+) \|\s+(\d+) \|( +)(\S+)", line)
        if match:
            rows.append(
                {
                    "module": match.group(4),
                    "depth": (len(match.group(3)) - 1) // 2,
                    "cumulative_s": int(match.group(2)) / 1e6,
                }
            )
    rows.sort(key=lambda r: -r["cumulative_s"])
    return [{**r, "cumulative_s": round(r["cumulative_s"], 3)} for r in rows[:limit]]


def measure_snakemake_start(tree: Path, reps: int) -> dict:
    """``snakemake --version``: Snakemake's own start-up (its imports and executor
    plugins), which every run pays once before it reads the Snakefile."""
    walls = []
    for _ in range(reps):
        t0 = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "snakemake", "--version"],
            env=workflow_env(tree),
            cwd=tree,
            check=True,
            capture_output=True,
        )
        walls.append(time.perf_counter() - t0)
    plugins = sorted(
        dist.metadata["Name"]
        for dist in metadata.distributions()
        if (dist.metadata["Name"] or "").startswith("snakemake-executor-plugin-")
    )
    out = {"wall_s": median(walls), "reps": reps, "executor_plugins": plugins}
    if "snakemake-executor-plugin-slurm" in plugins and shutil.which("scontrol"):
        # The Slurm plugin asks `scontrol show config` when it is imported.
        t0 = time.perf_counter()
        try:
            proc = subprocess.run(
                ["scontrol", "show", "config"], capture_output=True, timeout=30, check=False
            )
            out["scontrol_show_config_rc"] = proc.returncode
        except subprocess.TimeoutExpired:
            out["scontrol_show_config_rc"] = "timeout"
        out["scontrol_show_config_s"] = round(time.perf_counter() - t0, 3)
    return out


def measure_imports(tree: Path, reps: int) -> dict:
    """Each process's imports (:data:`IMPORTS`): the wall time of a process that only
    imports them, and its slowest imports from ``python -X importtime``."""
    env = workflow_env(tree)
    out = {}
    for name, statement in IMPORTS.items():
        walls = []
        for _ in range(reps):
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-c", statement], env=env, cwd=tree, check=True)
            walls.append(time.perf_counter() - t0)
        profile = subprocess.run(
            [sys.executable, "-X", "importtime", "-c", statement],
            env=env,
            cwd=tree,
            capture_output=True,
            text=True,
            check=True,
        )
        out[name] = {
            "statement": statement,
            "process_wall_s": median(walls),
            "reps": reps,
            "slowest_imports": _importtime_top(profile.stderr),
        }
    return out
