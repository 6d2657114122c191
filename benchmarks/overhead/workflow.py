"""Workflow overhead, running the workflow: a copy of its files (the working tree's
or a commit's), the process tracer, the environment each process gets, ``snakemake``
itself, and the medians the results keep."""

from __future__ import annotations

import io
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import time
from pathlib import Path

from trainbench.evidence.tree import WORKFLOW_DIRS, WORKFLOW_FILES

REPO = Path(__file__).resolve().parents[2]
TRACER = Path(__file__).with_name("tracer.py")


def export_tree(rev: str, dst: Path) -> Path:
    """The workflow files of commit ``rev`` (git archive: the repository is not touched)."""
    dst.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", rev, *WORKFLOW_FILES, *WORKFLOW_DIRS],
        capture_output=True,
        check=True,
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(dst, filter="data")
    return dst


def tracer_dir(tmp: Path) -> Path:
    """A folder holding the tracer as ``sitecustomize``, for ``PYTHONPATH``."""
    folder = tmp / "tracer"
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy2(TRACER, folder / "sitecustomize.py")
    return folder


def workflow_env(workdir: Path, tracer: Path | None = None, trace: Path | None = None) -> dict:
    """The environment of a process in the copy ``workdir``: its scripts on
    ``PYTHONPATH``, the tracer (writing to ``trace``) where given, fault injection off."""
    env = {k: v for k, v in os.environ.items() if k != "TRAINBENCH_ALLOW_FAULTS"}
    paths = [str(tracer)] if tracer else []
    paths += [str(workdir / "scripts"), os.environ.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    env.pop("TRAINBENCH_TRACE", None)
    if trace:
        env["TRAINBENCH_TRACE"] = str(trace)
    return env


def snakemake(workdir: Path, *args: str, env: dict, timeout: float = 1800) -> tuple[float, str]:
    """Run ``python -m snakemake ARGS`` in ``workdir``; (wall seconds, output). Raises on failure."""
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", *args],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )
    wall = time.perf_counter() - t0
    output = proc.stdout + proc.stderr
    if proc.returncode != 0:
        raise RuntimeError(f"snakemake {' '.join(args)} failed in {workdir}:\n{output[-4000:]}")
    return wall, output


def median(values) -> float | None:
    """The median of the values that are not None, rounded to 4 decimals; None without any."""
    values = [v for v in values if v is not None]
    return round(statistics.median(values), 4) if values else None


def summarise(rows: list[dict], keys: list[str]) -> dict:
    """The row count and the median of each key over the rows."""
    return {"n": len(rows), **{key: median(r.get(key) for r in rows) for key in keys}}
