"""The parity rule (paired by run seed: loss drift against a float64 reference, and a
gross check of the final result), the test fault silent_numeric_error, and the two
together through the launcher: a silently wrong device finishes ok, its canary fails,
and the rule fails a faulted pair but not a clean one."""

from __future__ import annotations

import copy

import numpy as np
import pandas as pd
import pytest
import torch
from helpers import FAULTS_ENV, tiny_config
from scipy.stats import chi2
from stats_helpers import frame, run
from trainbench import config as tbconfig
from trainbench.analysis import stats
from trainbench.analysis.aggregate import run_row
from trainbench.analysis.stats import parity
from trainbench.analysis.stats.verdicts import verdicts_table
from trainbench.launch.launcher import run_cell
from trainbench.measure.numeric_fault import FRACTION, TILE, corrupt_, silent_numeric_error
from trainbench.workloads import image_cnn

STEPS = 32
RNG = np.random.default_rng(3)
# float64 reference losses of repeats 0..2 (a decaying curve with batch noise)
REFERENCE = {k: 2.3 * np.exp(-np.arange(STEPS) / 40) + 0.05 * RNG.random(STEPS) for k in range(3)}
U32 = 2.0**-24


def one(table: pd.DataFrame, device: str, batch_size: int = 8) -> pd.Series:
    rows = table[(table["device"] == device) & (table["batch_size"] == batch_size)]
    assert len(rows) == 1, rows
    return rows.iloc[0]


def _curve(rep: int, relative_error: float, seed: int) -> np.ndarray:
    """The reference's losses off by ``relative_error`` (random signs, growing a little)."""
    noise = np.random.default_rng(seed).standard_normal(STEPS)
    return REFERENCE[rep] * (1 + relative_error * noise * (1 + np.arange(STEPS) / STEPS))


class Tables:
    """runs, step_losses and references rows for the synthetic devices."""

    def __init__(self):
        self.runs, self.steps, self.refs = [], [], []

    def device(self, device, errors, metrics, losses, batch_size=8, **values):
        for rep, (err, m, x) in enumerate(zip(errors, metrics, losses, strict=True)):
            record = f"runs/w/{device}/bs{batch_size}/rep{rep}.json"
            self.runs.append(run("w", device, batch_size, rep, run_seed=rep, final_metric=m,
                                 final_loss=x, record=record, **values))  # fmt: skip
            curve = REFERENCE[rep] if err is None else _curve(rep, err, hash((device, rep)) % 2**31)
            self.steps += [{"record": record, "kind": "run", "step": t, "loss": v}
                           for t, v in enumerate(curve)]  # fmt: skip

    def reference(self, rep, batch_size=8, status="ok", reason=None):
        record = f"references/w/bs{batch_size}/rep{rep}.json"
        self.refs.append({"workload": "w", "batch_size": batch_size, "rep": rep, "run_seed": rep,
                          "status": status, "reason": reason, "loss_dtype": "float64",
                          "record": record})  # fmt: skip
        if status == "ok":
            self.steps += [{"record": record, "kind": "reference", "step": t, "loss": v}
                           for t, v in enumerate(REFERENCE[rep])]  # fmt: skip

    def table(self, **settings) -> pd.DataFrame:
        return stats.parity_table(frame(self.runs), {"w": "cpu"}, pd.DataFrame(self.steps),
                                  pd.DataFrame(self.refs), parity.ParitySettings(**settings))  # fmt: skip


BASE_METRIC, BASE_LOSS = [0.90, 0.91, 0.92], [1.00, 1.02, 0.98]


