"""Your own model as a workload: an entry `module:function` returning TrainingParts
runs through the same loop, records, tables and reports as the bundled workloads."""

from __future__ import annotations

import shutil

import pytest
import yaml
from helpers import REPO, copy_workflow, run_snakemake, tiny_config, write_config
from trainbench import workloads
from trainbench.common.records import read_record
from trainbench.config import ConfigError, validate_config


def test_the_bundled_workloads_are_entries_of_the_same_interface():
    for name, found in workloads.WORKLOADS.items():
        if found.kind == "training":
            module, function = found.entry.split(":")
            assert callable(getattr(workloads.get(name), function)), name


def test_an_entry_that_cannot_be_imported_names_the_key_and_the_fix():
    config = {"workloads": {"mine": {"entry": "no_such_module:build"}}}
    with pytest.raises(ConfigError, match=r"`workloads.mine.entry` names module 'no_such_module'"):
        validate_config(config)
    with pytest.raises(ConfigError, match=r"Fix: point `workloads.mine.python_path`"):
        validate_config({"workloads": {"mine": {"entry": "no_such_module:build"}}})


def test_a_misspelt_workload_is_named_as_such():
    with pytest.raises(ConfigError, match=r"`workloads.imag_cnn` is not a bundled workload"):
        validate_config({"workloads": {"imag_cnn": {"batch_sizes": [8]}}})


@pytest.mark.slow
@pytest.mark.e2e
def test_the_example_model_runs_through_the_workflow(tmp_path):
    workflow = copy_workflow(tmp_path / "wf")
    shutil.copytree(REPO / "examples", workflow / "examples")
    example = yaml.safe_load((REPO / "examples" / "my_model.yaml").read_text())
    config = tiny_config(devices=["cpu", "mps"])
    config["workloads"] = {"my_model": {**example["workloads"]["my_model"], "epochs": 2}}
    write_config(workflow / "config.yaml", config)
    proc = run_snakemake(workflow, "--cores", "1", "results/report.md", timeout=300)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-5000:]
    record = read_record(workflow / "results/runs/my_model/cpu/bs32/rep0/metrics.json")
    assert record["status"] == "ok", record.get("error")
    result = record["result"]
    assert result["task"]["primary_metric"] == "accuracy"
    assert result["task"]["best"] > 0.7  # the toy task is learnt
    assert record["numerics"]["status"] == "pass"
    report = (workflow / "results/reports/my_model.md").read_text()
    assert "Verification report: `my_model`" in report
    assert "**cpu**" in report
