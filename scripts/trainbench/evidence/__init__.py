"""Evidence folders under ``docs/measured/``: what a GPU run made, which commit made
it, and whether the code that measures has changed since (``scripts/evidence.py``).

A folder holds one named run's report, per-workload reports, tables and figures, its
records compressed (``records.tgz``: every ``metrics.json`` and float64 reference, no
data sets), and ``EVIDENCE.json``: the commit, the machine, the command and its wall
time, and the behaviour fingerprint (:mod:`.behaviour`: per definition, not per file)
of the **measurement code** — the code that runs in a cell or shapes what a cell
measures (see :data:`ANALYSIS_ONLY` for what is not). The
tables, figures and reports are the analysis of those records: they can be made again
from ``records.tgz`` with the current analysis code on any machine (``render``), so a
change to the statistics never needs a GPU; a change to the measurement code does,
and :func:`stale_files` lists it.
"""

from __future__ import annotations

import datetime as dt
import fnmatch
import hashlib
import json
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from trainbench.common.behaviour import ANALYSIS_ONLY, MEASUREMENT_CODE
from trainbench.common.records import atomic_write_json
from trainbench.evidence import behaviour

EVIDENCE_FILE = "EVIDENCE.json"
RECORDS_ARCHIVE = "records.tgz"
# Code that measures and code that only reads records: trainbench.common.code_identity,
# where every record's behaviour digest is taken from the same lists.
# What a rendered run keeps besides its records (paths relative to the results folder).
RENDERED = ("report.md", "reports/*.md", "tables/*.csv", "tables/*.md", "figures/*.png")
RECORD_PATTERNS = (
    "runs/*/*/bs*/rep*/metrics.json",
    "references/*/bs*/rep*/reference.json",
    "rounds/*/rep*.json",
)


# The code only one workload runs: evidence that did not run a workload does not depend
# on it (a change to the text generator leaves the CNN's evidence current).
WORKLOAD_CODE = {
    "text_multilabel": (
        "scripts/trainbench/workloads/textdata/*",
        "scripts/trainbench/workloads/text_multilabel*.py",
    ),
    "image_cnn": ("scripts/trainbench/workloads/image_cnn.py",),
    "matmul": ("scripts/trainbench/workloads/matmul.py",),
    "clip": ("scripts/trainbench/workloads/clip*.py",),
    "two_tower": ("scripts/trainbench/workloads/two_tower*.py",),
}


def _other_workloads_code(path: str, workloads: Iterable[str]) -> bool:
    ran = set(workloads)
    return any(
        fnmatch.fnmatch(path, pattern)
        for name, patterns in WORKLOAD_CODE.items()
        if name not in ran
        for pattern in patterns
    )


def measurement_files(
    root: Path, extra: Iterable[str] = (), workloads: Iterable[str] | None = None
) -> list[str]:
    """Every file of measurement code under ``root`` (relative paths, sorted), plus
    ``extra`` (a run's own config files). With ``workloads`` (the workloads a piece of
    evidence ran), the code of the other workloads is left out."""
    found = set(extra)
    for pattern in MEASUREMENT_CODE:
        found.update(str(p.relative_to(root)) for p in root.glob(pattern) if p.is_file())
    kept = (f for f in found if not any(fnmatch.fnmatch(f, a) for a in ANALYSIS_ONLY))
    if workloads is not None:
        workloads = list(workloads)
        kept = (f for f in kept if not _other_workloads_code(f, workloads))
    return sorted(kept)


def config_key(config_files: Sequence[str]) -> str:
    return "config: " + " + ".join(config_files) + " (merged and validated; the workloads run)"