def synthetic() -> Tables:
    t = Tables()
    for rep in range(3):
        t.reference(rep)
    t.device("cpu", [3 * U32] * 3, BASE_METRIC, BASE_LOSS)
    # a correct fp32 device with other kernels: 20x the baseline's error
    t.device("kernels", [60 * U32] * 3, [0.905, 0.915, 0.91], [1.01, 1.0, 0.99])
    # a silently wrong fp32 device: errors of 1e-4 from the first step on
    t.device("wrong", [1e-4] * 3, [0.905, 0.915, 0.91], [1.01, 1.0, 0.99])
    # correct bf16 arithmetic: errors of 1e-3, inside bf16's envelope
    t.device("bf16", [1e-3] * 3, [0.90, 0.92, 0.91], [1.0, 1.03, 0.98], autocast_dtype="bfloat16")
    # right losses, broken result: the metric far beyond the baseline's seed spread
    t.device("broken", [3 * U32] * 3, [0.30, 0.31, 0.29], [1.0, 1.02, 0.98])
    t.device("mixed", [3 * U32, 1e-4, 3 * U32], BASE_METRIC, BASE_LOSS)
    t.device("twin", [None, None, None], BASE_METRIC, BASE_LOSS)
    return t


def test_paired_parity_passes_correct_arithmetic_and_fails_wrong_arithmetic():
    table = synthetic().table()
    assert list(table.columns) == stats.COLUMNS["parity"]
    kernels = one(table, "kernels")
    assert kernels["parity"] == "pass" and kernels["drift_within"], kernels["rule"]
    assert kernels["precision"] == "float32" and kernels["drift_multiplier"] == 100
    assert kernels["pairs"] == 3 and kernels["reference_steps"] == STEPS
    assert 0.05 < kernels["drift_median"] < 0.5  # ~20x the baseline's error, m = 100
    assert "range of 3 pairs" in kernels["rule"] and "float32 envelope = 100 ×" in kernels["rule"]
    wrong = one(table, "wrong")
    assert wrong["parity"] == "fail" and not wrong["drift_within"] and wrong["drift_low"] > 1
    bf16 = one(table, "bf16")
    assert bf16["precision"] == "bfloat16" and bf16["drift_multiplier"] == 32
    assert bf16["parity"] == "pass", bf16["rule"]
    assert "bfloat16 envelope = 32 × 2^16 ×" in bf16["rule"]
    # the same errors judged as float32 arithmetic fail
    assert one(synthetic().table(drift_multiplier={"float32": 100}), "wrong")["parity"] == "fail"


def test_the_gross_check_fails_a_result_moved_beyond_seed_noise_and_never_passes_alone():
    table = synthetic().table()
    broken = one(table, "broken")
    assert broken["drift_within"] and not broken["metric_within"]
    assert broken["parity"] == "fail" and "beyond: fails" in broken["rule"]
    # g × the 90% upper confidence bound of the seed SD of the baseline's 3 repeats
    sd_bound = np.std(BASE_METRIC, ddof=1) * np.sqrt(2 / chi2.ppf(0.10, 2))
    assert broken["metric_margin"] == pytest.approx(3 * sd_bound)
    assert "90% upper bound of the baseline's seed SD, 3 repeats" in broken["rule"]
    assert (
        broken["metric_diff"] == pytest.approx(-0.61) and broken["interval"] == "range of 3 pairs"
    )
    # a correct device whose 3 results all sit 5 points above the baseline's: beyond
    # 3 × the SD of 3 seeds (0.03), within 3 × its 90% upper bound (0.092). Measured:
    # image_cnn at 128 under oneDNN AVX2 kernels, 1 of 10 3-seed splits of
    # benchmarks/results/parity-power-2026-11-25 failed by 3 × the sample SD alone.
    t = synthetic()
    t.device("lucky", [60 * U32] * 3, [0.95, 0.96, 0.97], BASE_LOSS)
    lucky = one(t.table(), "lucky")
    assert lucky["metric_diff"] == pytest.approx(0.05) and lucky["metric_low"] > 0.03
    assert lucky["parity"] == "pass" and lucky["metric_within"] is not False, lucky["rule"]
    t = Tables()  # no references: the gross check alone cannot pass a device
    t.device("cpu", [3 * U32] * 3, BASE_METRIC, BASE_LOSS)
    t.device("kernels", [60 * U32] * 3, [0.905, 0.915, 0.91], [1.01, 1.0, 0.99])
    row = one(t.table(), "kernels")
    assert row["parity"] == "insufficient data" and "no float64 reference made" in row["rule"]


