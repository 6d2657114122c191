"""The stall rule (docs/statistics.md §1, "A stall cannot set a throughput"): a window
whose severe outlier steps (beyond Q3 + 3 IQR) take more than timing.max_stall_share of
its seconds is extended; stalls still above the share when it cannot be are excluded
from the published throughput and reported; stalls within the share change nothing;
time to target counts every stall.

The constructed windows mirror the H200 run that made the rule: a 66M-parameter text
model at 16 samples a step, median step 0.020 s, whose repeat 0 had one step taking
66.8% of its 1.87 s window (266 samples/s against 729 and 806)."""

from __future__ import annotations

import math
import re
import time

import numpy as np
import pandas as pd
import pytest
from stats_helpers import run
from test_tracking import FakeDevice, FakeEventDevice, _context, _parts, _spec
from trainbench.analysis.aggregate import run_row
from trainbench.analysis.quality_rows import quality_rows
from trainbench.analysis.stats.targets import time_to_target_table
from trainbench.measure.measurement import (
    DEFAULTS,
    EXTENSION_MARGIN,
    TimingProtocol,
    extension_steps_needed,
    measurement_window,
)
from trainbench.measure.training import run_training

STEP_S, SAMPLES = 0.020, 16
PROTOCOL = TimingProtocol(detect=False)  # the window starts at the warm-up: steps exact


def _steps(n: int, seed: int = 0) -> list[float]:
    """``n`` ordinary steps: 0.020 s with 3% multiplicative jitter."""
    rng = np.random.default_rng(seed)
    return list(STEP_S * np.exp(0.03 * rng.standard_normal(n)))


def _h200_window() -> tuple[list[float], float]:
    """31 ordinary steps and one stall of 66.8% of the window (1.87 s)."""
    steps = _steps(31)
    stall = 0.668 / (1 - 0.668) * sum(steps)
    return steps[:10] + [stall] + steps[10:], stall


def _window(steps: list[float], protocol: TimingProtocol = PROTOCOL) -> dict:
    return measurement_window([steps], [SAMPLES] * len(steps), 0, protocol)


def test_the_default_share_is_the_steady_state_equivalence_margin():
    assert DEFAULTS["max_stall_share"] == 0.05 == DEFAULTS["steady_state"]["equivalence"]
    assert TimingProtocol().max_stall_share == 0.05
    assert TimingProtocol.from_spec({"timing": {"max_stall_share": 0.1}}).max_stall_share == 0.1


def test_one_stall_of_two_thirds_of_the_window_asks_for_more_steps():
    steps, stall = _h200_window()
    window = _window(steps)
    timed = window["timed"]
    assert timed["seconds"] == pytest.approx(1.87, abs=0.03)
    assert timed["stalls"]["count"] == 1
    assert timed["stalls"]["share"] == pytest.approx(0.668)
    median = window["step_latency_s"]["p50"]
    wanted = math.ceil((stall / 0.05 * EXTENSION_MARGIN - timed["seconds"]) / median)
    steps_asked, reason = extension_steps_needed(window, None, PROTOCOL)  # no budget
    assert steps_asked == wanted  # about 1,400 steps: 28 s at 0.020 s
    assert 1300 < steps_asked < 1500
    assert "stall" in reason and "66.8%" in reason and "max_stall_share" in reason
    # bounded by the budget at the window's mean step time (the stall in it): the first
    # region of 30 s asks for 516 steps, the window is measured again after it
    steps_asked, _ = extension_steps_needed(window, None, PROTOCOL, budget_seconds=30.0)
    assert steps_asked == math.floor(30.0 / (timed["seconds"] / timed["steps"])) < wanted


def test_the_extended_window_holds_the_stall_within_the_share_and_excludes_nothing():
    """As the training loop extends: a region of the steps asked, the window measured
    again, until nothing more is asked (at most 5 regions, 30 s of steps)."""
    steps, stall = _h200_window()
    spent, regions = 0.0, 0
    while (
        need := extension_steps_needed(_window(steps), None, PROTOCOL, 30.0 - spent)
    ) is not None:
        assert regions < 5
        region = _steps(need[0], seed=regions + 1)
        steps, spent, regions = steps + region, spent + sum(region), regions + 1
    assert 0 < spent <= 30.0
    longer = _window(steps)
    stalls = longer["timed"]["stalls"]
    assert stalls["count"] == 1 and stalls["seconds"] == pytest.approx(stall)
    assert stalls["share"] <= 0.05 and stalls["excluded"] is False
    timed = longer["timed"]
    assert timed["samples_per_s"] == timed["samples_per_s_all_steps"]
    assert timed["samples_per_s"] == pytest.approx(timed["samples"] / timed["seconds"])


