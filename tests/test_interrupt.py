"""Interrupted workflows, killed writers and concurrency: real snakemake, real signals."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import cells_here, copy_workflow, run_snakemake, tiny_config, write_config
from trainbench.common.records import read_record

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
TARGET = "results/report.md"


def slow_matrix(workflow: Path) -> None:
    """Four cpu training cells of a few seconds each, so a signal lands mid-matrix."""
    config = tiny_config(devices=["cpu"], repeats=2)
    config["workloads"]["image_cnn"].update(
        {
            "batch_sizes": [16, 32],
            "epochs": 2,
            "data": {"source": "synthetic", "n_train": 384, "n_test": 64, "image_size": 16},
        }
    )
    del config["workloads"]["matmul"]
    write_config(workflow / "config.yaml", config)


def records(workflow: Path) -> dict[str, tuple[bytes, int]]:
    return {
        str(p.relative_to(workflow)): (p.read_bytes(), p.stat().st_mtime_ns)
        for p in sorted((workflow / "results" / "runs").rglob("metrics.json"))
    }


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL])
def test_interrupted_workflow_resumes_without_losing_records(tmp_path, sig):
    workflow = copy_workflow(tmp_path / "wf")
    slow_matrix(workflow)
    env = dict(os.environ, PYTHONPATH=str(workflow / "scripts"))
    proc = subprocess.Popen(
        [sys.executable, "-m", "snakemake", "--cores", "1", TARGET],
        cwd=workflow, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.monotonic() + 180
    # Wait until at least one cell finished and the next one is running.
    while time.monotonic() < deadline:
        if records(workflow) and cells_here(workflow):
            break
        assert proc.poll() is None, "snakemake ended before it could be interrupted"
        time.sleep(0.2)
    else:
        pytest.fail("no cell finished in time")
    before = records(workflow)
    os.kill(proc.pid, sig)
    proc.wait(timeout=60)

    for path in (workflow / "results" / "runs").rglob("metrics.json"):
        read_record(path)  # never a truncated or half-written record
    if sig != signal.SIGKILL:
        # Snakemake stopped the job; the launcher stopped its cell: no orphan keeps running.
        time.sleep(1)
        assert not cells_here(workflow)

    # Restart the way the README does (`make report`: recover, then snakemake).
    subprocess.run([sys.executable, "scripts/recover.py"], cwd=workflow, env=env, check=True)
    again = run_snakemake(workflow, "--cores", "1", TARGET, timeout=300)
    assert again.returncode == 0, (again.stdout + again.stderr)[-4000:]
    after = records(workflow)
    assert len(after) == 4
    for path, (content, mtime) in before.items():
        if sig == signal.SIGKILL:
            # An orphan may have finished its cell after the kill; finished ones stay valid.
            assert path in after
        else:
            assert after[path] == (content, mtime), f"{path} was rerun"
    for path in after:
        assert read_record(workflow / path)["status"] == "ok"
    assert (workflow / TARGET).exists()


WRITER = """
import sys
sys.path.insert(0, sys.argv[2])
from trainbench.common.records import atomic_write_json
payload = {"schema_version": 1, "blob": ["x" * 1000] * 20000}
while True:
    atomic_write_json(sys.argv[1], payload)
"""


def test_killed_writer_never_leaves_a_truncated_file(tmp_path):
    target = tmp_path / "metrics.json"
    scripts = str(Path(__file__).resolve().parents[1] / "scripts")
    for delay in (0.05, 0.13, 0.29, 0.41, 0.77):
        writer = subprocess.Popen([sys.executable, "-c", WRITER, str(target), scripts])
        time.sleep(delay)
        writer.send_signal(signal.SIGKILL)
        writer.wait()
        if target.exists():
            data = json.loads(target.read_text())  # whole or absent, never cut short
            assert len(data["blob"]) == 20000


def test_timed_cells_never_overlap_with_two_cores(tmp_path):
    workflow = copy_workflow(tmp_path / "wf")
    config = tiny_config(devices=["cpu", "mps"], repeats=2)
    write_config(workflow / "config.yaml", config)
    proc = run_snakemake(workflow, "--cores", "2", TARGET, timeout=300)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    spans = []
    for path in (workflow / "results" / "runs").rglob("metrics.json"):
        for attempt in read_record(path)["attempts"]:
            spans.append((attempt["started_unix"], attempt["ended_unix"], str(path)))
    spans.sort()
    assert len(spans) == 8
    for (_, end_a, a), (start_b, _, b) in zip(spans, spans[1:], strict=False):
        assert start_b >= end_a, f"{a} and {b} ran at the same time"