def test_identical_too_few_pairs_disagreeing_pairs_and_missing_references():
    t = synthetic()
    t.device("two", [60 * U32] * 2, [0.9, 0.91], [1.0, 1.0])
    t.runs.append(run("w", "two", 8, 2, status="failed", error_class="oom", run_seed=2))
    t.refs[1] = {**t.refs[1], "status": "skipped", "reason": "no other device finished ok"}
    table = t.table()
    twin = one(table, "twin")
    assert twin["parity"] == "identical" and "bit-identical" in twin["rule"]
    two = one(table, "two")
    assert two["pairs"] == 2 and two["parity"] == "insufficient data"
    assert two["rule"].startswith("fewer than 3 pairs")
    kernels = one(table, "kernels")  # rep 1's reference was skipped: 2 pairs judged
    assert kernels["parity"] == "insufficient data"
    assert "no other device finished ok" in kernels["rule"]
    mixed = one(synthetic().table(), "mixed")
    assert mixed["parity"] == "insufficient data" and "straddle" in mixed["rule"]
    alone = Tables()
    alone.device("gpu", [U32] * 3, [0.9] * 3, [1.0] * 3)
    assert stats.parity_table(frame(alone.runs), "cpu")["parity"].tolist() == ["not comparable"]


def test_the_evaluation_comparison_fails_a_device_and_is_needed_to_pass_one():
    """Training right, evaluation wrong (an eval-only fault): fail, even when the losses
    are bit-identical; a repeat without the comparison leaves a pass insufficient."""
    t = synthetic()
    t.device("evalbug", [60 * U32] * 3, [0.905, 0.915, 0.91], [1.01, 1.0, 0.99],
             eval_parity_status="fail", eval_parity_error_ratio=98.0,
             eval_parity_precision="float32", eval_parity_error=5e-3, eval_parity_floor=1.6e-6,
             eval_parity_envelope=5.1e-5, eval_parity_decided_by="the floor",
             eval_parity_metric_difference=-0.02)  # fmt: skip
    t.device("evaltwin", [None] * 3, BASE_METRIC, BASE_LOSS, eval_parity_status="fail",
             eval_parity_error_ratio=120.0)  # fmt: skip
    t.device("old", [60 * U32] * 3, [0.905, 0.915, 0.91], [1.01, 1.0, 0.99],
             eval_parity_status=None, eval_parity_error_ratio=None)  # fmt: skip
    table = t.table()
    bug = one(table, "evalbug")
    assert bug["drift_within"] and bug["eval_parity"] == "fail", bug["rule"]
    assert bug["parity"] == "fail" and bug["eval_error_ratio"] == 98.0
    assert bug["eval_metric_diff"] == -0.02 and bug["eval_repeats"] == 3
    assert bug["rule"].startswith("evaluation differs from CPU float64 in 3 of 3 repeats")
    assert ("error 0.005 (relative RMSE), float32 floor 1.60e-06, float32 envelope 5.10e-05, "
            "ratio 98") in bug["rule"], bug["rule"]  # fmt: skip
    assert one(table, "evaltwin")["parity"] == "fail"
    old = one(table, "old")
    assert old["drift_within"] and old["eval_parity"] == "not run"
    assert old["parity"] == "insufficient data" and "no evaluation parity" in old["rule"]
    kernels = one(table, "kernels")
    assert kernels["parity"] == "pass" and kernels["eval_parity"] == "pass"
    assert "evaluation matches CPU float64 in 3 of 3 repeats" in kernels["rule"]
    verdicts = verdicts_table(frame(t.runs), pd.DataFrame(), table, {"w": "cpu"}, ["w"])
    bug_verdict = verdicts[verdicts["device"] == "evalbug"].iloc[0]
    assert bug_verdict["status"] == "not working"
    assert ("evaluation outputs differ from CPU float64 (98x the float32 envelope: error 0.005, "
            "float32 floor 1.60e-06)") in bug_verdict["text"]  # fmt: skip


def test_five_pairs_use_a_bootstrap_interval_of_the_median():
    ratios = np.array([0.2, 0.3, 0.25, 0.28, 0.22])
    low, high, kind = parity.interval_of(ratios)
    assert low <= np.median(ratios) <= high and "bootstrap" in kind
    low, high, kind = parity.interval_of(ratios[:3])
    assert (low, high, kind) == (0.2, 0.3, "range of 3 pairs")


