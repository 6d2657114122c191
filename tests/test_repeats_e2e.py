"""Adaptive repeats and interleaved rounds through the real workflow: after the
minimum, the checkpoint `plan_round` adds repeats to cells whose speedup interval
is wider than the target, round k of every device runs before round k + 1 of any,
and `repeats: N` still means exactly N."""

from __future__ import annotations

import json

import pytest
from helpers import copy_workflow, run_snakemake, tiny_config, write_config
from trainbench.analysis.tables import read_table
from trainbench.common.records import read_record

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

TARGET = "results/report.md"
CNN = {
    "batch_sizes": [32],
    "epochs": 1,
    "warmup_steps": 1,
    "cpu_threads": [1, 2],  # two devices: cpu-t1 (the baseline: listed first) and cpu-t2
    "data": {"source": "synthetic", "n_train": 128, "n_test": 32, "image_size": 16},
}


def _config(repeats) -> dict:
    config = tiny_config(devices=["cpu"], repeats=repeats)
    config["workloads"] = {"image_cnn": dict(CNN)}
    return config


def _started(workflow, device: str, rep: int) -> float:
    path = workflow / f"results/runs/image_cnn/{device}/bs32/rep{rep}/metrics.json"
    return read_record(path)["attempts"][0]["started_unix"]


def test_rounds_add_repeats_until_the_maximum_and_never_overtake(tmp_path):
    workflow = copy_workflow(tmp_path / "wf")
    # An unreachable target: every round asks for more, up to the maximum.
    write_config(
        workflow / "config.yaml",
        _config({"min": 2, "max": 4, "target_ci_halfwidth": 1e-9}),
    )
    proc = run_snakemake(workflow, "--cores", "1", TARGET, timeout=600)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]

    for rep in (2, 3):
        plan = json.loads((workflow / f"results/rounds/image_cnn/rep{rep}.json").read_text())
        assert sorted(map(tuple, plan["cells"])) == [("cpu-t1", 32), ("cpu-t2", 32)]
    for device in ("cpu-t1", "cpu-t2"):
        assert (workflow / f"results/runs/image_cnn/{device}/bs32/rep3/metrics.json").exists()
        assert not (workflow / f"results/runs/image_cnn/{device}/bs32/rep4").exists()
    # Interleaved: every device's repeat k started before any device's repeat k + 1.
    for rep in range(3):
        latest = max(_started(workflow, d, rep) for d in ("cpu-t1", "cpu-t2"))
        earliest_next = min(_started(workflow, d, rep + 1) for d in ("cpu-t1", "cpu-t2"))
        assert latest < earliest_next, rep

    repeats = read_table(workflow / "results/tables/repeats.csv").set_index("device")
    assert repeats.loc["cpu-t2", "repeats"] == 4
    assert str(repeats.loc["cpu-t2", "converged"]) == "False"
    assert "maximum" in repeats.loc["cpu-t2", "note"]
    report = (workflow / TARGET).read_text()
    assert "never converged" in report or "maximum" in report

    again = run_snakemake(workflow, "--cores", "1", "--dry-run", TARGET, timeout=120)
    assert "Nothing to be done" in again.stdout + again.stderr


def test_a_plain_repeat_count_means_exactly_that_many(tmp_path):
    workflow = copy_workflow(tmp_path / "wf")
    write_config(workflow / "config.yaml", _config(2))
    proc = run_snakemake(workflow, "--cores", "1", TARGET, timeout=300)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    runs = read_table(workflow / "results/tables/runs.csv")
    assert sorted(runs["rep"].unique()) == [0, 1]
    assert not (workflow / "results/rounds").exists()
