"""Workflow overhead, the facts kept beside the numbers: the machine, and which
code (commit, folder, uncommitted changes) was measured."""

from __future__ import annotations

import os
import platform
import socket
import subprocess
from importlib import metadata
from pathlib import Path

from trainbench.launch.environment import cpu_model_name

from .workflow import REPO


def _version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def machine_facts() -> dict:
    """Host, CPU, cores, memory, OS, Python and the versions of the packages that matter."""
    return {
        "host": socket.gethostname(),
        "cpu_model": cpu_model_name(),
        "logical_cores": os.cpu_count(),
        "memory_gib": _memory_gib(),
        "os": platform.platform(),
        "python": platform.python_version(),
        "packages": {
            name: _version(name)
            for name in ("torch", "snakemake", "pandas", "numpy", "matplotlib", "seaborn", "scipy")
        },
    }


def _memory_gib() -> float | None:
    try:
        pages, size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        return None
    return round(pages * size / 2**30, 1)


def tree_facts(tree: Path, rev: str | None) -> dict:
    """Which code was measured: the commit (``rev``) or the folder, and whether the
    working tree had uncommitted changes."""

    def git(*args: str) -> str | None:
        out = subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True)
        return out.stdout.strip() if out.returncode == 0 else None

    if rev:
        return {"source": f"git archive {rev}", "commit": git("rev-parse", rev)}
    if tree.resolve() != REPO:
        return {"source": str(tree), "commit": None}
    dirty = git("status", "--porcelain", "--untracked-files=no")
    return {"source": str(tree), "commit": git("rev-parse", "HEAD"), "dirty": bool(dirty)}