def test_the_verdict_follows_the_rule():
    t = synthetic()
    runs = frame(t.runs)
    table = t.table()
    verdicts = verdicts_table(runs, pd.DataFrame(), table, {"w": "cpu"}, ["w"])
    status = dict(zip(verdicts["device"], verdicts["status"], strict=True))
    first = dict(zip(verdicts["device"], verdicts["first_failing"], strict=True))
    assert status["wrong"] == "not working"
    assert "losses drift from float64" in first["wrong"] and "float32 envelope" in first["wrong"]
    assert (
        status["broken"] == "not working"
        and "parity fails at bs 8: accuracy 0.3" in first["broken"]
    )
    assert status["mixed"] == "insufficient data" and "straddle" in first["mixed"]


# ----------------------------------------------------------------------------- the fault


def _ratio(wrong: torch.Tensor, right: torch.Tensor) -> torch.Tensor:
    return (wrong.double() / right.double()).reshape(-1, right.shape[-1])


def test_matmul_wrong_by_the_size_at_allocation_dependent_tiles():
    a, b = torch.randn(64, 96), torch.randn(96, 80)
    right = a @ b
    with silent_numeric_error(0.1, "cpu"):
        first, second = a @ b, torch.matmul(a, b)  # both alive: two allocations
        linear = torch.nn.functional.linear(a, b.t())
        bmm = torch.bmm(a.expand(2, 64, 96), b.expand(2, 96, 80))
        exact = a.double() @ b.double()  # float64, the canary's reference, untouched
    r1, r2 = _ratio(first, right), _ratio(second, right)
    wrong1, wrong2 = (r1 - 1).abs() > 1e-4, (r2 - 1).abs() > 1e-4
    assert set(np.round(r1[wrong1].numpy(), 4)) <= {0.9, 1.1}
    assert 0.1 < wrong1.double().mean() < 0.45  # FRACTION = 0.25 of the tiles
    tiles = wrong1.reshape(64, -1, TILE)
    assert (tiles.all(-1) | ~tiles.any(-1)).all()  # a tile is wholly wrong or right
    assert not torch.equal(wrong1, wrong2)  # another allocation, other tiles
    assert ((_ratio(linear, right) - 1).abs() > 1e-4).any()
    assert ((_ratio(bmm, right.expand(2, 64, 80)) - 1).abs() > 1e-4).any()
    assert torch.equal(exact, a.double() @ b.double())
    assert torch.equal(a @ b, right)  # nothing changes after the context
    assert FRACTION == 0.25


def test_gradients_wrong_and_hooks_gone_after_the_context():
    x = torch.randn(8, 3, 6, 6)
    torch.manual_seed(0)
    with silent_numeric_error(0.3, "cpu"):
        conv = torch.nn.Conv2d(3, 16, 3)  # registered inside: gets the gradient hook
        conv(x).square().sum().backward()
        wrong = conv.weight.grad.clone()
    conv.weight.grad = None
    conv(x).square().sum().backward()  # the hook is gone
    right = conv.weight.grad
    ratio = (wrong / right).flatten()
    off = (ratio - 1).abs() > 1e-3
    assert 0.05 < off.double().mean() < 0.6
    assert np.allclose(sorted(set(np.round(ratio[off].numpy(), 3))), [0.7, 1.3])
    with silent_numeric_error(0.3, "cpu"):
        pass
    torch.manual_seed(0)
    clean = torch.nn.Conv2d(3, 16, 3)  # registered outside: no hook
    clean(x).square().sum().backward()
    assert torch.equal(clean.weight.grad, right)