def resolved_config_digest(
    root: Path, config_files: Sequence[str], workloads: Iterable[str] | None
) -> str | None:
    """SHA-256 of the config ``config_files`` make (merged as Snakemake merges them,
    validated, defaults filled), its workloads cut to ``workloads``: a change to
    config.yaml's text settings leaves a CNN run's evidence current. None when the
    files no longer make a valid config (a change, as any)."""
    from trainbench.config import read_merged_config
    from trainbench.config.files import ConfigRefused

    try:
        merged, _ = read_merged_config([root / f for f in config_files])
    except (ConfigRefused, OSError):
        return None
    if workloads is not None:
        ran = set(workloads)
        merged["workloads"] = {k: v for k, v in merged["workloads"].items() if k in ran}
    text = json.dumps(merged, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def code_fingerprint(
    root: Path,
    config_files: Sequence[str],
    workloads: Iterable[str] | None,
    code_files: Sequence[str] = (),
) -> dict:
    """What measured: the behaviour fingerprint (:mod:`.behaviour`) of the measurement
    code (and ``code_files``, a benchmark's own, e.g. its suite), and a run's config as
    it resolved (not its files' bytes) when it was made from config files."""
    workloads = None if workloads is None else list(workloads)
    code = behaviour.fingerprint(root, measurement_files(root, code_files, workloads))
    if config_files:
        digest = resolved_config_digest(root, config_files, workloads)
        code["files"][config_key(config_files)] = digest or "invalid"
    return code


def stale_files(folder: Path, root: Path) -> list[str]:
    """What differs from the measurement code that made the evidence in ``folder``:
    Python definitions (``code name``) and other files changed, added or removed. A
    folder made with the first fingerprint (files by path) cannot be compared by
    behaviour: it says so."""
    meta = json.loads((folder / EVIDENCE_FILE).read_text())
    then = meta["measurement_code"]
    if then.get("version") != behaviour.VERSION:
        return [
            f"made with fingerprint v{then.get('version', 1)}, not v{behaviour.VERSION}: "
            "measure again"
        ]
    now = code_fingerprint(
        root, meta.get("config_files", []), meta.get("workloads"), meta.get("code_files", [])
    )
    return behaviour.changed(then, now)


def evidence_folders(root: Path) -> list[Path]:
    return sorted(p.parent for p in (root / "docs" / "measured").glob(f"*/{EVIDENCE_FILE}"))


def staleness(root: Path) -> dict[str, list[str]]:
    """Per evidence folder (relative path), the measurement code changed since it was made."""
    return {str(f.relative_to(root)): stale_files(f, root) for f in evidence_folders(root)}


# -- making evidence -------------------------------------------------------------------


def _matches(results: Path, patterns: Sequence[str]) -> list[Path]:
    return sorted({p for pattern in patterns for p in results.glob(pattern) if p.is_file()})


def pack_records(results: Path, archive: Path) -> int:
    """``records.tgz`` of a results folder's records (paths relative to it); the count."""
    files = _matches(results, RECORD_PATTERNS)
    tmp = archive.with_name(f".{archive.name}.tmp")
    with tarfile.open(tmp, "w:gz") as tar:
        for path in files:
            info = tar.gettarinfo(str(path), arcname=str(path.relative_to(results)))
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
            with open(path, "rb") as fh:
                tar.addfile(info, fh)
    tmp.replace(archive)
    return len(files)


def copy_rendered(results: Path, dest: Path) -> list[str]:
    """Replace ``dest``'s rendered files (reports, tables, figures) with ``results``'."""
    for pattern in RENDERED:
        for old in dest.glob(pattern):
            old.unlink()
    copied = []
    for path in _matches(results, RENDERED):
        target = dest / path.relative_to(results)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)
        copied.append(str(path.relative_to(results)))
    return copied


@dataclass
class Made:
    """How a piece of evidence was made (EVIDENCE.json's provenance part)."""

    command: list[str]
    seconds: float
    commit: str
    config_files: list[str]
    workloads: list[str] | None = None  # None: every workload's code counts
    code_files: list[str] = field(default_factory=list)  # a benchmark's own (its suite)
    # The code that measured, by its source fingerprint, from the records or the tree
    # (:mod:`.source`); never typed in. None: not named (folders made before it was).
    code: dict | None = None


