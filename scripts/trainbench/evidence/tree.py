"""The files that make up the workflow (what a copy of it needs to run)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

WORKFLOW_FILES = ("Snakefile", "config.yaml")
WORKFLOW_DIRS = ("rules", "scripts", "profiles", "envs")


def copy_workflow(tree: str | os.PathLike, dst: str | os.PathLike) -> Path:
    """Copy the workflow's own files from ``tree`` into ``dst`` (created if needed);
    results, Snakemake's state, the virtual environment and caches stay behind."""
    tree, dst = Path(tree), Path(dst)
    dst.mkdir(parents=True, exist_ok=True)
    for name in WORKFLOW_FILES:
        shutil.copy2(tree / name, dst / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", ".*")
    for name in WORKFLOW_DIRS:
        shutil.copytree(tree / name, dst / name, ignore=ignore, dirs_exist_ok=True)
    return dst