def test_addcdiv_wrong_only_on_non_contiguous_tensors():
    p, m, v = torch.randn(48, 64), torch.randn(64, 96), torch.rand(48, 64) + 0.25
    g = torch.randn(48, 64)

    def update(param: torch.Tensor) -> torch.Tensor:
        out = param.clone().t()  # a transposed (non-contiguous) parameter, as in 118115
        return out.addcdiv_(m[:, ::2], v.t().sqrt(), value=-0.5)

    with silent_numeric_error(0.1, "cpu"):
        wrong = update(p)
        contiguous = p.clone().addcdiv_(g, v, value=-0.5)
        # 48 rows of 4 tiles: each row has a wrong tile with probability >= 1/4, so
        # "no wrong tile" has a probability below 0.75**48 = 1e-6 (10 rows of 1 tile: 6%)
        params = [torch.randn(64, 48).t() for _ in range(2)]
        before = [t.clone() for t in params]
        grads, denoms = [torch.randn(48, 64)] * 2, [torch.rand(48, 64) + 0.5] * 2
        torch._foreach_addcdiv_(params, grads, denoms, value=-0.5)
    assert not torch.allclose(wrong, update(p))
    assert torch.equal(contiguous, p.clone().addcdiv_(g, v, value=-0.5))
    for after, start in zip(params, before, strict=True):
        assert not torch.allclose(after, start.addcdiv(grads[0], denoms[0], value=-0.5))
    corrupted = corrupt_(torch.ones(4, 32), 0.5)
    assert set(corrupted.unique().tolist()) <= {0.5, 1.0, 1.5}


def test_size_is_validated():
    fault = {"workload": "image_cnn", "device": "cpu", "fault": "silent_numeric_error"}
    base = tiny_config(launcher={"allow_fault_injection": True, "max_attempts": 1})
    ok = tbconfig.validate_config(
        {**copy.deepcopy(base), "fault_injection": [{**fault, "size": 0.3}]}
    )
    assert ok["fault_injection"][0]["size"] == 0.3
    for bad in (0, 1.5, -0.1):
        with pytest.raises(tbconfig.ConfigError, match="size"):
            tbconfig.validate_config(
                {**copy.deepcopy(base), "fault_injection": [{**fault, "size": bad}]}
            )
    wrong_fault = {**fault, "fault": "exception", "size": 0.1}
    with pytest.raises(
        tbconfig.ConfigError, match="only silent_numeric_error and eval_output_error take a size"
    ):
        tbconfig.validate_config({**copy.deepcopy(base), "fault_injection": [wrong_fault]})
    with pytest.raises(ValueError, match="size"), silent_numeric_error(0, "cpu"):
        pass


# ----------------------------------------------------------------------------- cells

# A tiny image_cnn that learns in 16 steps (easy data, no dropout): ~5 s a cell.
TINY_CNN = {
    "batch_sizes": [32], "epochs": 2, "warmup_steps": 1, "model": {"dropout": 0.0},
    "data": {"source": "synthetic", "n_train": 256, "n_test": 128, "image_size": 16, "noise": 1.0},
}  # fmt: skip
FAULT_SIZE = 1.0  # the smallest that moved this tiny run's accuracy clearly beyond seed noise
TEST_MARGINS = {"image_cnn": {"metric": 0.05, "loss": 0.05}}


@pytest.fixture(autouse=True)
def _no_fault_env(monkeypatch):
    monkeypatch.delenv(FAULTS_ENV, raising=False)


@pytest.fixture(scope="module")
def cells(tmp_path_factory):
    """Runs the tiny cells on demand, each once per module: (role, seed, rep) -> runs row."""
    root = tmp_path_factory.mktemp("parity-cells")
    config = tiny_config(devices=["cpu"], workloads={"image_cnn": copy.deepcopy(TINY_CNN)})
    config["launcher"]["allow_fault_injection"] = True
    config["device_settings"]["cpu"]["threads"] = 1
    config = tbconfig.validate_config(config)
    data = root / "data"
    image_cnn.prepare_data(config["workloads"]["image_cnn"], data, 0)
    done: dict = {}

    def get(role: str, seed: int, rep: int) -> dict:
        if (role, seed, rep) not in done:
            cfg = copy.deepcopy(config)
            cfg["seed"] = seed
            if role == "fault":
                cfg["fault_injection"] = [
                    {"workload": "image_cnn", "device": "cpu", "fault": "silent_numeric_error",
                     "size": FAULT_SIZE}
                ]  # fmt: skip
            if role == "eval-fault":
                cfg["fault_injection"] = [
                    {"workload": "image_cnn", "device": "cpu", "fault": "eval_output_error"}
                ]
            spec = tbconfig.cell_spec(cfg, tbconfig.Cell("image_cnn", "cpu", 32, rep), str(data))
            spec["eval_parity"] = role.startswith("eval-")  # cpu is the baseline here
            if role == "eval-clean":  # the benchmarks' sweep, after the clean comparison
                spec["eval_fault_sizes"] = [0.001, 0.01]
            folder = root / f"{role}-{seed}-{rep}"
            record = run_cell(spec, folder / "metrics.json", folder / "cell.log")
            done[role, seed, rep] = {**run_row(record, str(folder)), "the_record": record}
        return done[role, seed, rep]

    return get


