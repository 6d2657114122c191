"""Reruns that never lose or redo work, with real processes and real signals:
a missing record is rebuilt (and only it), config edits rerun only what changed,
code edits rebuild only what runs that code, a killed launcher leaves no orphan
and the next run records its cell, two launchers of one cell never overlap, and
rerun-failed skips cells the config no longer has."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from helpers import (
    REPO,
    copy_workflow,
    executed_rules,
    run_snakemake,
    tiny_config,
    write_config,
)
from trainbench.common.records import read_record

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
TARGET = "results/report.md"


def small_config() -> dict:
    config = tiny_config(devices=["cpu"], repeats=2)
    config["workloads"]["image_cnn"]["batch_sizes"] = [16, 32]
    # These tests find a cell by its command line (`-m trainbench.launch.child SPEC`) and kill
    # its launcher as the cell's parent: the spawned path. Forked cells (the server is
    # their parent) are killed and interrupted in test_interrupt.py and test_launcher.py.
    config["launcher"]["start_method"] = "spawn"
    return config


def records(workflow: Path) -> dict[str, tuple[bytes, int]]:
    runs = workflow / "results" / "runs"
    return {
        p.relative_to(runs).as_posix(): (p.read_bytes(), p.stat().st_mtime_ns)
        for p in sorted(runs.rglob("metrics.json"))
    }


def planned_jobs(workflow: Path, *args: str) -> list[str]:
    """The rules of the jobs a dry run would execute."""
    proc = run_snakemake(workflow, "--cores", "1", TARGET, "--dry-run", *args, timeout=120)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    return re.findall(r"^(?:local)?rule (\w+):", proc.stdout, re.M)


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished small matrix, copied afresh for each test that changes it."""
    workflow = copy_workflow(tmp_path_factory.mktemp("finished") / "wf")
    write_config(workflow / "config.yaml", small_config())
    proc = run_snakemake(workflow, "--cores", "1", TARGET, timeout=400)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-5000:]
    return workflow


@pytest.fixture
def workflow(finished, tmp_path):
    copy = tmp_path / "wf"
    shutil.copytree(finished, copy, symlinks=True)
    return copy


def test_a_deleted_record_is_rebuilt_alone_and_the_report_follows(workflow):
    before = records(workflow)
    gone = "image_cnn/cpu/bs32/rep1/metrics.json"
    (workflow / "results" / "runs" / gone).unlink()
    proc = run_snakemake(workflow, "--cores", "1", TARGET, timeout=300)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-4000:]
    assert executed_rules(output).count("run_cell") == 1
    after = records(workflow)
    assert set(after) == set(before)
    for path, state in before.items():
        if path != gone:
            assert after[path] == state, f"{path} was rerun"
    overview = (workflow / "results/tables/overview.csv").read_text()
    assert "(all)" in overview
    assert "Nothing to be done" in "".join(
        run_snakemake(workflow, "--cores", "1", TARGET, "--dry-run", timeout=120).stdout
    )


@pytest.mark.parametrize(
    "change, expected_cells",
    [
        (lambda c: c["workloads"]["image_cnn"]["batch_sizes"].append(64), 2),  # 2 new cells
        (lambda c: c["workloads"]["image_cnn"].update(repeats=3), 2),  # rep2 of bs16, bs32
        (lambda c: c["workloads"]["image_cnn"].update(timeout_s=999), 0),
        (lambda c: c["workloads"]["image_cnn"].update(devices=["cpu"]), 0),
        (lambda c: c["launcher"].update(max_attempts=3, timeout_s=77), 0),
        (lambda c: c.update(report={"baseline_device": "cpu"}), 0),
        (lambda c: c["workloads"]["matmul"]["sizes"].append(64), 2),  # measures more: reruns
    ],
    ids=["batch_size", "repeats", "timeout", "devices", "launcher", "baseline", "matmul_sizes"],
)
def test_config_edits_rerun_only_the_cells_whose_measurement_changes(
    workflow, change, expected_cells
):
    config = small_config()
    change(config)
    write_config(workflow / "config.yaml", config)
    jobs = planned_jobs(workflow)
    assert jobs.count("run_cell") == expected_cells, jobs
    assert "prepare_data" not in jobs, jobs  # the data set never rebuilds for these keys


def test_editing_figure_code_rebuilds_figures_and_reports_only(workflow):
    style = workflow / "scripts/trainbench/analysis/figures/style.py"
    style.write_text(style.read_text() + "\n# a change to figure code\n")
    assert sorted(set(planned_jobs(workflow))) == ["figures", "report"]
    stats = workflow / "scripts/trainbench/analysis/stats/speed.py"
    stats.write_text(stats.read_text() + "\n# a change to the statistics\n")
    assert sorted(set(planned_jobs(workflow))) == ["figures", "report", "statistics"]


