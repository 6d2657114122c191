"""The numerical canary (trainbench.measure.canary): passes on an honest CPU, fails naming the
op when an op is wrong the way MPS has been wrong, records instead of raising, runs
through the child into every cell's record, and its MPS path calls torch.mps only
through the feature-detected device API."""

from __future__ import annotations

import ast
import copy
import json
import types
from pathlib import Path

import pandas as pd
import pytest
import torch
from helpers import tiny_config
from trainbench import config as tbconfig
from trainbench.analysis import aggregate
from trainbench.common.records import read_record
from trainbench.launch.launcher import run_cell
from trainbench.measure import canary
from trainbench.measure.devices import AmpPolicy, MpsDevice, get_device
from trainbench.workloads import image_cnn

CANARY_PY = Path(canary.__file__)


def make_ctx(autocast: str | None = None, dtype: str | None = None, device=None):
    """What run_canary reads of a RunContext: the device, torch device, AMP policy, spec."""
    amp = AmpPolicy(bool(autocast), autocast, False, "test")
    settings = {"dtype": dtype} if dtype else {}
    return types.SimpleNamespace(
        device=device or get_device("cpu", {}), torch_device=torch.device("cpu"), amp=amp,
        spec={"workload_settings": settings},
    )  # fmt: skip


def reference_untouched(fn):
    """``fn`` wrapped to misbehave only on the device side (never on the float64 reference)."""

    def wrapper(wrong):
        def patched(*args, **kwargs):
            if any(isinstance(a, torch.Tensor) and a.dtype == torch.float64 for a in args):
                return fn(*args, **kwargs)
            return wrong(*args, **kwargs)

        return patched

    return wrapper


# ----------------------------------------------------------------------------- passing


@pytest.mark.parametrize(
    ("autocast", "dtype", "low"),
    [(None, None, None), ("bfloat16", None, "bfloat16"), (None, "float16", "float16")],
)
def test_canary_passes_on_the_cpu(autocast, dtype, low):
    result = canary.run_canary(make_ctx(autocast, dtype))
    assert result["status"] == "pass", result
    assert result["failed_ops"] == [] and result["reference"] == "CPU float64"
    assert set(result["ops"]) == {op.name for op in canary.BATTERY}
    assert 0 < result["seconds"] < 5 and "max|out - ref|" in result["method"]
    for name, op in result["ops"].items():
        assert op["passed"] and op["max_rel_error"] <= op["tolerance"], name
        assert op["tolerance"] == canary.TOLERANCES[op["tolerance_class"]]
    dtypes = {op["dtype"] for op in result["ops"].values()}
    if low is None:
        assert dtypes == {"float32"} and result["precision"] == "float32 inputs"
    else:  # matmul runs low; what autocast keeps in float32 is held to float32's tolerance
        assert result["ops"]["matmul_odd"]["dtype"] == low
        assert result["ops"]["matmul_odd"]["tolerance"] == canary.TOLERANCES[low]
    if autocast:
        assert result["ops"]["softmax"]["tolerance"] == canary.TOLERANCES["float32"]


def test_tf32_mode_relaxes_only_matmul_like_ops(monkeypatch):
    monkeypatch.setattr(torch, "get_float32_matmul_precision", lambda: "high")
    ctx = make_ctx()
    ctx.torch_device = torch.device("cuda")
    precision = canary.precision_of(ctx)
    assert precision.fp32_matmul == "tf32"
    ops = {op.name: op for op in canary.BATTERY}
    key = canary.tolerance_key
    assert key(ops["bmm"], torch.float32, precision) == "tf32"
    assert key(ops["softmax"], torch.float32, precision) == "float32"
    assert key(ops["bmm"], torch.bfloat16, precision) == "bfloat16"


def test_relative_error_is_normwise_and_fails_non_finite_output():
    ref = torch.tensor([10.0, 1e-9, -2.0], dtype=torch.float64)
    assert canary.relative_error(ref.float() + torch.tensor([0.0, 1e-6, 0.0]), ref) < 1e-6
    assert canary.relative_error(ref * 1.2, ref) == pytest.approx(0.2)
    assert canary.relative_error(torch.tensor([float("nan"), 0.0, 0.0]), ref) == float("inf")


# ----------------------------------------------------------------------------- failing


@pytest.mark.parametrize("autocast", [None, "bfloat16"])
def test_matmul_scaled_by_1_2_fails_naming_the_matmul_ops(monkeypatch, autocast):
    original = torch.Tensor.__matmul__
    wrong = reference_untouched(original)(lambda a, b: original(a, b) * 1.2)
    monkeypatch.setattr(torch.Tensor, "__matmul__", wrong)
    result = canary.run_canary(make_ctx(autocast))
    assert result["status"] == "fail"
    assert {"matmul_square", "matmul_tall", "matmul_odd", "matmul_strided"} <= set(
        result["failed_ops"]
    )
    assert "softmax" not in result["failed_ops"]
    op = result["ops"]["matmul_square"]
    assert op["passed"] is False and op["max_rel_error"] == pytest.approx(0.2, rel=0.05)


