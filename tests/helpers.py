"""Helpers shared by the launcher and workflow tests (no fixtures: plain functions)."""

from __future__ import annotations

import copy
import os
import re
import subprocess
import sys
from pathlib import Path

import psutil
import yaml
from trainbench.evidence import tree

REPO = Path(__file__).resolve().parents[1]
FAULTS_ENV = "TRAINBENCH_ALLOW_FAULTS"


def tiny_config(**overrides) -> dict:
    """A config small enough to run every cell in a few seconds on two cores.

    Not yet validated: pass it (or a deep copy) to trainbench.config.validate_config,
    which fills in the schema defaults. Top-level keys in ``overrides`` replace
    the defaults here."""
    config = {
        "seed": 0,
        "repeats": 1,
        "devices": ["cpu", "cuda"],
        "launcher": {"max_attempts": 1, "timeout_s": 120, "progress": "never"},
        "device_settings": {"cpu": {"threads": None}},
        "workloads": {
            "image_cnn": {
                "batch_sizes": [32],
                "epochs": 1,
                "warmup_steps": 1,
                "data": {"source": "synthetic", "n_train": 128, "n_test": 64, "image_size": 16},
            },
            "matmul": {"sizes": [16, 32], "min_run_time_s": 0.01},
        },
    }
    config.update(copy.deepcopy(overrides))
    return config


def write_config(path: str | os.PathLike, config: dict) -> Path:
    path = Path(path)
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def copy_workflow(dst: str | os.PathLike) -> Path:
    """Copy this checkout's workflow files into ``dst`` (created if needed)."""
    return tree.copy_workflow(REPO, dst)


def run_snakemake(
    workdir: str | os.PathLike,
    *args: str,
    timeout: float = 300,
    allow_faults: bool = False,
    env: dict | None = None,
) -> subprocess.CompletedProcess:
    """Run ``python -m snakemake ARGS`` in ``workdir``; never raises on a non-zero exit.

    TRAINBENCH_ALLOW_FAULTS is removed from the environment unless ``allow_faults``,
    so only the config can switch fault injection on. The copied tree's own
    ``scripts/`` goes first on PYTHONPATH, so the rule scripts and the cell
    processes import the copy's trainbench, not the installed one. ``env`` adds
    or overrides further variables."""
    full_env = dict(os.environ)
    full_env.pop(FAULTS_ENV, None)
    if allow_faults:
        full_env[FAULTS_ENV] = "1"
    scripts = str(Path(workdir) / "scripts")
    full_env["PYTHONPATH"] = os.pathsep.join(filter(None, [scripts, os.environ.get("PYTHONPATH")]))
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "snakemake", *args],
        cwd=workdir,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def backend_available(backend: str) -> bool:
    """Whether torch can use ``backend`` here (decides if a cell should be ok or unavailable)."""
    if backend == "cpu":
        return True
    import torch

    if backend == "cuda":
        return bool(torch.cuda.is_available())
    if backend == "mps":
        mps = getattr(torch.backends, "mps", None)
        return bool(mps is not None and mps.is_available())
    raise ValueError(backend)


def failed_cells(workdir: str | os.PathLike, *args: str) -> list[str]:
    """The failed cells' records, as `scripts/failed_runs.py` lists them for --forcerun."""
    proc = subprocess.run(
        [sys.executable, "scripts/failed_runs.py", *args],
        cwd=workdir,
        capture_output=True,
        text=True,
        check=True,
    )
    return proc.stdout.split()


def rerun_failed(
    workdir: str | os.PathLike, listed: list[str], launcher: dict, timeout: float = 600
) -> subprocess.CompletedProcess:
    """Rerun exactly ``listed`` with other launcher settings (a second config file:
    launcher settings never rerun a cell by themselves)."""
    write_config(Path(workdir) / "rerun.yaml", {"launcher": launcher})
    return run_snakemake(
        workdir,
        "--cores", "1", "results/report.md", "--configfile", "rerun.yaml", "--forcerun", *listed,
        timeout=timeout,
    )  # fmt: skip


def executed_rules(output: str) -> list[str]:
    """Rules of the jobs a snakemake run finished, from its console: trainbench's
    lines ("[ 3/17] run_cell  ...") or, with --verbose, Snakemake's own."""
    ours = re.findall(r"^\[\s*\d+/[\d?]+\] (\w+)", output, re.M)
    return ours or re.findall(r"Finished jobid: \d+ \(Rule: (\w+)\)", output)


def _is_cell(proc: psutil.Process) -> bool:
    cmdline = " ".join(proc.cmdline())
    if "trainbench.launch.child" in cmdline:
        return True
    return "trainbench.launch.fork_server" in cmdline and any(
        "/.attempt-" in f.path for f in proc.open_files()
    )


def cells_here(workflow: Path) -> list[psutil.Process]:
    """The cell processes running in ``workflow``: spawned (``-m trainbench.launch.child``) or
    forked from the run's fork server (its command line, holding an attempt's files)."""
    found = []
    for proc in psutil.process_iter():
        try:
            if _is_cell(proc) and Path(proc.cwd()).resolve() == workflow.resolve():
                found.append(proc)
        except psutil.Error:
            continue
    return found
