"""The parity rule (an equivalence test with a margin per workload), the test fault
silent_numeric_error, and the two together through the launcher: a silently wrong
device finishes ok, its canary fails, and the rule fails a faulted pair but not a
clean one."""

from __future__ import annotations

import copy
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import yaml
from helpers import FAULTS_ENV, tiny_config
from stats_helpers import frame, run
from trainbench import config as tbconfig
from trainbench import stats
from trainbench.aggregate import run_row
from trainbench.bench import parity_analysis, parity_power
from trainbench.launcher import run_cell
from trainbench.numeric_fault import FRACTION, TILE, corrupt_, silent_numeric_error
from trainbench.stats import parity
from trainbench.stats.verdicts import verdicts_table
from trainbench.workloads import image_cnn

MARGINS = {"default": {"metric": 0.05, "loss": 0.1}}


def one(table: pd.DataFrame, device: str, batch_size: int = 8) -> pd.Series:
    rows = table[(table["device"] == device) & (table["batch_size"] == batch_size)]
    assert len(rows) == 1, rows
    return rows.iloc[0]


def runs_of(device: str, metrics, losses, batch_size: int = 8, start_rep: int = 0) -> list:
    return [
        run("w", device, batch_size, start_rep + i, final_metric=m, final_loss=x)
        for i, (m, x) in enumerate(zip(metrics, losses, strict=True))
    ]


BASE_METRIC, BASE_LOSS = [0.90, 0.91, 0.92], [1.00, 1.02, 0.98]


def synthetic_runs() -> pd.DataFrame:
    rows = runs_of("cpu", BASE_METRIC, BASE_LOSS)
    rows += runs_of("close", [0.905, 0.915, 0.91], [1.01, 1.0, 0.99])
    rows += runs_of("worse", [0.70, 0.71, 0.72], [1.0, 1.01, 0.99])
    rows += runs_of("lossy", [0.91, 0.905, 0.915], [1.5, 1.52, 1.48])
    rows += runs_of("noisy", [0.70, 0.95, 1.0], [1.0, 1.0, 1.0])
    rows += runs_of("twin", BASE_METRIC, BASE_LOSS)
    rows += runs_of("two", [0.91, 0.92], [1.0, 1.0])
    rows.append(run("w", "two", 8, 2, status="failed", error_class="oom"))
    rows += runs_of("cpu", [0.9, 0.91], [1.0, 1.0], batch_size=16)
    rows += runs_of("close", [0.9, 0.91, 0.92], [1.0, 1.0, 1.0], batch_size=16)
    return frame(rows)


# ----------------------------------------------------------------------------- the rule


def test_welch_interval_matches_a_hand_computation():
    from scipy import stats as st

    dev, base = [0.905, 0.915, 0.91], BASE_METRIC
    diff, low, high, df = parity.welch_interval(dev, base)
    se = math.sqrt(np.var(dev, ddof=1) / 3 + np.var(base, ddof=1) / 3)
    v1, v2 = np.var(dev, ddof=1) / 3, np.var(base, ddof=1) / 3
    welch_df = (v1 + v2) ** 2 / (v1**2 / 2 + v2**2 / 2)
    assert diff == pytest.approx(0.0)
    assert df == pytest.approx(welch_df)
    assert high == pytest.approx(st.t.ppf(0.95, welch_df) * se) and low == pytest.approx(-high)
    # TOST: equivalence at the margin ⇔ both one-sided p-values below α
    p_low = st.t.sf((diff + 0.05) / se, welch_df)
    p_high = st.t.cdf((diff - 0.05) / se, welch_df)
    assert max(p_low, p_high) < 0.05
    assert parity.equivalence(dev, base, 0.05).outcome == "pass"