def test_rerun_failed_skips_cells_no_longer_in_the_matrix(workflow):
    failed = workflow / "results/runs/image_cnn/cpu/bs32/rep0/metrics.json"
    record = read_record(failed)
    record.update(status="failed", error={"class": "oom", "message": "injected"}, result=None)
    failed.write_text(json.dumps(record))
    gone = workflow / "results/runs/image_cnn/cpu/bs8/rep0/metrics.json"
    gone.parent.mkdir(parents=True)
    gone.write_text(json.dumps(record | {"cell": record["cell"] | {"batch_size": 8}}))
    proc = subprocess.run(
        [sys.executable, "scripts/failed_runs.py"], cwd=workflow, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["results/runs/image_cnn/cpu/bs32/rep0/metrics.json"]
    assert "skipped (not a cell of the config any more)" in proc.stderr
    assert "bs8" in proc.stderr


# ----------------------------------------------------------------------------- signals


def _hanging_cell(workflow: Path, timeout_s: int = 300) -> None:
    """bs32 rep0 hangs in its first attempt (the `hang` fault) until it is killed."""
    config = small_config()
    config["launcher"].update(allow_fault_injection=True, timeout_s=timeout_s)
    config["fault_injection"] = [
        {"workload": "image_cnn", "device": "cpu", "batch_size": 32, "rep": 0, "fault": "hang"}
    ]
    write_config(workflow / "config.yaml", config)


def _processes(workflow: Path, marker: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter():
        try:
            if marker in " ".join(proc.cmdline()) and Path(proc.cwd()).resolve() == workflow:
                found.append(proc)
        except psutil.Error:
            continue
    return found


def _wait_for(predicate, what: str, timeout: float = 180):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    pytest.fail(f"timed out waiting for {what}")


def _spans(workflow: Path) -> list[tuple[float, float, str]]:
    spans = []
    for path in (workflow / "results" / "runs").rglob("metrics.json"):
        for attempt in read_record(path)["attempts"]:
            spans.append((attempt["started_unix"], attempt["ended_unix"], str(path)))
    return sorted(spans)


def test_kill_9_of_the_launcher_then_snakemake_loses_nothing_and_overlaps_nothing(tmp_path):
    workflow = copy_workflow(tmp_path / "wf").resolve()
    _hanging_cell(workflow)
    env = dict(os.environ, PYTHONPATH=str(workflow / "scripts"), TRAINBENCH_ALLOW_FAULTS="1")
    snake = subprocess.Popen(
        [sys.executable, "-m", "snakemake", "--cores", "1", TARGET],
        cwd=workflow, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    # The hanging cell's child, and its launcher (the child's parent).
    child = _wait_for(
        lambda: next(
            (
                p
                for p in _processes(workflow, "trainbench.launch.child")
                if "bs32" in " ".join(p.cmdline()) or _is_bs32_rep0(p)
            ),
            None,
        ),
        "the hanging cell",
    )
    launcher = child.parent()
    launcher.send_signal(signal.SIGKILL)
    # The child dies with its launcher: no orphan keeps the CPU busy.
    psutil.wait_procs([child], timeout=15)
    assert not child.is_running() or child.status() == psutil.STATUS_ZOMBIE
    if snake.poll() is None:
        snake.send_signal(signal.SIGKILL)
    snake.wait(timeout=60)
    assert not _processes(workflow, "trainbench.launch.child")

    # The README command, after Snakemake's own --unlock (it asks for it after a kill -9).
    small = small_config()
    write_config(workflow / "config.yaml", small)
    run_snakemake(workflow, "--unlock", timeout=120)
    proc = run_snakemake(workflow, "--cores", "1", TARGET, timeout=400)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    found = records(workflow)
    assert len(found) == 2 * 2 + 2  # image_cnn 2 bs x 2 reps, matmul 1 bs x 2 reps
    for path in found:
        assert read_record(workflow / "results/runs" / path)["status"] == "ok", path
    spans = _spans(workflow)
    for (_, end_a, a), (start_b, _, b) in zip(spans, spans[1:], strict=False):
        assert start_b >= end_a, f"{a} and {b} ran at the same time"
    assert not list(workflow.glob("results/runs/**/.attempt-*"))


def _is_bs32_rep0(proc: psutil.Process) -> bool:
    try:
        spec_path = proc.cmdline()[proc.cmdline().index("trainbench.launch.child") + 1]
        cell = json.loads(Path(spec_path).read_text())["cell"]
    except (ValueError, IndexError, OSError, psutil.Error, KeyError):
        return False
    return cell["batch_size"] == 32 and cell["rep"] == 0


LAUNCH = """
import json, sys
sys.path.insert(0, sys.argv[1])
from trainbench.launch.launcher import run_cell
spec = json.loads(open(sys.argv[2]).read())
run_cell(spec, sys.argv[3], sys.argv[4])
"""


def test_two_launchers_of_one_cell_never_overlap(tmp_path):
    from trainbench import config as tbconfig

    config = tiny_config(devices=["cpu"])
    config["workloads"] = {"matmul": {"sizes": [64, 128], "min_run_time_s": 0.3}}
    tbconfig.validate_config(config)
    spec = tbconfig.cell_spec(config, tbconfig.Cell("matmul", "cpu", 1, 0))
    spec_path = tmp_path / "spec.json"
    spec_path.write_text(json.dumps(spec))
    output = tmp_path / "results/runs/matmul/cpu/bs1/rep0/metrics.json"
    scripts = str(REPO / "scripts")

    def launch(log: Path) -> subprocess.Popen:
        return subprocess.Popen(
            [sys.executable, "-c", LAUNCH, scripts, str(spec_path), str(output), str(log)]
        )

    # The second launcher starts once the first holds the cell's lock with its child
    # running: started together, a slow start of one on a loaded machine let the other
    # finish first, and the two never met (no overlap, but nothing was tested).
    first = launch(tmp_path / "a.log")
    lock = output.parent / ".lock"

    def child_running() -> bool:
        try:
            return bool(json.loads(lock.read_text() or "{}").get("child_pgid"))
        except (OSError, ValueError):  # not there yet, or being rewritten
            return False

    _wait_for(child_running, "the first launcher's child")
    second = launch(tmp_path / "b.log")
    assert first.wait(timeout=300) == 0
    # When the first launcher ends, its record is on disk: keep when its cell ended.
    first_end = read_record(output)["attempts"][-1]["ended_unix"]
    assert second.wait(timeout=300) == 0
    second_start = read_record(output)["attempts"][0]["started_unix"]
    assert second_start >= first_end, "the two copies of the cell ran side by side"
    logs = [(tmp_path / name).read_text() for name in ("a.log", "b.log")]
    assert any("is running this cell; waiting for it" in log for log in logs), logs


def test_ctrl_c_during_rerun_failed_then_report_leaves_every_cell_with_a_record(tmp_path):
    """The commands of `make rerun-failed` (scripts/failed_runs.py, then snakemake
    --forcerun), interrupted by Ctrl-C while the rerun cell runs; then `make report`'s
    snakemake: every cell has a record, the others untouched, the failed one rerun."""
    workflow = copy_workflow(tmp_path / "wf").resolve()
    config = small_config()
    config["launcher"].update(allow_fault_injection=True, max_attempts=1, timeout_s=300)
    fault = {"workload": "image_cnn", "device": "cpu", "batch_size": 32, "rep": 0}
    config["fault_injection"] = [{**fault, "fault": "exception"}]
    write_config(workflow / "config.yaml", config)
    env = dict(os.environ, PYTHONPATH=str(workflow / "scripts"), TRAINBENCH_ALLOW_FAULTS="1")
    proc = run_snakemake(workflow, "--cores", "1", TARGET, timeout=400)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    before = records(workflow)
    failed = "image_cnn/cpu/bs32/rep0/metrics.json"
    assert read_record(workflow / "results/runs" / failed)["status"] == "failed"

    # The rerun of the failed cell hangs, so Ctrl-C lands while it runs.
    config["fault_injection"] = [{**fault, "fault": "hang"}]
    write_config(workflow / "config.yaml", config)
    cells = subprocess.run(
        [sys.executable, "scripts/failed_runs.py"], cwd=workflow, env=env,
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    assert cells == [f"results/runs/{failed}"]
    rerun = subprocess.Popen(
        [sys.executable, "-m", "snakemake", "--cores", "1", TARGET, "--forcerun", *cells],
        cwd=workflow, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip
    child = _wait_for(
        lambda: next(iter(_processes(workflow, "trainbench.launch.child")), None), "the rerun cell"
    )
    os.killpg(rerun.pid, signal.SIGINT)  # Ctrl-C: the terminal signals the whole group
    rerun.wait(timeout=120)
    psutil.wait_procs([child], timeout=30)
    assert not _processes(workflow, "trainbench.launch.child"), "no cell outlives Ctrl-C"
    interrupted = records(workflow)
    assert {k: v for k, v in interrupted.items() if k != failed} == {
        k: v for k, v in before.items() if k != failed
    }, "Ctrl-C touched no other record"

    # `make report` afterwards, the cell fixed: every cell has a record, only it is new.
    config["fault_injection"] = []
    write_config(workflow / "config.yaml", config)
    proc = run_snakemake(workflow, "--cores", "1", TARGET, timeout=400)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    after = records(workflow)
    assert set(after) == set(before)
    assert read_record(workflow / "results/runs" / failed)["status"] == "ok"
    assert {k: v for k, v in after.items() if k != failed} == {
        k: v for k, v in before.items() if k != failed
    }
    assert executed_rules(proc.stdout + proc.stderr).count("run_cell") == 1
