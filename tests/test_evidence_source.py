"""EVIDENCE.json names the code that measured by its source fingerprint, taken from the
records (never typed in), and `python scripts/evidence.py verify` checks the folder's
commit against it in a git repository (trainbench.evidence.source)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from trainbench.common.code_identity import source_fingerprint
from trainbench.evidence import EVIDENCE_FILE, Made, write_evidence
from trainbench.evidence.source import (
    SourceRefused,
    bench_code,
    records_code,
    verify_lines,
)


def _git(repo: Path, *args: str) -> str:
    command = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args]
    return subprocess.run(command, check=True, capture_output=True, text=True).stdout.strip()


def _commit(repo: Path, files: dict[str, str], message: str) -> tuple[str, str]:
    """Write ``files`` into ``repo`` and commit them; the commit and its tree's source."""
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", message)
    return _git(repo, "rev-parse", "HEAD"), source_fingerprint(repo)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    _git(root, "init", "-q")
    return root


def _folder(repo: Path, name: str, commit: str, code: dict | None) -> None:
    folder = repo / "docs" / "measured" / name
    folder.mkdir(parents=True)
    meta = {"commit": commit, **({"code": code} if code else {})}
    (folder / EVIDENCE_FILE).write_text(json.dumps(meta))


def _code(source: str) -> dict:
    return {"source_sha256": source, "source_from": "records", "dirty": False}


def test_a_folder_whose_commit_has_its_source_passes(repo):
    """The commit's tree, written from git's objects, has the fingerprint the records
    carry: one line saying it matches, and the check passes."""
    tree = {
        "scripts/trainbench/x.py": "A = 1\n",
        "scripts/trainbench/config/schema.yaml": "a: 1\n",
        "scripts/notes.txt": "not source\n",
        "rules/run.smk": "rule a: pass\n",
        "Snakefile": "include: 'rules/run.smk'\n",
    }
    first, source = _commit(repo, tree, "a")
    _commit(repo, {"README.md": "docs only\n"}, "docs")  # not source: same fingerprint
    _folder(repo, "gpu-x", first, _code(source))
    lines, passed = verify_lines(repo)
    assert passed
    assert lines == [f"docs/measured/gpu-x: commit {first[:10]} has source {source[:12]}: matches"]


def test_a_folder_naming_another_commit_fails_and_names_the_commit_that_matches(repo):
    """A commit whose tree has another source (a stale .git on the host) fails with both
    fingerprints and the commit whose tree has the records' source."""
    old, old_source = _commit(repo, {"scripts/trainbench/x.py": "A = 1\n"}, "old")
    new, new_source = _commit(repo, {"scripts/trainbench/x.py": "A = 2\n"}, "new")
    _commit(repo, {"scripts/run.py": "print()\n"}, "newer")
    _folder(repo, "gpu-x", old, _code(new_source))
    lines, passed = verify_lines(repo)
    assert not passed
    line = lines[0]
    assert line.startswith("docs/measured/gpu-x: fails: ")
    assert f"named commit {old[:10]}'s tree has source {old_source[:12]}" in line
    assert f"made by source {new_source[:12]}" in line
    assert f"{new_source[:12]} is the tree of commit {new[:10]}" in line


def test_a_folder_without_a_source_says_measure_again(repo):
    first, _ = _commit(repo, {"scripts/trainbench/x.py": "A = 1\n"}, "a")
    _folder(repo, "old", first, None)
    lines, passed = verify_lines(repo)
    assert not passed
    assert "made before EVIDENCE.json named its source: measure again" in lines[0]


def test_an_unknown_or_dirty_commit_fails_and_says_so(repo):
    """A commit this repository lacks, and a dirty one (no commit holds its tree), fail
    and say why; where the source is a commit's tree, that commit is named."""
    first, source = _commit(repo, {"scripts/trainbench/x.py": "A = 1\n"}, "a")
    _folder(repo, "a-unknown", "0123456789abcdef0123456789abcdef01234567", _code(source))
    _folder(repo, "b-dirty", first + "-dirty", _code(source))
    lines, passed = verify_lines(repo)
    assert not passed
    assert "commit 0123456789 is unknown to this repository" in lines[0]
    assert f"is the tree of commit {first[:10]}" in lines[0]
    assert "marked dirty" in lines[1] and "cannot match a commit by construction" in lines[1]


