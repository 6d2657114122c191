"""Which code an evidence folder's measurements were made by, named by the source
fingerprint (:func:`trainbench.common.code_identity.source_fingerprint`), never typed in;
and the check of the folder's commit against it (``python scripts/evidence.py verify``).

Making evidence, ``EVIDENCE.json``'s ``code`` is taken from what measured: a workflow
run's records (every ``metrics.json`` carries ``environment.code``, and all must name
one source), a benchmark's results files where they carry a code identity, else the
tree the benchmark ran in. Its ``commit`` stays what git said on the host, which a
stale ``.git`` beside the tree can get wrong: :func:`verify_lines` computes the
fingerprint of that commit's tree in this repository (its files written from git's
objects into a temporary folder and fingerprinted there, so there is one definition
of the fingerprint) and says whether they agree, and if not, which recent commit has
the folder's source. Nothing is ever corrected or rewritten.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from trainbench.common.code_identity import (
    FINGERPRINT_CHARS,
    SOURCE_PATTERNS,
    code_identity,
    source_fingerprint,
)
from trainbench.evidence import EVIDENCE_FILE, evidence_folders

CODE_FIELDS = ("version", "source_sha256", "label", "git_commit", "dirty")
RECORDS = "runs/*/*/bs*/rep*/metrics.json"  # a workflow run's cell records
RECENT = 200  # commits of `git log --all` searched for a folder's source
NAMED = 5  # records named in a refusal; the rest counted
# The top-level paths SOURCE_PATTERNS can match: what a commit's tree needs written out.
SOURCE_TOPS = tuple(sorted({pattern.split("/", 1)[0] for pattern in SOURCE_PATTERNS}))


class SourceRefused(ValueError):
    """The code that measured cannot be named by one source fingerprint."""


# -- making evidence: the code that measured --------------------------------------------


def _named(paths: list[str]) -> str:
    more = f" and {len(paths) - NAMED} more" if len(paths) > NAMED else ""
    return ", ".join(paths[:NAMED]) + more


def _record_code(path: Path) -> dict | None:
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    code = (record.get("environment") or {}).get("code")
    return code if isinstance(code, dict) and code.get("source_sha256") else None


def records_code(results: Path) -> dict:
    """``EVIDENCE.json``'s ``code`` from a workflow run's records under ``results``: the
    code identity every record carries. Raises :class:`SourceRefused`, naming the
    records, when there are none, when some carry no source fingerprint, or when they
    name more than one source (records of an earlier run left beside this one's)."""
    paths = sorted(results.glob(RECORDS))
    if not paths:
        raise SourceRefused(f"{results}: no records ({RECORDS}) to take the source from")
    codes = {str(p.relative_to(results)): _record_code(p) for p in paths}
    missing = [name for name, code in codes.items() if code is None]
    if missing:
        raise SourceRefused(
            f"{results}: {len(missing)} of {len(codes)} records carry no "
            f"environment.code.source_sha256, so the code that made them is not named: "
            f"{_named(missing)}"
        )
    by_source: dict[str, list[str]] = {}
    for name, code in codes.items():
        by_source.setdefault(code["source_sha256"], []).append(name)
    if len(by_source) > 1:
        groups = "; ".join(
            f"source {source[:FINGERPRINT_CHARS]}: {_named(names)}"
            for source, names in sorted(by_source.items(), key=lambda item: -len(item[1]))
        )
        raise SourceRefused(
            f"{results}: the records were made by {len(by_source)} different sources "
            f"(records of an earlier run left beside this one's?); measure again from an "
            f"empty results folder. {groups}"
        )
    first = codes[str(paths[0].relative_to(results))]
    return {**{k: first.get(k) for k in CODE_FIELDS}, "source_from": "records"}


def _carried_code(path: Path) -> dict | None:
    """The code identity a benchmark's results file carries (top level or in its
    ``environment``), or None."""
    if path.suffix != ".json":
        return None
    try:
        document = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(document, dict):
        return None
    for code in (document.get("code"), (document.get("environment") or {}).get("code")):
        if isinstance(code, dict) and code.get("source_sha256"):
            return code
    return None


def bench_code(root: Path, results: list[str], tree: dict) -> dict:
    """``EVIDENCE.json``'s ``code`` for a benchmark part: from its results files
    (``results``, relative to ``root``) where they carry a code identity (all must name
    one source), else ``tree``, the :func:`code_identity` of the tree it ran in."""
    carried = {name: _carried_code(root / name) for name in results}
    carried = {name: code for name, code in carried.items() if code is not None}
    if not carried:
        return {**{k: tree.get(k) for k in CODE_FIELDS}, "source_from": "tree"}
    sources = {code["source_sha256"] for code in carried.values()}
    if len(sources) > 1:
        raise SourceRefused(
            f"the results files name {len(sources)} different sources: {_named(sorted(carried))}"
        )
    first = carried[sorted(carried)[0]]
    return {**{k: first.get(k) for k in CODE_FIELDS}, "source_from": "results"}


def tree_code(root: Path, commit: str) -> dict:
    """The code identity of the tree at ``root`` (what a benchmark runs in)."""
    return code_identity(commit, root)


def same_tree(root: Path, before: dict) -> None:
    """Raise :class:`SourceRefused` when ``root``'s source is no longer ``before``'s
    (the tree changed while a benchmark ran in it)."""
    now = source_fingerprint(root)
    if now != before["source_sha256"]:
        raise SourceRefused(
            f"{root}: the source changed while the benchmark ran (source "
            f"{before['source_sha256'][:FINGERPRINT_CHARS]} before, "
            f"{now[:FINGERPRINT_CHARS]} after): measure again"
        )


# -- checking evidence: the commit against the source ----------------------------------


def _git(repo: Path, *args: str) -> str | None:
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True)
    return done.stdout.decode() if done.returncode == 0 else None