def write_evidence(dest: Path, root: Path, made: Made, facts: dict) -> dict:
    """Write ``dest``'s EVIDENCE.json: how it was made, ``facts``, the behaviour
    fingerprint of the measurement code and the source that measured; its content."""
    meta = {
        "commit": made.commit,
        **({"code": made.code} if made.code is not None else {}),
        "workloads": made.workloads,
        "made_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "command": " ".join(made.command),
        "wall_seconds": round(made.seconds, 1),
        "config_files": made.config_files,
        "code_files": made.code_files,
        **facts,
        "measurement_code": code_fingerprint(
            root, made.config_files, made.workloads, made.code_files
        ),
        "note": f"measurement_code: {behaviour.METHOD}; `python "
        "scripts/evidence.py check` lists what changed since. The tables, figures and "
        "reports are made from records.tgz: `python scripts/evidence.py render` remakes "
        "them with the current analysis code. code: the source fingerprint of the code "
        "that measured (source_from: the records, the results files or the tree the "
        "benchmarks ran in); commit: what git said on the host; `python "
        "scripts/evidence.py verify` checks that commit's tree has that source.",
    }
    atomic_write_json(dest / EVIDENCE_FILE, meta)
    return meta


def collect_run(results: Path, dest: Path, root: Path, made: Made, facts: dict) -> dict:
    """One named run's evidence folder: rendered outputs, records.tgz, EVIDENCE.json."""
    dest.mkdir(parents=True, exist_ok=True)
    count = pack_records(results, dest / RECORDS_ARCHIVE)
    copied = copy_rendered(results, dest)
    return write_evidence(dest, root, made, {**facts, "records": count, "rendered": copied})


def run_logged(
    command: list[str], log: Path, cwd: Path, env: dict[str, str] | None = None
) -> float:
    """Run ``command`` with its output appended to ``log``; its wall seconds. Raises
    CalledProcessError with the log's tail when it fails."""
    import os

    log.parent.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    with open(log, "a") as fh:
        fh.write(f"$ {' '.join(command)}\n")
        fh.flush()
        done = subprocess.run(
            command, cwd=cwd, stdout=fh, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}
        )
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        tail = log.read_text()[-3000:]
        raise subprocess.CalledProcessError(done.returncode, command, output=tail)
    return seconds


# -- rendering again from the records ----------------------------------------------------


def render(folder: Path, root: Path, cores: int = 2) -> list[str]:
    """Make ``folder``'s tables, figures and reports again from its ``records.tgz`` with
    this checkout's analysis code, replacing the rendered files in ``folder``; returns
    them. In a temporary copy of the workflow whose config.yaml adds
    ``aggregate.records_only`` (no data set is built, no cell runs), under the run's own
    name and config files, so what comes out is what the run itself rendered."""
    from trainbench.evidence.tree import copy_workflow

    meta = json.loads((folder / EVIDENCE_FILE).read_text())
    configs = [c for c in meta["config_files"] if c != "config.yaml"]
    with tempfile.TemporaryDirectory() as tmp:
        work = copy_workflow(root, tmp)
        for config in configs:
            (work / config).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(root / config, work / config)
        base = yaml.safe_load((work / "config.yaml").read_text())
        base.setdefault("aggregate", {})["records_only"] = True
        (work / "config.yaml").write_text(yaml.safe_dump(base, sort_keys=False))
        merged = {}
        for config in configs:
            merged.update(yaml.safe_load((work / config).read_text()) or {})
        run_name = merged.get("run_name") or base.get("run_name") or ""
        results = work / "results" / run_name
        results.mkdir(parents=True, exist_ok=True)
        with tarfile.open(folder / RECORDS_ARCHIVE) as tar:
            tar.extractall(results, filter="data")
        command = [sys.executable, "-m", "snakemake", "--cores", str(cores)]
        if configs:
            command += ["--configfile", *configs]
        command += ["--", str(results.relative_to(work) / "report.md")]
        run_logged(command, work / "render.log", work, {"PYTHONPATH": str(work / "scripts")})
        return copy_rendered(results, folder)