def test_a_window_that_cannot_be_extended_excludes_its_stall_and_reports_it():
    steps, stall = _h200_window()
    window = _window(steps)
    assert extension_steps_needed(window, None, PROTOCOL, budget_seconds=0.0) is None
    timed = window["timed"]
    stalls = timed["stalls"]
    assert stalls["excluded"] is True and stalls["count"] == 1
    assert stalls["seconds"] == pytest.approx(stall) and stalls["over_limit_samples"] == SAMPLES
    assert "Q3 + 3 IQR" in stalls["rule"] and "max_stall_share" in stalls["rule"]
    everything = 32 * SAMPLES / sum(steps)
    assert timed["samples_per_s_all_steps"] == pytest.approx(everything)  # 274/s, as the H200
    assert everything < 300
    assert timed["samples_per_s"] == pytest.approx(31 * SAMPLES / (sum(steps) - stall))
    assert timed["samples_per_s"] == pytest.approx(SAMPLES / STEP_S, rel=0.02)  # ~800/s
    # the run table publishes the excluded throughput and says why
    record = {
        "status": "ok",
        "cell": {"workload": "text", "device": "cuda", "batch_size": SAMPLES, "rep": 0},
        "result": {"kind": "training", "timed": timed, "outliers": window["outliers"]},
    }
    row = run_row(record, "runs/text/cuda/bs16/rep0/metrics.json")
    assert row["samples_per_s"] == pytest.approx(timed["samples_per_s"])
    assert row["samples_per_s_all_steps"] == pytest.approx(everything)
    assert row["stall_steps"] == 1 and row["stalls_excluded"] is True
    assert row["stall_seconds_share"] == pytest.approx(0.668)


def test_stalls_under_the_share_are_reported_and_nothing_is_excluded():
    steps = _steps(200)
    stall = 0.15  # 0.15 s of 4.15 s: 3.6%
    window = _window(steps[:100] + [stall] + steps[100:])
    timed = window["timed"]
    stalls = timed["stalls"]
    assert stalls["count"] == 1 and stalls["share"] == pytest.approx(0.15 / timed["seconds"])
    assert stalls["share"] < 0.05 and stalls["excluded"] is False
    assert timed["samples_per_s"] == timed["samples_per_s_all_steps"]
    assert timed["samples_per_s"] == pytest.approx(201 * SAMPLES / timed["seconds"])
    assert extension_steps_needed(window, None, PROTOCOL, budget_seconds=30.0) is None
    # at the limit exactly is within it
    at_limit = TimingProtocol(detect=False, max_stall_share=stalls["share"])
    assert (
        _window(steps[:100] + [stall] + steps[100:], at_limit)["timed"]["stalls"]["excluded"]
        is False
    )


def test_a_window_too_short_to_classify_has_no_stalls():
    timed = _window([0.02, 0.5, 0.02])["timed"]
    assert timed["stalls"]["count"] == 0 and timed["stalls"]["excluded"] is False
    assert timed["samples_per_s"] == timed["samples_per_s_all_steps"]


# ----------------------------------------------------------------- through the training loop

STALL_S = 0.15


def _stalled_parts(n_batches: int, step_s: float, stall_at: int):
    """Each step sleeps ``step_s``; the ``stall_at``-th loss call sleeps STALL_S."""
    parts, calls = _parts(n_batches), [0]
    loss_fn = parts.loss_fn

    def stalled(model, batch):
        calls[0] += 1
        time.sleep(STALL_S if calls[0] == stall_at else step_s)
        return loss_fn(model, batch)

    parts.loss_fn = stalled
    return parts


class _StallClock:
    """A timing-event clock (ms): each recorded event 20 ms (3% jitter) after the last,
    the ``stall_at``-th 200 ms after it: step times as a GPU's events give them, with no
    sleeping."""

    def __init__(self, stall_at: int):
        self.t, self.recorded, self.stall_at = 0.0, 0, stall_at
        self.rng = np.random.default_rng(0)

    def pop(self, index: int = 0) -> float:
        self.recorded += 1
        jitter = float(np.exp(0.03 * self.rng.standard_normal()))
        self.t += 200.0 if self.recorded == self.stall_at else 1000 * STEP_S * jitter
        return self.t