def test_matmul_wrong_in_a_block_fails(monkeypatch):
    original = torch.matmul

    def block(a, b):  # 10% wrong in the first 16 rows only (allocator-state bug shape)
        out = original(a, b)
        out[:16] *= 1.1
        return out

    monkeypatch.setattr(torch, "matmul", reference_untouched(original)(block))
    result = canary.run_canary(make_ctx())
    assert result["failed_ops"] == ["matmul_transposed"]
    assert result["ops"]["matmul_transposed"]["max_rel_error"] > 0.01


def test_bmm_wrong_only_for_non_contiguous_operands(monkeypatch):
    original = torch.bmm

    def wrong(a, b):
        out = original(a, b)
        return out if a.is_contiguous() and b.is_contiguous() else out * 1.2

    monkeypatch.setattr(torch, "bmm", reference_untouched(original)(wrong))
    result = canary.run_canary(make_ctx())
    assert result["status"] == "fail"
    assert result["failed_ops"] == ["bmm_transposed", "bmm_transposed_grad"]
    assert result["ops"]["bmm"]["passed"]


def test_addcdiv_lost_on_non_contiguous_tensors_fails(monkeypatch):
    original = torch.Tensor.addcdiv_

    def lost(self, *args, **kwargs):  # pytorch 118115: the update never reaches the view
        return self if not self.is_contiguous() else original(self, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "addcdiv_", reference_untouched(original)(lost))
    result = canary.run_canary(make_ctx())
    assert result["failed_ops"] == ["addcdiv_noncontiguous"]
    assert result["ops"]["addcdiv"]["passed"]


def test_nan_output_fails_with_a_null_error(monkeypatch):
    original = torch.nn.functional.softmax
    nan = reference_untouched(original)(lambda x, **kw: original(x, **kw) * float("nan"))
    monkeypatch.setattr(torch.nn.functional, "softmax", nan)
    result = canary.run_canary(make_ctx())
    op = result["ops"]["softmax"]
    assert result["failed_ops"] == ["softmax"]
    assert op["finite"] is False and op["max_rel_error"] is None and not op["passed"]


# ----------------------------------------------------------------------------- errors


def test_an_exception_inside_the_canary_is_recorded_not_raised(monkeypatch):
    def boom(ctx):
        raise RuntimeError("MPS backend exploded")

    monkeypatch.setattr(canary, "run_battery", boom)
    result = canary.run_canary(make_ctx())
    assert result["status"] == "error"
    assert result["message"] == "RuntimeError: MPS backend exploded"
    assert "boom" in result["traceback"]


def test_the_thread_count_is_restored_even_after_an_error(monkeypatch):
    threads = torch.get_num_threads()
    seen = []
    monkeypatch.setattr(canary, "run_battery", lambda ctx: seen.append(torch.get_num_threads()))
    canary.run_canary(make_ctx())
    assert seen == [1] and torch.get_num_threads() == threads
    monkeypatch.setattr(canary, "run_battery", lambda ctx: 1 / 0)
    assert canary.run_canary(make_ctx())["status"] == "error"
    assert torch.get_num_threads() == threads


def test_an_op_that_raises_is_recorded_and_the_others_still_run(monkeypatch):
    original = torch.nn.functional.log_softmax

    def refuse(*args, **kwargs):
        raise NotImplementedError("aten::_log_softmax not implemented for 'MPS'")

    monkeypatch.setattr(torch.nn.functional, "log_softmax", reference_untouched(original)(refuse))
    result = canary.run_canary(make_ctx())
    assert result["status"] == "error" and result["failed_ops"] == []
    assert result["errored_ops"] == ["log_softmax"]
    assert result["message"].startswith("log_softmax: NotImplementedError: aten::_log_softmax")
    assert result["ops"]["softmax"]["passed"]


# ----------------------------------------------------------------------------- MPS


def test_canary_path_runs_with_the_mps_device_api_patched(monkeypatch):
    calls = []
    monkeypatch.setattr(torch.mps, "synchronize", lambda: calls.append("sync"))
    monkeypatch.setattr(torch.mps, "empty_cache", lambda: calls.append("empty"))
    result = canary.run_canary(make_ctx(device=MpsDevice()))
    assert result["status"] == "pass"
    assert calls == ["sync", "sync", "empty"]  # synchronized at the edges, cache freed after


def test_canary_runs_without_torch_mps(monkeypatch):
    monkeypatch.setattr(torch, "mps", types.SimpleNamespace())  # an old or odd torch
    assert canary.run_canary(make_ctx(device=MpsDevice()))["status"] == "pass"