def _cli():
    """scripts/evidence.py as a module."""
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "scripts" / "evidence.py"
    spec = importlib.util.spec_from_file_location("evidence_cli", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_verify_command_exits_1_when_a_folder_fails_and_rewrites_nothing(
    repo, monkeypatch, capsys
):
    """`evidence.py verify` prints a line per folder, exits 1 when one fails, 0 when all
    pass, and leaves EVIDENCE.json byte for byte what it was."""
    first, source = _commit(repo, {"scripts/trainbench/x.py": "A = 1\n"}, "a")
    _folder(repo, "new", first, _code(source))
    cli = _cli()
    monkeypatch.setattr(cli, "ROOT", repo)
    assert cli.main(["verify"]) == 0
    _folder(repo, "old", first, None)
    before = (repo / "docs/measured/old" / EVIDENCE_FILE).read_bytes()
    assert cli.main(["verify"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[-2].endswith(": matches") and out[-1].endswith("measure again")
    assert (repo / "docs/measured/old" / EVIDENCE_FILE).read_bytes() == before


def _record(results: Path, cell: str, source: str | None) -> None:
    path = results / "runs" / "image_cnn" / cell / "bs16" / "rep0" / "metrics.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    code = {"version": "0.1.0", "source_sha256": source, "label": "l", "git_commit": None}
    path.write_text(json.dumps({"environment": {"code": code} if source else {}}))


def test_a_workflow_part_takes_its_source_from_the_records(tmp_path):
    """EVIDENCE.json's code is the records' own, and write_evidence writes it."""
    results = tmp_path / "results"
    _record(results, "cpu", "a" * 64)
    _record(results, "cuda", "a" * 64)
    code = records_code(results)
    assert code["source_sha256"] == "a" * 64 and code["source_from"] == "records"
    made = Made(["x"], 1.0, "c0ffee", [], ["image_cnn"], code=code)
    (tmp_path / "scripts").mkdir()
    meta = write_evidence(tmp_path / "dest", tmp_path, made, {})
    written = json.loads((tmp_path / "dest" / EVIDENCE_FILE).read_text())
    assert meta["code"] == written["code"] == code and "commit_recorded" not in written


def test_records_that_disagree_or_carry_no_source_are_refused(tmp_path):
    """Records of two sources, or a record without one, make no evidence: the refusal
    names the records."""
    results = tmp_path / "results"
    _record(results, "cpu", "a" * 64)
    _record(results, "cuda", "b" * 64)
    with pytest.raises(SourceRefused, match="2 different sources") as refused:
        records_code(results)
    assert "runs/image_cnn/cuda/bs16/rep0/metrics.json" in str(refused.value)
    _record(results, "cuda", None)
    with pytest.raises(SourceRefused, match="carry no environment.code.source_sha256"):
        records_code(results)
    with pytest.raises(SourceRefused, match="no records"):
        records_code(tmp_path / "empty")


def test_a_benchmark_part_takes_its_source_from_the_tree_unless_its_results_name_one(tmp_path):
    tree = {"version": "0.1.0", "source_sha256": "t" * 64, "label": "l", "git_commit": None}
    (tmp_path / "plain.json").write_text(json.dumps({"machine": {}}))
    assert bench_code(tmp_path, ["plain.json"], tree)["source_from"] == "tree"
    (tmp_path / "named.json").write_text(json.dumps({"code": {"source_sha256": "r" * 64}}))
    code = bench_code(tmp_path, ["plain.json", "named.json"], tree)
    assert code["source_from"] == "results" and code["source_sha256"] == "r" * 64