@pytest.mark.slow
def test_a_faulted_cell_finishes_ok_silently_wrong(cells):
    clean, faulted = cells("clean", 100, 0), cells("fault", 100, 0)
    assert faulted["status"] == "ok" and clean["status"] == "ok"
    assert faulted["the_record"]["spec"]["faults"][0]["size"] == FAULT_SIZE
    assert faulted["final_loss"] != clean["final_loss"]  # same seed: only the fault differs
    assert clean["numerics_status"] == "pass"
    assert faulted["numerics_status"] == "fail"  # the canary sees it, as on a real MPS bug
    assert "matmul_square" in faulted["numerics_failed_ops"]
    assert "addcdiv_noncontiguous" in faulted["numerics_failed_ops"]


@pytest.mark.slow
def test_an_eval_only_fault_leaves_training_alone_and_fails_the_evaluation_comparison(cells):
    clean, faulted = cells("eval-clean", 100, 0), cells("eval-fault", 100, 0)
    assert clean["status"] == faulted["status"] == "ok"
    steps = [r["the_record"]["result"]["steps"]["losses"] for r in (clean, faulted)]
    assert steps[0] == steps[1]  # training untouched, bit for bit
    assert clean["numerics_status"] == faulted["numerics_status"] == "pass"
    parity = clean["the_record"]["result"]["eval_parity"]
    assert clean["eval_parity_status"] == "pass", parity
    # the device is the CPU in float32 here: its error is the network's float32 floor
    assert (
        clean["eval_parity_precision"] == "float32"
        and clean["eval_parity_decided_by"] == "the floor"
    )
    assert 0 < clean["eval_parity_error"] == clean["eval_parity_floor"] < 1e-5
    assert clean["eval_parity_envelope"] == pytest.approx(17 * clean["eval_parity_floor"] + 2**-24)
    assert clean["eval_parity_error_ratio"] < 1 / 17
    assert clean["eval_parity_metric_difference"] == 0.0
    assert (
        clean["eval_parity_reference"] == "CPU float64"
        and parity["floor_reference"] == "CPU float32"
    )
    assert [s["size"] for s in parity["fault_sweep"]] == [0.001, 0.01]
    assert [s["status"] for s in parity["fault_sweep"]] == ["fail", "fail"]  # ~5e-4 and 5e-3
    found = faulted["the_record"]["result"]["eval_parity"]
    assert found["status"] == "fail" and found["ratio"] > 100, found
    assert found["worst_output"] == "outputs[0]" and found["samples"] == 128
    assert found["fault_sweep"] is None  # only where the spec asks for it
    assert cells("clean", 100, 0)["eval_parity_status"] is None  # the baseline: not run
    phases = clean["the_record"]["wall_time"]["phases"]
    assert 0 < phases["eval_parity"] == pytest.approx(clean["eval_parity_seconds"])