def test_canary_never_calls_torch_mps_itself():
    tree = ast.parse(CANARY_PY.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            assert node.attr != "mps", f"line {node.lineno}: torch.mps must go through devices"


# ----------------------------------------------------------------------------- records


def _record(numerics: dict | None) -> dict:
    return {
        "status": "ok", "cell": {"workload": "w", "device": "cpu", "batch_size": 8, "rep": 0},
        "result": {"kind": "training"}, "numerics": numerics,
    }  # fmt: skip


def test_runs_table_columns_from_the_record():
    ops = {
        "matmul_odd": {"max_rel_error": 0.21, "tolerance": 0.01, "finite": True, "passed": False},
        "softmax": {"max_rel_error": 1e-6, "tolerance": 1e-4, "finite": True, "passed": True},
        "bmm": {"max_rel_error": None, "tolerance": 1e-4, "finite": False, "passed": False},
    }
    row = aggregate.run_row(
        _record({"status": "fail", "failed_ops": ["matmul_odd", "bmm"], "ops": ops}), "m.json"
    )
    assert row["numerics_status"] == "fail"
    assert row["numerics_failed_ops"] == "matmul_odd;bmm"
    assert row["numerics_max_rel_error"] == float("inf")  # bmm's output was not finite
    assert row["numerics_max_error_ratio"] == float("inf")
    assert (row["numerics_first_failed_error"], row["numerics_first_failed_tolerance"]) == (
        0.21,
        0.01,
    )
    none = aggregate.run_row(_record(None), "m.json")
    assert none["numerics_status"] is None and none["numerics_failed_ops"] is None
    error = aggregate.run_row(_record({"status": "error", "message": "boom"}), "m.json")
    assert (error["numerics_status"], error["numerics_message"]) == ("error", "boom")


@pytest.fixture(scope="module")
def cnn_data(tmp_path_factory) -> str:
    config = tbconfig.validate_config(tiny_config())
    out = tmp_path_factory.mktemp("data") / "image_cnn"
    image_cnn.prepare_data(config["workloads"]["image_cnn"], out, config["seed"])
    return str(out)


@pytest.mark.slow
@pytest.mark.parametrize("workload", ["image_cnn", "matmul"])
def test_every_cell_record_carries_its_canary(tmp_path, cnn_data, workload):
    cell = tbconfig.Cell(workload, "cpu", 32 if workload == "image_cnn" else 1, 0)
    config = tbconfig.validate_config(copy.deepcopy(tiny_config()))
    spec = tbconfig.cell_spec(config, cell, data_path=cnn_data if workload == "image_cnn" else None)
    returned = run_cell(spec, tmp_path / "metrics.json", tmp_path / "cell.log")
    record = read_record(tmp_path / "metrics.json")
    assert record == json.loads(json.dumps(returned))
    assert record["status"] == "ok", record.get("error")
    numerics = record["numerics"]
    assert numerics["status"] == "pass" and numerics["failed_ops"] == []
    assert numerics["reference"] == "CPU float64" and numerics["seconds"] < 5
    assert set(numerics["ops"]) == {op.name for op in canary.BATTERY}
    row = aggregate.run_row(record, "metrics.json")
    assert row["numerics_status"] == "pass" and row["numerics_failed_ops"] is None
    assert 0 < row["numerics_max_error_ratio"] < 1
    table = aggregate.build_tables([("metrics.json", record)])["runs"]
    assert table["numerics_status"].tolist() == ["pass"]


# ----------------------------------------------------------------------------- report


def test_report_renders_the_canary_from_the_verification_table(tmp_path):
    from test_report import scenario, section, write_inputs
    from trainbench.analysis.report import render_workload_report
    from trainbench.analysis.stats.verdicts import VERIFICATION_COLUMNS

    rows = scenario()
    rows["verification"][0].update(numerics_pass=True, numerics_detail="6/6 runs pass")
    rows["verification"][1].update(
        numerics_pass=False, numerics_detail="fail in 2/6 runs: matmul_odd rel. error 0.21 > 0.01"
    )
    inputs = write_inputs(tmp_path, rows)
    pd.DataFrame(rows["verification"], columns=VERIFICATION_COLUMNS).to_csv(
        inputs["verification"], index=False
    )
    text = render_workload_report("image_cnn", inputs, tmp_path / "image_cnn.md")
    checks = section(text, "Device verification")
    assert "- [x] Numerical canary: 6/6 runs pass" in checks
    assert "- [ ] Numerical canary: fail in 2/6 runs: matmul_odd rel. error 0.21 > 0.01" in checks
    numerics = section(text, "Numerics")
    assert "| cpu | 6 | yes | 6/6 runs pass |" in numerics
    assert "| cuda | 6 | no | fail in 2/6 runs: matmul_odd rel. error 0.21 > 0.01 |" in numerics