def test_outcomes_pass_fail_and_inconclusive():
    table = stats.parity_table(synthetic_runs(), {"w": "cpu"}, MARGINS)
    assert list(table.columns) == stats.COLUMNS["parity"]
    close = one(table, "close")
    assert close["parity"] == "pass" and close["metric_pass"] and close["loss_pass"]
    assert close["metric_margin"] == 0.05 and close["loss_margin"] == 0.1
    assert close["final_metric"] == pytest.approx(0.91)  # means
    assert (
        "accuracy: +0, 90% interval [" in close["rule"]
        and "within ±0.05: equivalent" in close["rule"]
    )
    assert "loss: " in close["rule"] and "within ±10%: equivalent" in close["rule"]
    worse = one(table, "worse")
    assert worse["parity"] == "fail" and not worse["metric_pass"] and worse["loss_pass"]
    assert worse["metric_diff"] == pytest.approx(-0.2) and worse["metric_high"] < -0.05
    assert "beyond ±0.05: differs by more than the margin" in worse["rule"]
    lossy = one(table, "lossy")
    assert lossy["parity"] == "fail" and not lossy["loss_pass"]
    assert lossy["loss_diff"] == pytest.approx(0.5) and lossy["loss_low"] > 0.1
    noisy = one(table, "noisy")
    assert noisy["parity"] == "insufficient data" and pd.isna(noisy["metric_pass"])
    assert noisy["rule"].startswith("inconclusive (accuracy): not shown equivalent")
    assert "neither within nor beyond ±0.05: inconclusive" in noisy["rule"]


def test_identical_too_few_repeats_and_not_comparable():
    table = stats.parity_table(synthetic_runs(), {"w": "cpu"}, MARGINS)
    twin = one(table, "twin")
    assert twin["parity"] == "identical" and "bit-identical" in twin["rule"]
    two = one(table, "two")  # the failed repeat is not a result
    assert two["n"] == 2 and two["parity"] == "insufficient data"
    assert "device 2, baseline cpu 3" in two["rule"] and pd.isna(two["metric_pass"])
    few_base = one(table, "close", 16)
    assert few_base["baseline_n"] == 2 and few_base["parity"] == "insufficient data"
    assert "baseline cpu 2" in few_base["rule"]
    alone = frame(runs_of("gpu", [0.9, 0.9, 0.9], [1.0, 1.0, 1.0]))
    assert stats.parity_table(alone, "cpu")["parity"].tolist() == ["insufficient data"]
    mixed = frame(
        [run("w", "cpu", 8, i, final_loss=1.0) for i in range(3)]
        + [run("w", "gpu", 8, i, final_metric=0.9) for i in range(3)]
    )
    assert stats.parity_table(mixed, "cpu")["parity"].tolist() == ["not comparable"]


def test_margins_per_workload_default_and_schema():
    given = {"default": {"metric": 0.2}, "w": {"loss": 0.01}}
    assert parity.margins_for(given, "w") == {"metric": 0.2, "loss": 0.01}
    assert parity.margins_for(None, "w") == parity.FALLBACK_MARGINS
    # the schema's `default` entry is the code's fallback; a partial entry keeps the rest
    config = tbconfig.validate_config(
        tiny_config(report={"parity_margins": {"clip": {"metric": 0.3}}})
    )
    margins = config["report"]["parity_margins"]
    assert margins["default"] == parity.FALLBACK_MARGINS
    assert margins["clip"]["metric"] == 0.3 and "loss" in margins["clip"]
    assert set(margins) >= {"image_cnn", "text_multilabel", "clip", "two_tower"}
    tight = stats.parity_table(synthetic_runs(), {"w": "cpu"}, {"w": {"metric": 0.001}})
    assert one(tight, "close")["parity"] == "insufficient data"  # interval wider than ±0.001


