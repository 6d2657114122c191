"""The float64 reference of a repeat's first steps (trainbench.launch.reference): the same
start as the float32 cell, float64 arithmetic throughout, made only where parity
needs it; and the arithmetic precision a cell's record implies (trainbench.measure.precision)."""

from __future__ import annotations

import copy

import pytest
import torch
from helpers import tiny_config
from trainbench import config as tbconfig
from trainbench import workloads
from trainbench.analysis.loss_tables import loss_tables
from trainbench.launch.dispatch import run_workload
from trainbench.launch.reference import need_for_reference, reference_spec
from trainbench.measure.context import make_context
from trainbench.measure.precision import UNIT_ROUNDOFF, default_dtype, precision_of, upcast


@pytest.fixture(scope="module")
def image_config(tmp_path_factory):
    config = tbconfig.validate_config(
        tiny_config(
            devices=["cpu"],
            device_settings={"cpu": {"threads": [1, 2]}},
            workloads={
                "image_cnn": {
                    "batch_sizes": [16],
                    "epochs": 1,
                    "warmup_steps": 1,
                    "data": {"source": "synthetic", "n_train": 256, "n_test": 32, "image_size": 16},
                }
            },
        )
    )
    folder = tmp_path_factory.mktemp("data")
    workloads.get("image_cnn").prepare_data(config["workloads"]["image_cnn"], folder, 0)
    return config, str(folder)


def _run(spec: dict) -> dict:
    return run_workload(make_context(spec))


def test_the_reference_starts_where_the_cell_starts_and_computes_in_float64(image_config):
    config, data = image_config
    cell = tbconfig.Cell("image_cnn", "cpu-t1", 16, 0)
    spec = tbconfig.cell_spec(config, cell, data_path=data)
    spec["timing"]["extend_short_windows"] = False
    run = _run(spec)
    ref = _run(reference_spec(config, cell, steps=8, data_path=data))
    assert ref["kind"] == "reference" and ref["dtype"] == "float64"
    assert ref["loss_dtype"] == "float64"  # the workload upcasts, it never pulls back to fp32
    run_losses = run["steps"]["losses"][0][:8]
    ref_losses = ref["steps"]["losses"][0]
    assert len(ref_losses) == 8
    # the same weights and batches: step 0 differs only by float32 rounding of the loss
    assert ref_losses[0] == pytest.approx(run_losses[0], rel=1e-6)
    # float64 arithmetic: not the float32 numbers, yet within float32's early drift
    assert ref_losses != run_losses
    assert all(abs(a - b) / abs(b) < 1e-4 for a, b in zip(run_losses, ref_losses, strict=True))
    assert torch.get_default_dtype() == torch.float32  # restored after the reference


def test_a_reference_runs_at_most_one_epoch(image_config):
    config, data = image_config
    ref = _run(reference_spec(config, tbconfig.Cell("image_cnn", "cpu-t1", 16, 1), 10_000, data))
    assert len(ref["steps"]["losses"][0]) == ref["steps_per_epoch"] == 256 // 16
    assert ref["requested_steps"] == 10_000


def test_the_reference_spec_is_the_baseline_cell_on_the_cpu_without_autocast():
    config = tbconfig.validate_config(
        tiny_config(devices=["cuda", "cpu"], device_settings={"cuda": {"autocast": "bf16"}})
    )
    spec = reference_spec(config, tbconfig.Cell("image_cnn", "cuda", 32, 2), steps=16)
    assert spec["backend"] == "cpu" and spec["device_settings"]["autocast"] == "off"
    assert spec["reference"] == {"dtype": "float64", "steps": 16}
    assert spec["run_seed"] == config["seed"] + 2
    base = tbconfig.cell_spec(config, tbconfig.Cell("image_cnn", "cuda", 32, 2))
    assert spec["workload_settings"] == base["workload_settings"]
    assert spec["config_hash"] != base["config_hash"]


def _record(status="ok", losses=(1.0, 0.9)):
    return {"status": status, "result": {"steps": {"losses": [list(losses)]}}}


def test_a_reference_is_made_only_where_parity_needs_one():
    assert need_for_reference(_record(), [_record(losses=(1.0, 0.91))]) is None
    assert "bit-identical" in need_for_reference(_record(), [_record(), _record()])
    assert "no other device" in need_for_reference(_record(), [_record("failed")])
    assert "no other device" in need_for_reference(_record(), [])
    assert "baseline" in need_for_reference(_record("unavailable"), [_record()])


def test_upcast_is_float_in_a_cell_and_keeps_float64_in_a_reference():
    for dtype in (torch.bfloat16, torch.float16, torch.float32, torch.uint8):
        assert upcast(torch.ones(2, dtype=dtype)).dtype == torch.float32
    with default_dtype(torch.float64):
        assert upcast(torch.ones(2, dtype=torch.float32)).dtype == torch.float64
        assert upcast(torch.ones(2, dtype=torch.uint8)).dtype == torch.float64
    assert upcast(torch.ones(2, dtype=torch.float64)).dtype == torch.float64


@pytest.mark.parametrize(
    ("amp", "facts", "expected"),
    [
        ("bfloat16", {"tf32_cudnn": True}, "bfloat16"),
        ("float16", {}, "float16"),
        (None, {"tf32_cudnn": True, "tf32_matmul": False}, "tf32"),
        (None, {"float32_matmul_precision": "high"}, "tf32"),
        (None, {"float32_matmul_precision": "medium"}, "bfloat16"),
        (None, {"float32_matmul_precision": "highest", "tf32_matmul": False}, "float32"),
        (None, None, "float32"),
    ],
)
def test_the_precision_of_a_cell_is_its_coarsest_arithmetic(amp, facts, expected):
    assert precision_of(amp, facts) == expected
    assert expected in UNIT_ROUNDOFF


def test_step_losses_keep_the_first_steps_of_runs_and_references():
    ref = {"status": "ok", "cell": {"workload": "w", "batch_size": 8, "rep": 0, "device": "cpu"},
           "spec": {"run_seed": 0},
           "result": {"kind": "reference", "dtype": "float64", "loss_dtype": "float64",
                      "requested_steps": 3, "steps": {"losses": [[1.0, 0.9, 0.8]]}}}  # fmt: skip
    run = {
        "status": "ok",
        "result": {"kind": "training", "steps": {"losses": [[1.0, 0.9], [0.8, 0.7]]}},
    }
    skipped = {"status": "skipped", "reason": "no other device of this repeat finished ok",
               "cell": {"workload": "w", "batch_size": 8, "rep": 1, "device": "cpu"}}  # fmt: skip
    tables = loss_tables(
        [("run.json", run)], [("ref.json", ref), ("skip.json", copy.deepcopy(skipped))]
    )
    refs, steps = tables["references"], tables["step_losses"]
    assert list(refs["status"]) == ["ok", "skipped"] and list(refs["steps"].fillna(0)) == [3, 0]
    assert refs.loc[1, "reason"].startswith("no other device")
    run_steps = steps[steps["kind"] == "run"]
    assert list(run_steps["loss"]) == [1.0, 0.9, 0.8]  # across epochs, cut at the reference's 3
    assert list(steps[steps["kind"] == "reference"]["step"]) == [0, 1, 2]
