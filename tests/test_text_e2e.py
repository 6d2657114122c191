"""text_multilabel end to end: a tiny DistilBERT on cpu through the real workflow."""

from __future__ import annotations

import csv

import pytest
from helpers import copy_workflow, run_snakemake, tiny_config, write_config
from trainbench.common.records import read_record
from trainbench.workloads.textdata.proposals import PROPOSAL_LABELS

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

TARGET = "results/reports/text_multilabel.md"


def test_tiny_text_workload_report(tmp_path):
    workflow = copy_workflow(tmp_path / "wf")
    config = tiny_config(
        devices=["cpu", "mps"],
        workloads={
            "text_multilabel": {
                "batch_sizes": [16],
                "gradient_accumulation": 2,
                "epochs": 2,
                "warmup_steps": 1,
                "max_length": 64,
                "data": {"source": "proposals", "n_train": 96, "n_dev": 48},
                "tokenizer": {"vocab_size": 300},
                "model": {"dim": 32, "n_layers": 1, "n_heads": 2, "hidden_dim": 64},
                "optimizer": {"lr": 0.001},
            }
        },
    )
    write_config(workflow / "config.yaml", config)
    proc = run_snakemake(workflow, "--cores", "1", TARGET, timeout=300)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]

    record = read_record(workflow / "results/runs/text_multilabel/cpu/bs16/rep0/metrics.json")
    assert record["status"] == "ok", record.get("error")
    result = record["result"]
    settings = result["settings"]
    assert (
        settings["batch_size"],
        settings["gradient_accumulation"],
        settings["effective_batch_size"],
    ) == (16, 2, 32)
    assert settings["max_length"] == 64
    assert len(result["epochs"]) == 2
    for epoch in result["epochs"]:
        assert {"micro_f1", "macro_f1", "loss"} <= set(epoch["eval_metrics"])
        assert epoch["eval_seconds"] > 0
    assert result["timed"]["samples_per_s"] > 0
    task = result["task"]
    assert task["primary_metric"] == "micro_f1"
    assert [row["label"] for row in task["per_label"]] == list(PROPOSAL_LABELS)
    best = result["epochs"][task["best_epoch"] - 1]["eval_metrics"]
    assert (
        task["micro_f1"]
        == best["micro_f1"]
        == max(e["eval_metrics"]["micro_f1"] for e in result["epochs"])
    )
    mps = read_record(workflow / "results/runs/text_multilabel/mps/bs16/rep0/metrics.json")
    assert mps["status"] == "unavailable"

    # The shared data artifact: one tokenizer for every device and repeat.
    data = workflow / "results" / "data" / "text_multilabel"
    assert (data / "tokenizer" / "tokenizer.json").exists()
    with open(workflow / "results/tables/per_label_runs.csv", newline="") as fh:
        rows = [r for r in csv.DictReader(fh) if r["workload"] == "text_multilabel"]
    assert sorted(r["label"] for r in rows) == sorted(PROPOSAL_LABELS)

    report = (workflow / TARGET).read_text()
    for heading in (
        "## Summary",
        "## Training speed",
        "## Evaluation speed",
        "## Device verification",
        "## Per-epoch results",
        "## Per-label results",
        "## Aggregate metrics",
        "## Configuration used",
        "## Memory use",
    ):
        assert heading in report, heading
    for label in PROPOSAL_LABELS:
        assert f"| cpu | 16 | {label} |" in report
    assert "batch tensors attention_mask=cpu;input_ids=cpu;labels=cpu" in report
    assert "gradient accumulation 2 (effective batch 32)" in report
    assert "⚪ **mps**: unavailable" in report