def test_the_verdict_follows_the_rule():
    runs = synthetic_runs()
    runs = runs[runs["status"] == "ok"]  # a failed cell alone makes a device not working
    table = stats.parity_table(runs, {"w": "cpu"}, MARGINS)
    verdicts = verdicts_table(runs, pd.DataFrame(), table, {"w": "cpu"}, ["w"])
    status = dict(zip(verdicts["device"], verdicts["status"], strict=True))
    first = dict(zip(verdicts["device"], verdicts["first_failing"], strict=True))
    assert status["worse"] == "not working" and "parity fails at bs 8: accuracy" in first["worse"]
    assert status["lossy"] == "not working" and "loss 1.5 vs 1" in first["lossy"]
    assert status["noisy"] == "insufficient data" and "inconclusive" in first["noisy"]
    assert status["two"] == "insufficient data" and "device 2, baseline cpu 3" in first["two"]


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
    with pytest.raises(tbconfig.ConfigError, match="only silent_numeric_error takes a size"):
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
            spec = tbconfig.cell_spec(cfg, tbconfig.Cell("image_cnn", "cpu", 32, rep), str(data))
            folder = root / f"{role}-{seed}-{rep}"
            record = run_cell(spec, folder / "metrics.json", folder / "cell.log")
            done[role, seed, rep] = {**run_row(record, str(folder)), "the_record": record}
        return done[role, seed, rep]

    return get


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
def test_parity_fails_a_faulted_pair_and_not_a_clean_one(cells):
    base = [cells("clean", 0, rep) for rep in range(3)]
    clean = [cells("clean", 100, rep) for rep in range(3)]
    faulted = [cells("fault", 100, rep) for rep in range(3)]
    found = parity_analysis.judge(base, faulted, TEST_MARGINS)
    assert found["parity"] == "fail", found["rule"]
    assert parity_analysis.judge(base, clean, TEST_MARGINS)["parity"] != "fail"


def test_power_benchmark_plan_and_summary(tmp_path):
    config_path = tmp_path / "config.yaml"
    config_path.write_text(yaml.safe_dump(tiny_config(workloads={"image_cnn": TINY_CNN})))
    config = parity_power.load_config(config_path)
    assert config["workloads"].keys() == {"image_cnn"}  # training workloads only
    jobs = parity_power.plan(config, sizes=[0.1, 0.3], repeats=3)
    assert len(jobs) == 3 * (2 + 2)
    spec = parity_power.job_spec(config, next(j for j in jobs if j.role == "fault"), None)
    assert spec["cell"]["device"] == "cpu-t2" and spec["run_seed"] == 100
    assert spec["faults"][0] == {"workload": "image_cnn", "device": "cpu-t2",
                                 "fault": "silent_numeric_error", "size": 0.1}  # fmt: skip

    def row(role, rep, metric, loss, size=0.0):
        return {
            "workload": "image_cnn", "batch_size": 32, "role": role, "size": size, "rep": rep,
            "status": "ok", "final_metric": metric, "final_loss": loss,
            "primary_metric": "accuracy", "numerics_status": "fail" if size else "pass",
        }  # fmt: skip

    runs = [row("baseline", i, m, 1.0 + i / 100) for i, m in enumerate([0.9, 0.91, 0.92])]
    runs += [row("clean", i, m, 1.0 - i / 100) for i, m in enumerate([0.91, 0.9, 0.905])]
    runs += [row("fault", i, m, 1.5, 0.3) for i, m in enumerate([0.5, 0.52, 0.48])]
    comparisons = parity_analysis.compare(runs, MARGINS)
    total = parity_analysis.summary(comparisons)
    assert comparisons[0]["faults"][0]["detected"] and total["detected_by_size"] == {"0.3": "1/1"}
    assert total["clean_pair_false_alarms"] == 0 and total["clean_splits"] == 10
    config = {"date": "today", "path": "c.yaml", "sha256": "ab" * 32}
    results = {"comparisons": comparisons, "summary": total, "repeats": 3, "config": config}
    text = parity_analysis.render(results)
    assert "**detected**" in text and "| image_cnn | 32 |" in text
    assert Path(parity_power.__file__).name == "parity_power.py"


def test_workload_code_hash_covers_the_modules_the_workload_imports(tmp_path):
    from trainbench.bench.parity_power import workload_code_sha256

    (tmp_path / "mine.py").write_text("from .mine_model import Net\nfrom . import common\n")
    (tmp_path / "mine_model.py").write_text("from .layers import Block\n")
    for name in ("common", "layers", "unrelated"):
        (tmp_path / f"{name}.py").write_text("X = 1\n")
    before = workload_code_sha256(tmp_path / "mine.py")
    (tmp_path / "unrelated.py").write_text("X = 2\n")
    assert workload_code_sha256(tmp_path / "mine.py") == before
    for name in ("common", "layers"):  # imported directly, and through mine_model
        (tmp_path / f"{name}.py").write_text("X = 3\n")
        assert workload_code_sha256(tmp_path / "mine.py") != before
        before = workload_code_sha256(tmp_path / "mine.py")
