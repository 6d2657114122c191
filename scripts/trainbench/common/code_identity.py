"""Which code made a record or a report: the package's version, a fingerprint of the
source that ran, and the git commit with a dirty flag where the tree has a ``.git``.

A copy of the project without ``.git`` (``git archive``, or the tree the offline path
carries to a GPU host) is still named: by its version and the SHA-256 of its source
files (:func:`source_fingerprint`), which is the same for two copies of one commit and
differs as soon as one byte of the code differs. Beside it, ``behaviour``: a digest of
what the **measurement code** does (:func:`trainbench.common.behaviour.behaviour_digest`),
the same for two sources that differ only in analysis code, comments or moves; records
of different behaviour are never averaged together (trainbench.analysis.software)."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from trainbench.common.behaviour import behaviour_digest

PROJECT_ROOT = Path(__file__).resolve().parents[3]
DISTRIBUTION = "trainbench-workflow"  # imported as `trainbench`
# The code that runs: the package and the entry scripts (with its schema and report
# templates), and the workflow's rules. Relative to the project root.
SOURCE_PATTERNS = (
    "scripts/**/*.py",
    "scripts/trainbench/**/*.yaml",
    "scripts/trainbench/**/*.j2",
    "Snakefile",
    "rules/*.smk",
)
FINGERPRINT_CHARS = 12


def package_version(root: Path = PROJECT_ROOT) -> str:
    """The installed distribution's version; in a source tree that is not installed,
    the version its ``pyproject.toml`` declares; else ``0+unknown``."""
    from importlib import metadata

    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        pass
    try:
        text = (root / "pyproject.toml").read_text(encoding="utf-8")
    except OSError:
        return "0+unknown"
    project = re.search(r"^\[project\]\s*$(.*?)(?=^\[|\Z)", text, re.M | re.S)
    version = project and re.search(r'^version\s*=\s*"([^"]+)"', project.group(1), re.M)
    return version.group(1) if version else "0+unknown"


def source_files(root: Path = PROJECT_ROOT) -> list[str]:
    """The code's files under ``root`` (relative POSIX paths, sorted; caches left out)."""
    found: set[str] = set()
    for pattern in SOURCE_PATTERNS:
        for path in root.glob(pattern):
            relative = path.relative_to(root).as_posix()
            if path.is_file() and "__pycache__" not in relative and ".egg-info" not in relative:
                found.add(relative)
    return sorted(found)


def source_fingerprint(root: Path = PROJECT_ROOT) -> str:
    """SHA-256 over the code's files, each as its relative path and its bytes: the
    same for every copy of the same code, with or without ``.git``."""
    digest = hashlib.sha256()
    for relative in source_files(root):
        data = (root / relative).read_bytes()
        digest.update(f"{relative}\0{len(data)}\0".encode())
        digest.update(data)
    return digest.hexdigest()


def code_identity(commit: str = "unknown", root: Path = PROJECT_ROOT) -> dict:
    """``{"version", "source_sha256", "behaviour", "git_commit", "dirty", "label"}``;
    ``behaviour`` is :func:`trainbench.common.behaviour.behaviour_digest`; ``commit`` is
    what :func:`trainbench.launch.environment.git_commit` found (``-dirty`` appended when
    tracked files changed; ``unknown`` without git): ``git_commit`` and ``dirty`` are
    then None."""
    version, source = package_version(root), source_fingerprint(root)
    head = None if commit in ("", "unknown") else commit.removesuffix("-dirty")
    dirty = None if head is None else commit.endswith("-dirty")
    return {
        "version": version,
        "source_sha256": source,
        "behaviour": behaviour_digest(root, source),
        "git_commit": head,
        "dirty": dirty,
        "label": code_label(version, source, head, dirty),
    }


def code_label(version: str, source: str, commit: str | None, dirty: bool | None) -> str:
    """One line naming the code: ``trainbench 0.1.0, source 1a2b3c4d5e6f, git 2e002cb1f0
    (dirty)``; without git, ``..., no git commit``."""
    text = f"trainbench {version}, source {source[:FINGERPRINT_CHARS]}"
    if commit is None:
        return text + ", no git commit"
    return text + f", git {commit[:10]}" + (" (dirty)" if dirty else "")
