"""A window below the minimum is extended by more timed steps after the last epoch
(timing.extend_short_windows), the task's numbers still come from the configured
epochs, and a protocol without extension publishes the short window as it is."""

from __future__ import annotations

import time

import pytest
from test_tracking import FakeDevice, _context, _parts, _spec
from trainbench.measure import training
from trainbench.measure.measurement import (
    UNSTEADY_RETRIES,
    TimingProtocol,
    extension_steps_needed,
    measurement_window,
)
from trainbench.measure.training import run_training


def _timing(**timing) -> dict:
    spec = _spec(6, epochs=2, warmup=1)
    # stalls (timing.max_stall_share) extend a window too: tested in test_stall_rule.py
    spec["timing"] = {"steady_state": {"detect": False}, "max_eval_passes": 3,
                      "max_stall_share": 1.0, **timing}  # fmt: skip
    return spec


def _slow_parts(step_seconds: float):
    parts = _parts(6)
    loss_fn = parts.loss_fn

    def slow(model, batch):
        time.sleep(step_seconds)
        return loss_fn(model, batch)

    parts.loss_fn = slow
    return parts


def test_a_short_window_is_extended_to_the_minimum_with_a_margin():
    spec = _timing(min_timed_seconds=0.3, min_timed_steps=20, extend_short_windows=True)
    result = run_training(_slow_parts(0.005), _context(spec, FakeDevice()))
    extension, timed = result["extension"], result["timed"]
    assert extension["steps"] > 0 and extension["regions"] >= 1
    assert "training window" in extension["reason"]
    assert not timed["short_window"]
    assert timed["seconds"] >= 0.3 and timed["steps"] >= 20
    # the configured epochs are untouched: two epochs of six steps, their losses kept
    assert [len(s) for s in result["steps"]["seconds"]] == [6, 6]
    assert [len(s) for s in result["steps"]["losses"]] == [6, 6]
    assert len(result["epochs"]) == 2
    assert result["task"]["final_loss"] == result["epochs"][-1]["train_loss"]
    assert sum(len(r) for r in result["steps"]["extension_seconds"]) == extension["steps"]


def test_without_extension_the_short_window_is_published_as_it_is():
    spec = _timing(min_timed_seconds=0.3, extend_short_windows=False)
    result = run_training(_slow_parts(0.001), _context(spec, FakeDevice()))
    assert result["extension"]["steps"] == 0
    assert result["timed"]["short_window"]


def test_the_extension_stops_at_its_budget():
    spec = _timing(min_timed_seconds=30.0, extend_short_windows=True, max_extension_seconds=0.2)
    started = time.perf_counter()
    result = run_training(_slow_parts(0.01), _context(spec, FakeDevice()))
    assert time.perf_counter() - started < 20
    assert 0 < result["extension"]["seconds"] < 5
    assert result["timed"]["short_window"]  # honest: still short, and marked


def _window(step_s: float, steps: int, min_seconds=1.0, min_steps=20) -> dict:
    protocol = TimingProtocol(
        min_timed_seconds=min_seconds, min_timed_steps=min_steps, detect=False
    )
    return measurement_window([[step_s] * steps], [8] * steps, 0, protocol), protocol


def test_the_steps_needed_reach_the_minimum_with_a_20_percent_margin():
    window, protocol = _window(0.01, 30)  # 0.3 s
    steps, reason = extension_steps_needed(window, None, protocol)
    assert steps == pytest.approx((1.2 - 0.3) / 0.01, abs=1)
    assert "0.3 s < 1 s" in reason
    window, protocol = _window(0.1, 5)  # 0.5 s, 5 steps: the step count decides
    steps, _ = extension_steps_needed(window, None, protocol)
    assert steps == max(round((1.2 - 0.5) / 0.1), 24 - 5)


def test_a_short_energy_window_also_asks_for_steps():
    window, protocol = _window(0.01, 200)  # 2 s of steps: the training window passes
    assert extension_steps_needed(window, None, protocol) is None
    steps, reason = extension_steps_needed(window, 0.5, protocol)
    assert steps == pytest.approx((1.2 - 0.5) / 0.01, abs=1) and "energy window" in reason


def test_a_run_without_a_steady_state_settles_in_the_extension():
    """Slow steps into the last sixth of the run (a warm-up that ended late): no steady
    state at the end of the epochs; one extension region later the run has one (a
    second where a loaded machine's scheduling noise left the first unsettled)."""
    parts, calls = _parts(40), [0]
    loss_fn = parts.loss_fn

    def late_warmup(model, batch):
        calls[0] += 1
        # sleeps well above the scheduling noise of a busy machine (make test's workers)
        time.sleep(0.03 if calls[0] <= 68 else 0.01)
        return loss_fn(model, batch)

    parts.loss_fn = late_warmup
    spec = _spec(40, epochs=2, warmup=1)
    spec["timing"] = {"max_eval_passes": 3, "min_timed_seconds": 0.05, "min_timed_steps": 10,
                      "step_breakdown": {"enabled": False}, "max_stall_share": 1.0}  # fmt: skip
    result = run_training(parts, _context(spec, FakeDevice()))
    assert "no steady state in 80 steps" in result["extension"]["reason"]
    assert 1 <= result["extension"]["regions"] <= 2 and result["extension"]["steps"] >= 40
    assert result["steady_state"]["classification"] == "warmup"
    # The window starts at the end of the slow steps (step 68), or a little later where
    # the scheduling noise of a loaded machine (make test's workers) made a burst of
    # slow steps right after it (88 seen once): never inside the slow steps, and never
    # so late that the window holds less than the steady minimum (25% of 120 steps).
    assert 63 <= result["steady_state"]["start_step"] <= 90


def test_a_run_that_never_settles_gets_every_retry_and_no_more(monkeypatch):
    """A window that stays without a steady state (the detector patched to say so after
    every region: a real drift, a slowing host) gets UNSTEADY_RETRIES regions of half its
    steps so far, each named in the reason, and no more."""
    real = training.measured_window

    def never_steady(settings, state):
        window = real(settings, state)
        return {**window, "steady_state": {**window["steady_state"],
                                           "classification": "no steady state"}}  # fmt: skip

    monkeypatch.setattr(training, "measured_window", never_steady)
    spec = _spec(6, epochs=2, warmup=1)
    spec["timing"] = {"max_eval_passes": 3, "min_timed_seconds": 0.01, "min_timed_steps": 10,
                      "step_breakdown": {"enabled": False}, "max_stall_share": 1.0}  # fmt: skip
    result = run_training(_slow_parts(0.001), _context(spec, FakeDevice()))
    extension = result["extension"]
    assert extension["regions"] == UNSTEADY_RETRIES == 3
    # 12 steps (two epochs of 6), then half the steps so far, at least min_timed_steps:
    # +10 (22), +11 (33), +16 (49)
    for total in (12, 22, 33):
        assert f"no steady state in {total} steps" in extension["reason"]
    assert extension["steps"] == 10 + 11 + 16
