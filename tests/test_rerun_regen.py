"""Rerunning exactly the failed cells, and rebuilding reports without training."""

from __future__ import annotations

import pytest
from helpers import (
    copy_workflow,
    executed_rules,
    failed_cells,
    rerun_failed,
    run_snakemake,
    tiny_config,
    write_config,
)
from trainbench.common.records import read_record

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

TARGET = "results/report.md"


def snapshot(workflow):
    runs = workflow / "results" / "runs"
    return {
        p.relative_to(runs).as_posix(): (p.read_bytes(), p.stat().st_mtime_ns)
        for p in sorted(runs.rglob("metrics.json"))
    }


@pytest.fixture
def ran(tmp_path):
    """A tiny matrix in which one cpu cell crashes on its first attempt."""
    workflow = copy_workflow(tmp_path / "wf")
    config = tiny_config(
        devices=["cpu", "mps"],
        launcher={"max_attempts": 1, "allow_fault_injection": True, "progress": "never"},
        fault_injection=[
            {
                "workload": "matmul",
                "device": "cpu",
                "batch_size": 1,
                "fault": "sigabrt",
                "attempts": [1],
            }
        ],
    )
    config["workloads"]["matmul"]["batch_sizes"] = [1, 2]
    write_config(workflow / "config.yaml", config)
    proc = run_snakemake(workflow, "--cores", "1", TARGET, timeout=300)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-5000:]
    return workflow


def test_rerun_failed_replaces_only_failed_records(ran):
    workflow = ran
    failed = workflow / "results/runs/matmul/cpu/bs1/rep0/metrics.json"
    before = snapshot(workflow)
    assert read_record(failed)["status"] == "failed"
    assert read_record(failed)["error"]["class"] == "signal"

    listed = failed_cells(workflow, "--device", "cpu")
    assert listed == ["results/runs/matmul/cpu/bs1/rep0/metrics.json"]
    assert failed_cells(workflow, "--device", "mps") == []

    # The second attempt is not faulted: the rerun gets an ok record.
    proc = rerun_failed(
        workflow,
        listed,
        {"max_attempts": 2, "allow_fault_injection": True, "progress": "never"},
        300,
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-5000:]
    assert executed_rules(output).count("run_cell") == 1
    assert {"aggregate", "report"} <= set(executed_rules(output))

    after = snapshot(workflow)
    assert set(after) == set(before)
    for key, (content, mtime) in before.items():
        if key == "matmul/cpu/bs1/rep0/metrics.json":
            assert after[key][0] != content
        else:
            assert after[key] == (content, mtime), f"{key} was touched"
    record = read_record(failed)
    assert record["status"] == "ok"
    assert [a["status"] for a in record["attempts"]] == ["failed", "ok"]


def test_template_change_rebuilds_reports_without_training(ran):
    workflow = ran
    before = snapshot(workflow)
    template = workflow / "scripts/trainbench/analysis/templates/report.md.j2"
    template.write_text(template.read_text() + "\nRegenerated from stored records.\n")
    proc = run_snakemake(workflow, "--cores", "1", TARGET, timeout=300)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-5000:]
    rules = executed_rules(output)
    assert "report" in rules
    assert not {"run_cell", "prepare_data"} & set(rules), rules
    assert snapshot(workflow) == before
    assert "Regenerated from stored records." in (workflow / TARGET).read_text()