class CommitSources:
    """Source fingerprints of commits' trees in the git repository at ``repo``: each
    tree's source files written from git's objects into the folder ``scratch`` and
    fingerprinted there by :func:`source_fingerprint`; trees whose source files are
    the same objects are fingerprinted once."""

    def __init__(self, repo: Path, scratch: Path) -> None:
        self.repo, self.tree = repo, scratch
        self._written: dict[str, tuple[str, str]] = {}
        self._blobs: dict[str, bytes] = {}
        self._by_listing: dict[str, str] = {}
        self._reader = subprocess.Popen(
            ["git", "-C", str(repo), "cat-file", "--batch"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,  # not a repository: every commit is unknown
        )
        self._recent: dict[int, list[str]] = {}

    def close(self) -> None:
        """Stop git's object reader."""
        with suppress(OSError):
            self._reader.stdin.close()
        self._reader.wait()

    def resolve(self, commit: str) -> str | None:
        """The full id of ``commit`` in this repository, or None when it is unknown."""
        if not commit or commit == "unknown":
            return None
        out = _git(self.repo, "rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}")
        return out.strip() if out else None

    def _blob(self, sha: str) -> bytes:
        if sha not in self._blobs:
            self._reader.stdin.write(f"{sha}\n".encode())
            self._reader.stdin.flush()
            size = int(self._reader.stdout.readline().split()[2])
            self._blobs[sha] = self._reader.stdout.read(size + 1)[:-1]
        return self._blobs[sha]

    def _entries(self, commit: str) -> dict[str, tuple[str, str]]:
        """``commit``'s files under :data:`SOURCE_TOPS`: path -> (mode, blob id)."""
        listing = _git(self.repo, "ls-tree", "-r", "-z", "--full-tree", commit, "--", *SOURCE_TOPS)
        entries = {}
        for entry in filter(None, (listing or "").split("\0")):
            meta, path = entry.split("\t", 1)
            mode, kind, sha = meta.split()
            if kind == "blob":  # not a submodule's commit
                entries[path] = (mode, sha)
        return entries

    def _write(self, entries: dict[str, tuple[str, str]]) -> None:
        """Make the working folder hold exactly ``entries`` (only what changed since the
        last tree written: commits next to each other differ in a few files)."""
        for path, was in self._written.items():
            if entries.get(path) != was:
                (self.tree / path).unlink()
        for path, (mode, sha) in entries.items():
            if self._written.get(path) == (mode, sha):
                continue
            target = self.tree / path
            if target.is_dir() and not target.is_symlink():
                shutil.rmtree(target)  # a folder of the last tree, a file of this one
            target.parent.mkdir(parents=True, exist_ok=True)
            if mode == "120000":
                os.symlink(self._blob(sha).decode(), target)
            else:
                target.write_bytes(self._blob(sha))
        self._written = entries

    def source(self, commit: str) -> str:
        """The source fingerprint of ``commit``'s tree (a full id :meth:`resolve` gave):
        :func:`source_fingerprint` of its files written out."""
        entries = self._entries(commit)
        key = "\0".join(f"{p}\t{m}\t{s}" for p, (m, s) in sorted(entries.items()))
        if key not in self._by_listing:
            self._write(entries)
            self._by_listing[key] = source_fingerprint(self.tree)
        return self._by_listing[key]

    def find(self, source: str, limit: int = RECENT) -> str | None:
        """The newest of the newest ``limit`` commits of ``git log --all`` whose tree has
        ``source``, or None."""
        if limit not in self._recent:
            out = _git(self.repo, "log", "--all", f"--max-count={limit}", "--format=%H")
            self._recent[limit] = (out or "").split()
        for commit in self._recent[limit]:
            if self.source(commit) == source:
                return commit
        return None


@contextmanager
def commit_sources(repo: Path) -> Iterator[CommitSources]:
    """A :class:`CommitSources` for ``repo``, its temporary folder removed after."""
    shm = Path("/dev/shm")  # many small files: memory where there is some
    place = shm if shm.is_dir() and os.access(shm, os.W_OK) else None
    with tempfile.TemporaryDirectory(prefix="evidence-source-", dir=place) as scratch:
        sources = CommitSources(repo, Path(scratch))
        try:
            yield sources
        finally:
            sources.close()


def _where(sources: CommitSources, source: str, limit: int) -> str:
    """Which recent commit's tree has ``source``, in words."""
    found = sources.find(source, limit)
    short = source[:FINGERPRINT_CHARS]
    if found:
        return f"{short} is the tree of commit {found[:10]}"
    return f"no commit among the newest {limit} of `git log --all` has source {short}"


def _made_by(code: dict) -> str:
    return {
        "records": "the folder's records were made by",
        "results": "the folder's results files name",
        "tree": "the tree the benchmarks ran in had",
    }.get(code.get("source_from"), "the folder names")


def verify_folder(folder: Path, sources: CommitSources, limit: int = RECENT) -> tuple[bool, str]:
    """Whether ``folder``'s ``EVIDENCE.json`` names a commit whose tree has the source
    that measured, and one line saying so or saying exactly what disagrees."""
    meta = json.loads((folder / EVIDENCE_FILE).read_text())
    commit = str(meta.get("commit") or "unknown")
    code = meta.get("code")
    if not isinstance(code, dict) or not code.get("source_sha256"):
        return (
            False,
            f"commit {commit[:10]}: made before EVIDENCE.json named its source: measure again",
        )
    source, made_by = code["source_sha256"], _made_by(code)
    short = source[:FINGERPRINT_CHARS]
    if commit.endswith("-dirty") or code.get("dirty") is True:
        return False, (
            f"commit {commit.removesuffix('-dirty')[:10]} is marked dirty (tracked files had "
            f"changed in the tree that ran): a dirty tree cannot match a commit by "
            f"construction, measure again from a clean checkout; {made_by} source {short}; "
            + _where(sources, source, limit)
        )
    full = sources.resolve(commit)
    if full is None:
        named = f"commit {commit[:10]} is unknown to this repository"
        if commit == "unknown":
            named = "no commit was recorded (git said unknown)"
        return False, f"{named}; {made_by} source {short}; " + _where(sources, source, limit)
    has = sources.source(full)
    if has == source:
        return True, f"commit {commit[:10]} has source {short}: matches"
    return False, (
        f"named commit {commit[:10]}'s tree has source {has[:FINGERPRINT_CHARS]}, {made_by} "
        f"source {short}; " + _where(sources, source, limit)
    )


def verify_lines(
    root: Path, repo: Path | None = None, limit: int = RECENT
) -> tuple[list[str], bool]:
    """One line per evidence folder under ``root`` (checked against the git repository
    at ``repo``, ``root`` when None), and whether every folder passed."""
    folders = evidence_folders(root)
    if not folders:
        return ["No evidence folder under docs/measured/."], True
    lines, passed = [], True
    with commit_sources(repo or root) as sources:
        for folder in folders:
            ok, line = verify_folder(folder, sources, limit)
            passed = passed and ok
            where = folder.relative_to(root)
            lines.append(f"{where}: {line}" if ok else f"{where}: fails: {line}")
    return lines, passed