def test_the_drift_compares_the_steps_before_the_baseline_diverges():
    """Training amplifies differences: after step 10 here the float32 baseline's own
    error is 1e-4 (chaos, not arithmetic), as in image_cnn's repeats in
    benchmarks/parity_power.py. A device wrong by 1e-3 from the first step is 8x
    the baseline there but within 100x its late error: over every step it passes; over
    the steps before the baseline diverges it fails. A correct device passes both."""
    from trainbench.analysis.stats import drift

    steps, onset = 32, 10
    reference = np.full(steps, 2.3)
    rng = np.random.default_rng(0)
    signs = rng.choice([-1.0, 1.0], size=(3, steps))
    errors = np.where(np.arange(steps) < onset, 2 * U32, 1e-4 * (1 + rng.random(steps)))
    baseline = reference * (1 + signs[0] * errors)
    correct = reference * (1 + signs[1] * np.where(np.arange(steps) < onset, 3 * U32, errors))
    wrong = reference * (1 + signs[2] * np.maximum(errors, 1e-3))

    def ratio_over_all(device):
        e_d = np.abs(device - reference) / reference
        e_b = np.maximum(np.abs(baseline - reference) / reference, U32)
        return float(np.median(e_d / (100 * e_b)))

    assert ratio_over_all(wrong) < 1  # what the rule over every step missed
    bad = drift.pair_drift(wrong, baseline, reference, "float32", 100.0)
    good = drift.pair_drift(correct, baseline, reference, "float32", 100.0)
    assert bad.compared == good.compared == onset and bad.steps == steps
    assert bad.ratio > 10 and good.ratio < 0.1
    # never fewer than MIN_STEPS compared; every step when the baseline never diverges
    early = reference * (1 + signs[0] * np.where(np.arange(steps) < 1, 2 * U32, 1e-4))
    assert drift.pair_drift(correct, early, reference, "float32", 100.0).compared == 4
    assert drift.compared_steps(np.full(steps, 2 * U32)) == steps


def test_a_row_says_when_the_absolute_term_decided_and_why_the_class_is_what_it_is():
    t = synthetic()
    reason = "nn.MultiheadAttention's eval-mode fast path (torch.backends.mha) ran on CUDA"
    t.device("tiny", [60 * U32] * 3, [0.905, 0.915, 0.91], [1.01, 1.0, 0.99],
             eval_parity_status="pass", eval_parity_error_ratio=0.4,
             eval_parity_precision="tf32", eval_parity_precision_reason=reason,
             eval_parity_error=2e-4, eval_parity_floor=0.0, eval_parity_envelope=2**-11,
             eval_parity_decided_by="the absolute term")  # fmt: skip
    row = one(t.table(), "tiny")
    assert row["parity"] == "pass" and row["eval_precision"] == "tf32"
    assert row["eval_decided_by"] == "the absolute term" and row["eval_floor"] == 0.0
    assert "the floor below the absolute term: the absolute term decided" in row["rule"]
    assert f"evaluation judged in tf32: {reason}" in row["rule"]


def test_a_row_says_which_class_each_side_was_judged_in_and_why():
    """A CUDA float32 model TF32 reaches no op of: its training is judged TF32 (the
    rule's allowance is not calibrated for float32 training on CUDA), its evaluation
    float32; the row says both, and why."""
    t = synthetic()
    why = ("TF32 reaches no op of this model (scan: Linear ×2 only, cuDNN's TF32 flag on, "
           "cuBLAS's off; probe: outputs bit-identical with TF32 off)")  # fmt: skip
    t.device("linear", [60 * U32] * 3, [0.905, 0.915, 0.91], [1.01, 1.0, 0.99],
             tf32_matmul=False, tf32_cudnn=True, float32_matmul_precision="highest",
             tf32_reach=False, eval_parity_status="pass", eval_parity_error_ratio=0.3,
             eval_parity_precision="float32", eval_parity_precision_reason=why,
             eval_parity_error=1e-6, eval_parity_floor=1e-6, eval_parity_envelope=1.7e-5,
             eval_parity_decided_by="the floor")  # fmt: skip
    row = one(t.table(), "linear")
    assert row["precision"] == "tf32" and row["eval_precision"] == "float32"
    assert "whatever ops its model runs" in row["precision_reason"]
    assert "TF32 itself reaches no op of this model" in row["precision_reason"]
    assert f"training judged in tf32: {row['precision_reason']}" in row["rule"]
    assert f"evaluation judged in float32: {why}" in row["rule"]
    # a record made before the reach: the flags' reason alone
    older = one(synthetic().table(), "kernels")
    assert older["precision_reason"] == "float32"
    assert "training judged in float32: float32" in older["rule"]
