"""Recover a results folder after Snakemake itself was killed (SIGKILL, power loss).

SIGINT and SIGTERM are handled by Snakemake and the launcher (running cells are
stopped, incomplete outputs are marked and rerun thanks to `rerun-incomplete`).
A SIGKILL leaves two things behind: Snakemake's directory lock, and cell
processes that keep running as orphans. Before a new run, if no Snakemake is
alive in this folder, stop those orphans (their cells rerun, being incomplete)
and remove the stale lock.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import psutil

CELL_MARKERS = ("trainbench.launch.child", "run_cell.py")


def _same_dir(proc: psutil.Process, workdir: Path) -> bool:
    try:
        return Path(proc.cwd()).resolve() == workdir
    except (psutil.Error, OSError):
        return False


def _cmdline(proc: psutil.Process) -> str:
    try:
        return " ".join(proc.cmdline())
    except psutil.Error:
        return ""


def live_snakemake(workdir: Path) -> list[psutil.Process]:
    me = os.getpid()
    return [
        p
        for p in psutil.process_iter()
        if p.pid != me
        and "snakemake" in _cmdline(p)
        and not any(m in _cmdline(p) for m in CELL_MARKERS)
        and ".snakemake/scripts" not in _cmdline(p)
        and _same_dir(p, workdir)
    ]


def orphan_cells(workdir: Path) -> list[psutil.Process]:
    me = os.getpid()
    return [
        p
        for p in psutil.process_iter()
        if p.pid != me and any(m in _cmdline(p) for m in CELL_MARKERS) and _same_dir(p, workdir)
    ]


def recover(workdir: str | Path = ".", snakemake: str | None = None) -> list[str]:
    """Stop orphans and unlock, if and only if no Snakemake runs here. Returns what was done."""
    workdir = Path(workdir).resolve()
    locks = workdir / ".snakemake" / "locks"
    if not locks.is_dir() or not any(locks.iterdir()):
        return []
    if live_snakemake(workdir):
        return ["a Snakemake process is running in this folder: nothing done"]
    done = []
    orphans = orphan_cells(workdir)
    for proc in orphans:
        done.append(f"stopped orphaned cell process {proc.pid}: {_cmdline(proc)[:120]}")
        proc.terminate()
    _, alive = psutil.wait_procs(orphans, timeout=10)
    for proc in alive:
        proc.kill()
    command = [snakemake or sys.executable, *([] if snakemake else ["-m", "snakemake"]), "--unlock"]
    subprocess.run(command, cwd=workdir, check=True, capture_output=True)
    done.append("removed the stale Snakemake lock left by a killed run")
    return done


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="After a killed run: stop its orphaned cell processes and remove "
        "Snakemake's stale lock, only when no Snakemake runs in the folder (`make "
        "report` runs this first)."
    )
    parser.add_argument("workdir", nargs="?", default=".", help="the workflow folder (default: .)")
    args = parser.parse_args(argv)
    for line in recover(args.workdir):
        print(f"trainbench: {line}", file=sys.stderr)
    return 0
