"""The code that made a record or a report is named: the package version, a SHA-256 of
the source that ran, and the git commit with a dirty flag where there is one; a copy
without ``.git`` (``git archive``, the offline path's tree) is still named."""

from __future__ import annotations

import io
import re
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest
from helpers import REPO, run_snakemake
from trainbench.common.code_identity import code_identity, source_fingerprint

LABEL = re.compile(r"trainbench \d+\.\d+\.\d+\S*, source [0-9a-f]{12}")


def _archive(dest: Path) -> Path:
    """``git archive HEAD`` of this checkout, unpacked into ``dest`` (no .git)."""
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("needs this checkout's git")
    data = subprocess.run(
        ["git", "-C", str(REPO), "archive", "--format=tar", "HEAD"],
        capture_output=True,
        check=True,
        timeout=120,
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        tar.extractall(dest, filter="data")
    return dest


def test_a_git_commit_and_its_dirty_flag_are_named():
    clean = code_identity("0123456789abcdef", root=REPO)
    assert clean["git_commit"] == "0123456789abcdef" and clean["dirty"] is False
    assert LABEL.match(clean["label"]) and clean["label"].endswith("git 0123456789")
    dirty = code_identity("0123456789abcdef-dirty", root=REPO)
    assert dirty["dirty"] is True and dirty["label"].endswith("(dirty)")


def test_a_copy_without_git_is_named_by_version_and_source(tmp_path):
    copy = _archive(tmp_path / "copy")
    assert not (copy / ".git").exists()
    code = code_identity("unknown", root=copy)
    assert code["git_commit"] is None and code["dirty"] is None
    assert LABEL.match(code["label"]) and code["label"].endswith("no git commit")
    assert "unknown" not in code["label"]
    # The same code gives the same fingerprint; one changed byte, another.
    again = _archive(tmp_path / "again")
    assert source_fingerprint(again) == code["source_sha256"]
    module = again / "scripts" / "trainbench" / "measure" / "steady.py"
    module.write_text(module.read_text() + "\n")
    assert source_fingerprint(again) != code["source_sha256"]


@pytest.mark.slow
@pytest.mark.e2e
def test_a_report_made_from_a_git_archive_copy_names_its_code(tmp_path):
    """The offline path's case: the workflow run in a ``git archive`` copy (no .git, no
    declared commit) writes records and a report that name the code, never `unknown`."""
    copy = _archive(tmp_path / "copy")
    (copy / "config.yaml").write_text(
        "seed: 0\nrepeats: 1\ndevices: [cpu]\nlauncher: {progress: never}\n"
        "workloads:\n  matmul:\n    sizes: [16]\n    min_run_time_s: 0.01\n"
    )
    proc = run_snakemake(copy, "--cores", "1", timeout=600, env={"TRAINBENCH_COMMIT": ""})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    expected = code_identity("unknown", root=copy)["label"]
    record = next((copy / "results" / "runs").rglob("metrics.json")).read_text()
    assert expected in record
    report = (copy / "results" / "report.md").read_text()
    assert f"Code: `{expected}`" in report, re.findall(r"Code:.*", report)
    assert "Code: `unknown`" not in report