def test_the_training_loop_extends_a_window_a_stall_sets_until_it_is_within_the_share():
    device = FakeEventDevice([])
    device.clock = _StallClock(stall_at=15)
    spec = _spec(32, epochs=1, warmup=1)
    spec["timing"].update(extend_short_windows=True, min_timed_seconds=0.5)
    result = run_training(_parts(32), _context(spec, device))
    extension, timed = result["extension"], result["timed"]
    # a window of 30 steps of 0.020 s and a stall of 0.2 s (25%): 5% of a window needs
    # 0.2 / 0.05 = 4 s, with the margin 4.8 s: 200 more steps
    assert re.match(r"a stall step of 0.2 s takes 2\d\.\d% of the window", extension["reason"])
    assert "training window" not in extension["reason"]
    wanted = (0.2 / 0.05 * EXTENSION_MARGIN - (30 * STEP_S + 0.2)) / STEP_S
    assert extension["regions"] == 1 and extension["steps"] == pytest.approx(wanted, rel=0.05)
    stalls = timed["stalls"]
    assert stalls["count"] == 1 and stalls["seconds"] == pytest.approx(0.2)
    assert stalls["share"] <= 0.05 and stalls["excluded"] is False
    assert timed["samples_per_s"] == timed["samples_per_s_all_steps"]


def test_time_to_target_counts_the_stall_that_the_throughput_excludes():
    spec = _spec(40, epochs=1, warmup=2)  # extension off: the stall stays excluded
    result = run_training(_stalled_parts(40, 0.002, stall_at=20), _context(spec, FakeDevice()))
    timed = result["timed"]
    assert timed["stalls"]["excluded"] is True and timed["stalls"]["seconds"] >= STALL_S
    stalls = timed["stalls"]
    kept = (timed["samples"] - stalls["over_limit_samples"]) / (
        timed["seconds"] - stalls["over_limit_seconds"]
    )
    assert timed["samples_per_s"] == pytest.approx(kept)
    assert timed["samples_per_s"] > timed["samples_per_s_all_steps"]
    train_seconds = result["quality"]["points"][-1]["train_seconds"]
    steps_after_step0 = sum(result["steps"]["seconds"][0][1:])
    assert train_seconds >= steps_after_step0 - 1e-6  # every step, the stall included
    assert train_seconds > STALL_S + (timed["seconds"] - timed["stalls"]["seconds"])
    record = {"status": "ok", "result": result,
              "cell": {"workload": "tiny", "device": "cpu", "batch_size": 4, "rep": 0}}  # fmt: skip
    rows = quality_rows(record, "runs/tiny/cpu/bs4/rep0/metrics.json")
    runs = pd.DataFrame(
        [run("tiny", "cpu", 4, 0, record=rows[0]["record"], primary_metric="mse",
             higher_is_better=False, samples_per_s=timed["samples_per_s"])]
    )  # fmt: skip
    target = {"tiny": {"metric": "mse", "value": 1.0}}  # met at the only pass
    table = time_to_target_table(pd.DataFrame(rows), runs, {"tiny": "cpu"}, target, ["tiny"])
    assert table.iloc[0]["median_s"] == pytest.approx(train_seconds)
    assert table.iloc[0]["median_s"] > STALL_S


def test_recurring_slow_steps_are_jitter_not_a_stall():
    """A heavy-tailed series (a CPU text cell: a fifth of its steps 3x the median, past
    the severe fence) has many stalls, none of which alone takes 5% of the window:
    nothing is extended or excluded, and the throughput counts every step."""
    from trainbench.measure.stalls import stall_facts, stall_steps_needed

    seconds = [0.01] * 160 + [0.03] * 40
    stalls = stall_facts(seconds, [32] * 200, severe_fence=0.0101, max_share=0.05)
    assert stalls["count"] == 40 and stalls["share"] > 0.4
    assert stalls["largest_share"] < 0.05 and stalls["excluded"] is False
    assert stall_steps_needed(stalls, sum(seconds), 0.01, 1.2) is None
