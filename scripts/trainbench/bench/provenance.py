"""Which code, config and workload settings a parity benchmark ran
(:mod:`.parity_power`, :mod:`.false_alarm`): the commit, the config file's and each
workload's code hashes, and the rule that a resumed benchmark never mixes runs of two
versions of a workload."""

from __future__ import annotations

import ast
import datetime as dt
import hashlib
import json
import os
import subprocess
from collections.abc import Iterable
from pathlib import Path

from trainbench import workloads


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def workload_code_sha256(module: Path, extra: Iterable[Path] = ()) -> str:
    """SHA-256 over a workload's module and the modules of its package it imports
    (``from .x import``, ``from . import x``), transitively, and ``extra`` files (the
    workload's own code elsewhere, e.g. the text generator), in name order."""
    files, todo = set(), [module, *extra]
    while todo:
        path = todo.pop()
        if path in files or not path.exists():
            continue
        files.add(path)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                names = [node.module] if node.module else [a.name for a in node.names]
                todo += [path.parent / f"{name.replace('.', '/')}.py" for name in names]
    digest = hashlib.sha256()
    for path in sorted(files):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def _own_code(workload: str) -> list[Path]:
    """The files evidence.WORKLOAD_CODE names for ``workload`` (one list for both)."""
    from trainbench.evidence import WORKLOAD_CODE

    root = Path(__file__).resolve().parents[3]
    return [path for pattern in WORKLOAD_CODE.get(workload, ()) for path in root.glob(pattern)]


def git_commit(folder: Path) -> str | None:
    """The checkout's commit, with ``-dirty`` when tracked files other than the
    benchmark results (which a running benchmark rewrites) differ from it."""
    try:
        head = subprocess.run(["git", "-C", str(folder), "rev-parse", "HEAD"], check=True,
                              capture_output=True, text=True).stdout.strip()  # fmt: skip
        dirty = subprocess.run(["git", "-C", str(folder), "diff", "--quiet", "HEAD", "--", ":/",
                                ":(exclude,top)benchmarks/results"],
                               capture_output=True).returncode != 0  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return None
    return head + ("-dirty" if dirty else "")


def config_facts(path: str | Path, config: dict) -> dict:
    """Which config the benchmark ran: its path, the SHA-256 of the file, the training
    workloads' settings as run, their code's hashes, and the parity settings."""
    raw = Path(path).read_bytes()
    code = {
        name: workload_code_sha256(Path(workloads.get(name).__file__), _own_code(name))
        for name in config["workloads"]
        if workloads.info(name, config["workloads"][name]).bundled
    }
    shown = os.path.relpath(path) if Path(path).resolve().is_relative_to(Path.cwd()) else path
    return {
        "path": str(shown),
        "sha256": hashlib.sha256(raw).hexdigest(),
        "workload_code_sha256": code,
        "workloads": config["workloads"],
        "timing": config["timing"],
        "parity": config["report"].get("parity") or {},
        "parity_reference": config["report"]["parity_reference"],
    }


def drop_changed_workloads(previous: dict, facts: dict) -> tuple[dict, list[str]]:
    """``previous`` without the runs of workloads whose code or settings differ from
    ``facts`` (the config as it runs now), and one note per workload dropped: a resumed
    benchmark never mixes runs of two versions of a workload."""
    if not previous.get("runs"):
        return previous, []

    def same(a, b) -> bool:  # as stored in JSON
        return json.dumps(a, sort_keys=True, default=str) == json.dumps(
            b, sort_keys=True, default=str
        )

    old = previous.get("config", {})
    changed = sorted(
        name
        for name in {r["workload"] for r in previous["runs"]}
        if not same(old.get("workload_code_sha256", {}).get(name),
                    facts["workload_code_sha256"].get(name))
        or not same(old.get("workloads", {}).get(name), facts["workloads"].get(name))
    )  # fmt: skip
    if not changed:
        return previous, []
    notes = []
    for name in changed:
        n = sum(r["workload"] == name for r in previous["runs"])
        notes.append(f"{_now()}: {n} earlier runs of {name} dropped on --resume: its code or "
                     "settings changed since they ran")  # fmt: skip
    runs = [r for r in previous["runs"] if r["workload"] not in changed]
    return {**previous, "runs": runs}, notes
