"""Every fault at once, through the real workflow: each record classified, the
others untouched, the report lists them, and rerun-failed reruns only them."""

from __future__ import annotations

import pandas as pd
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

# matmul cells fail at their start; the training faults need the training loop.
MATMUL_FAULTS = {
    "exception": "unknown",
    "sigabrt": "signal",
    "segfault": "signal",
    "sigkill": "signal",
    "hang": "timeout",
    "cuda_oom": "oom",
    "mps_oom": "oom",
    "mps_unsupported_op": "unsupported_op",
    "mps_placeholder": "placement",
    "compile_failed": "compile_failed",
}
TRAINING_FAULTS = {"nan_loss": "nan_loss", "silent_corruption": "accelerator_error"}


def test_every_fault_in_one_matrix(tmp_path):
    workflow = copy_workflow(tmp_path / "wf")
    config = tiny_config(
        devices=["cpu"],
        launcher={"max_attempts": 1, "allow_fault_injection": True, "progress": "never"},
    )
    config["workloads"]["matmul"].update(
        {"batch_sizes": list(range(1, len(MATMUL_FAULTS) + 2)), "timeout_s": 12}
    )
    config["workloads"]["image_cnn"]["batch_sizes"] = [8, 16, 32]
    faults = [
        {"workload": "matmul", "device": "cpu", "batch_size": bs, "fault": fault, "attempts": [1]}
        for bs, fault in enumerate(MATMUL_FAULTS, start=1)
    ] + [
        {
            "workload": "image_cnn",
            "device": "cpu",
            "batch_size": bs,
            "fault": fault,
            "attempts": [1],
        }
        for bs, fault in zip((8, 16), TRAINING_FAULTS, strict=True)
    ]
    config["fault_injection"] = faults
    write_config(workflow / "config.yaml", config)

    proc = run_snakemake(workflow, "--cores", "1", TARGET, timeout=600)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-5000:]

    expected = {}
    for bs, fault in enumerate(MATMUL_FAULTS, start=1):
        expected[f"results/runs/matmul/cpu/bs{bs}/rep0/metrics.json"] = MATMUL_FAULTS[fault]
    for bs, fault in zip((8, 16), TRAINING_FAULTS, strict=True):
        expected[f"results/runs/image_cnn/cpu/bs{bs}/rep0/metrics.json"] = TRAINING_FAULTS[fault]
    clean = [
        f"results/runs/matmul/cpu/bs{len(MATMUL_FAULTS) + 1}/rep0/metrics.json",
        "results/runs/image_cnn/cpu/bs32/rep0/metrics.json",
    ]
    for path, error_class in expected.items():
        record = read_record(workflow / path)
        assert record["status"] == "failed", path
        assert record["error"]["class"] == error_class, (path, record["error"])
    for path in clean:
        assert read_record(workflow / path)["status"] == "ok", path
    untouched = {p: ((workflow / p).read_bytes(), (workflow / p).stat().st_mtime_ns) for p in clean}

    # The stability table counts every class; the report renders and names them.
    stability = pd.read_csv(workflow / "results/tables/stability.csv").set_index(
        ["workload", "device"]
    )
    assert stability.loc[("matmul", "cpu"), "failed_cells"] == len(MATMUL_FAULTS)
    assert stability.loc[("image_cnn", "cpu"), "failed_cells"] == len(TRAINING_FAULTS)
    assert str(stability.loc[("matmul", "cpu"), "crashed"]) == "True"
    assert stability.loc[("matmul", "cpu"), "status"] == "crashed"
    report = (workflow / TARGET).read_text()
    for error_class in set(MATMUL_FAULTS.values()) | set(TRAINING_FAULTS.values()):
        assert error_class in report, error_class

    # Rerun exactly the failed cells; the faults only hit attempt 1, so with two
    # attempts each failed cell now ends ok, and nothing else runs again.
    listed = failed_cells(workflow)
    assert sorted(listed) == sorted(expected)
    classes = sorted(set(MATMUL_FAULTS.values()) | set(TRAINING_FAULTS.values()))
    launcher = {
        "max_attempts": 2,
        "retry_on": classes,
        "allow_fault_injection": True,
        "progress": "never",
    }
    again = rerun_failed(workflow, listed, launcher)
    output = again.stdout + again.stderr
    assert again.returncode == 0, output[-5000:]
    assert executed_rules(output).count("run_cell") == len(expected)
    for path in expected:
        record = read_record(workflow / path)
        assert record["status"] == "ok", (path, record.get("error"))
        assert [a["status"] for a in record["attempts"]] == ["failed", "ok"]
    for path, before in untouched.items():
        assert ((workflow / path).read_bytes(), (workflow / path).stat().st_mtime_ns) == before
