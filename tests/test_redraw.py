"""make redraw (scripts/redraw.py, trainbench.analysis.redraw): the config it writes
(records-only, the folders' records through include_results, unmeasured workloads off,
compare passed on), its refusals of bad folders and names, and once end to end: the
tables, figures, paper figures and report of an older results folder, nothing
trained, figures drawn again byte for byte."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml
from helpers import REPO, copy_workflow
from trainbench.analysis import redraw


def _folder(root: Path, rel: str, workloads=("image_cnn",)) -> Path:
    folder = root / rel
    for workload in workloads:
        record = folder / "runs" / workload / "cpu" / "bs32" / "rep0" / "metrics.json"
        record.parent.mkdir(parents=True)
        record.write_text("{}")
    return folder


def test_the_config_is_records_only_over_the_folders_records(tmp_path):
    _folder(tmp_path, "results/old", ("image_cnn", "matmul"))
    _folder(tmp_path, "elsewhere/mac")
    config = redraw.redraw_config(
        "merged", ["results/old", str(tmp_path / "elsewhere/mac"), "results/old"], tmp_path,
        compare="folder", workloads=["image_cnn", "matmul", "clip", "two_tower"],
    )  # fmt: skip
    assert config == {
        "run_name": "merged",
        "aggregate": {
            "records_only": True,
            "include_results": ["results/old", "elsewhere/mac"],  # relative, once each
            "compare": {"by": "folder"},
        },
        "workloads": {"clip": {"enabled": False}, "two_tower": {"enabled": False}},
    }


def test_the_config_file_is_written_atomically_and_only_when_it_changes(tmp_path):
    path = tmp_path / "results" / "merged" / redraw.CONFIG_NAME
    config = {"run_name": "merged", "aggregate": {"records_only": True, "include_results": []}}
    assert redraw.write_config(path, config)
    assert yaml.safe_load(path.read_text()) == config
    assert not redraw.write_config(path, config)
    assert not [p for p in path.parent.iterdir() if p.name.endswith(".tmp")]


@pytest.mark.parametrize(
    ("name", "folders", "words"),
    [
        ("old", ["results/old"], ("NAME=old writes to", "choose another NAME")),
        ("merged", ["results/empty"], ("'results/empty' has no records", "Fix:")),
        ("merged", ["results/absent"], ("'results/absent' is not a folder", "Fix:")),
        ("my run", ["results/old"], ("NAME 'my run' is not", "NAME=my_run")),
        ("merged", [], ("FOLDERS is empty", "Fix:")),
    ],
)
def test_bad_arguments_are_refused_naming_them_and_the_fix(tmp_path, name, folders, words):
    _folder(tmp_path, "results/old")
    (tmp_path / "results" / "empty" / "runs").mkdir(parents=True)
    with pytest.raises(redraw.RedrawError) as refused:
        redraw.redraw_config(name, folders, tmp_path)
    for word in words:
        assert word in str(refused.value)


def test_an_unknown_compare_is_refused(tmp_path):
    _folder(tmp_path, "results/old")
    with pytest.raises(
        redraw.RedrawError, match="COMPARE='host' is not one of folder, software, none"
    ):
        redraw.redraw_config("merged", ["results/old"], tmp_path, compare="host")


def test_a_refusal_runs_nothing_and_writes_nothing(tmp_path, capsys):
    (tmp_path / "config.yaml").write_text("workloads: {image_cnn: {}}\n")
    code = redraw.main(["--root", str(tmp_path), "--name", "merged", "results/absent"])
    assert code == 2
    assert "redraw: FOLDERS: 'results/absent' is not a folder" in capsys.readouterr().err
    assert not (tmp_path / "results").exists()


def test_the_snakemake_command_layers_the_redraw_config_last():
    command = redraw.snakemake_command("results/m/redraw.yaml", ["configs/gpu.yaml"], 2, ["-n"])
    assert command[1:] == [
        "-m", "snakemake", "--cores", "2", "--configfile", "configs/gpu.yaml",
        "results/m/redraw.yaml", "-n",
    ]  # fmt: skip


def _hashes(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


@pytest.mark.slow
def test_redraw_an_older_folder_end_to_end(tmp_path):
    work = copy_workflow(tmp_path / "wf")
    old = work / "elsewhere" / "cpu-records"
    old.mkdir(parents=True)
    with tarfile.open(REPO / "tests" / "data" / "cpu-records.tgz") as tar:
        tar.extractall(old, filter="data")
    (work / "configs").mkdir(exist_ok=True)
    (work / "configs" / "cpu-records.yaml").write_bytes(
        (REPO / "tests" / "data" / "cpu-records.yaml").read_bytes()
    )
    env = {**os.environ, "PYTHONPATH": str(work / "scripts")}
    command = [
        sys.executable, "scripts/redraw.py", "--name", "again", "--cores", "2",
        "--configfile", "configs/cpu-records.yaml", "elsewhere/cpu-records",
    ]  # fmt: skip

    def run(*more: str) -> subprocess.CompletedProcess:
        return subprocess.run([*command, *more], cwd=work, env=env, capture_output=True, text=True)

    first = run()
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    results = work / "results" / "again"
    assert (results / "report.md").is_file()
    assert (results / "tables" / "speedup.csv").is_file()
    paper = sorted(p.name for p in (results / "figures" / "paper").iterdir())
    pngs = sorted(p.stem for p in (results / "figures").glob("*.png"))
    assert paper == [f"{name}.pdf" for name in pngs]
    assert not (results / "runs").exists() and not (results / "data").exists()  # nothing ran
    assert "run_cell" not in first.stderr and "prepare_data" not in first.stderr
    drawn = _hashes(results / "figures")
    again = run()  # the same command again: everything is up to date, nothing is drawn
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert "Nothing to be done" in again.stderr
    for path in (results / "figures").rglob("*.*"):
        path.unlink()
    forced = run("--force")  # every figure drawn again: the same bytes
    assert forced.returncode == 0, forced.stdout[-3000:] + forced.stderr[-3000:]
    assert _hashes(results / "figures") == drawn
