"""The measurement protocol: steady state, outliers, minimum windows, warm
evaluation, full epochs and disturbed machines (docs/statistics.md section 1)."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import time

import numpy as np
import psutil
import pytest
import torch
from torch import nn
from trainbench.analysis.aggregate import run_row
from trainbench.measure.context import RunContext
from trainbench.measure.devices import AmpPolicy, CpuDevice
from trainbench.measure.measurement import (
    TimingProtocol,
    epoch_windows,
    eval_window,
    measurement_window,
)
from trainbench.measure.steady import (
    FLAT,
    NO_STEADY_STATE,
    SLOWDOWN,
    WARMUP,
    detect_steady_state,
    tukey_outliers,
)
from trainbench.measure.trackers import HostActivity
from trainbench.measure.trackers.host import own_cpu_seconds
from trainbench.measure.training import TrainingParts, run_training

RNG = np.random.default_rng(7)


def noisy(levels: list[tuple[int, float]], noise: float = 0.03) -> np.ndarray:
    """Step times: ``(count, seconds)`` pieces with multiplicative noise."""
    base = np.concatenate([np.full(count, level) for count, level in levels])
    return base * np.exp(noise * RNG.standard_normal(base.size))


# ----------------------------------------------------------------------------- steady state


def test_a_known_change_point_is_found():
    series = noisy([(60, 0.030), (340, 0.010)])
    steady = detect_steady_state(series, warmup_steps=5, min_steps=20)
    assert steady.classification == WARMUP
    assert abs(steady.start_step - 60) <= 3
    assert steady.segments[-1]["median_s"] == pytest.approx(0.010, rel=0.03)


def test_a_flat_series_starts_at_the_configured_warmup():
    steady = detect_steady_state(noisy([(300, 0.01)]), warmup_steps=5, min_steps=20)
    assert steady.classification == FLAT
    assert steady.start_step == 5


def test_single_slow_steps_are_not_change_points():
    series = noisy([(100, 0.01)])
    series[[7, 21, 22, 50, 77, 93]] *= 5
    steady = detect_steady_state(series, warmup_steps=5, min_steps=20)
    assert steady.classification == FLAT
    assert steady.start_step == 5


def test_a_slowdown_is_measured_from_where_it_starts_and_flagged():
    steady = detect_steady_state(noisy([(250, 0.010), (350, 0.013)]), 5, 20)
    assert steady.classification == SLOWDOWN
    assert abs(steady.start_step - 250) <= 3


def test_a_run_whose_last_segment_is_short_has_no_steady_state():
    steady = detect_steady_state(noisy([(350, 0.010), (50, 0.013)]), 5, 60)
    assert steady.classification == NO_STEADY_STATE
    assert steady.start_step == 5  # measured from the warm-up, and flagged


@pytest.mark.parametrize("n", [0, 1, 7, 8, 12, 19, 20, 21, 39, 40, 41, 64])
def test_any_length_of_series_is_classified(n):
    """Short runs (a few steps per epoch) never make the change-point search fail."""
    steady = detect_steady_state(noisy([(n, 0.01)]), warmup_steps=1, min_steps=20)
    assert 0 <= steady.start_step <= max(n, 1)


def test_tukey_outliers_are_counted_with_their_share_of_time():
    series = np.full(100, 0.01)
    series[:4] = 0.1  # four severe outliers: 0.4 s of 1.36 s
    out = tukey_outliers(series)
    assert out["high_severe"] == 4 and out["high_mild"] == 0
    assert out["high_seconds_share"] == pytest.approx(0.4 / 1.36)


# ----------------------------------------------------------------------------- windows


def test_a_short_window_is_marked_with_its_reason():
    protocol = TimingProtocol(min_timed_seconds=1.0, min_timed_steps=20)
    window = measurement_window([[0.01] * 30], [32] * 30, 5, protocol)
    timed = window["timed"]
    assert timed["steps"] == 25 and timed["short_window"] is True
    assert "0.25 s < 1 s" in timed["short_window_reason"]
    long = measurement_window([[0.1] * 30], [32] * 30, 5, protocol)["timed"]
    assert long["short_window"] is False and long["short_window_reason"] is None


def test_epoch_time_comes_from_full_epochs_only():
    parts = epoch_windows([[0.5] * 10, [0.1] * 10, [0.1] * 10], [4] * 30, start=5)
    assert [p["full_epoch"] for p in parts] == [False, True, True]
    assert parts[0]["timed_steps"] == 5
    record = _record_with_epochs(parts)
    row = run_row(record, "x/metrics.json")
    assert row["epoch_seconds_median"] == pytest.approx(1.0)  # epochs 2 and 3, not epoch 1's 2.5
    assert row["full_epochs"] == 2


def _record_with_epochs(epochs: list[dict]) -> dict:
    return {
        "status": "ok",
        "cell": {"workload": "w", "device": "cpu", "batch_size": 4, "rep": 0},
        "result": {"kind": "training", "epochs": epochs},
    }


def test_evaluation_throughput_excludes_the_cold_pass():
    passes = [
        {"epoch": 1, "seconds": 1.0, "samples": 100, "cold": True},
        {"epoch": 2, "seconds": 0.1, "samples": 100, "cold": False},
        {"epoch": None, "seconds": 0.1, "samples": 100, "cold": False},
    ]
    window = eval_window(passes, TimingProtocol(min_timed_seconds=0.15))
    assert window["samples_per_s"] == pytest.approx(1000.0)
    assert window["cold_seconds"] == 1.0
    assert window["short_window"] is False
    only_cold = eval_window(passes[:1], TimingProtocol())
    assert only_cold["samples_per_s"] is None and only_cold["short_window"] is True


# ----------------------------------------------------------------------------- in the loop


def _spec(epochs: int, min_seconds: float, max_passes: int = 50) -> dict:
    return {
        "cell": {"workload": "tiny", "device": "cpu", "batch_size": 4, "rep": 0},
        "workload_settings": {"epochs": epochs, "warmup_steps": 2, "max_steps_per_epoch": 6},
        "launcher": {"progress": "never"},
        "run_seed": 0,
        # One pass per epoch: the calibration after training is what these count.
        # Stalls in the training window (timing.max_stall_share) are not judged here:
        # sub-millisecond steps would extend it to its budget (test_stall_rule.py).
        "timing": {"min_timed_seconds": min_seconds, "max_eval_passes": max_passes,
                   "eval_every": {"epochs": 1}, "max_stall_share": 1.0},
    }  # fmt: skip


def _parts(eval_seconds: list[float]) -> TrainingParts:
    """A linear model whose evaluation sleeps: the cold pass takes longer."""
    model = nn.Linear(3, 1)
    batches = [{"x": torch.randn(4, 3), "y": torch.randn(4, 1)} for _ in range(6)]
    calls = iter(eval_seconds)

    def evaluate(model, loader, ctx):
        time.sleep(next(calls, eval_seconds[-1]))
        return {"metrics": {"mse": 1.0}, "samples": 10}

    return TrainingParts(
        model=model,
        optimizer=torch.optim.SGD(model.parameters(), lr=0.01),
        train_loader=batches,
        eval_loader=batches,
        loss_fn=lambda m, b: (nn.functional.mse_loss(m(b["x"]), b["y"]), {}),
        evaluate=evaluate,
        primary_metric="mse",
        higher_is_better=False,
    )


def _context(spec: dict) -> RunContext:
    return RunContext(
        spec=spec,
        device=CpuDevice(),
        torch_device=torch.device("cpu"),
        amp=AmpPolicy(False, None, False, "off"),
        settings_in_force={},
    )


def test_the_loop_reports_the_cold_pass_apart_and_calibrates_warm_passes():
    result = run_training(_parts([0.3, 0.02]), _context(_spec(epochs=2, min_seconds=0.1)))
    evaluation = result["eval"]
    assert evaluation["passes"][0]["cold"] is True
    assert evaluation["cold_seconds"] >= 0.3
    # one warm per-epoch pass (0.02 s) was not enough: the calibration passes counted
    # from it (the 0.1 s window with a 20% margin, at its time) followed, in one round
    # (a sleep never ends early, so they fill the window)
    warm = [p["seconds"] for p in evaluation["passes"] if not p["cold"]]
    assert evaluation["warm"]["passes"] == len(warm) >= 2
    calibration = evaluation["calibration"]
    assert calibration["passes"] == math.ceil((0.1 * 1.2 - warm[0]) / warm[0]) == len(warm) - 1
    assert calibration["rounds"] == 1 and calibration["out_of_reach"] is None
    assert 0.1 <= sum(warm) == pytest.approx(evaluation["warm"]["seconds"])
    assert evaluation["samples_per_s"] > 10 / 0.1  # not dragged down by the 0.3 s cold pass
    assert [e["eval_cold"] for e in result["epochs"]] == [True, False]


def test_a_one_epoch_run_still_gets_warm_evaluation_passes():
    result = run_training(_parts([0.05, 0.01]), _context(_spec(epochs=1, min_seconds=0.02)))
    assert result["eval"]["warm"]["passes"] >= 1
    assert result["eval"]["short_window"] is False


def test_evaluation_that_cannot_reach_the_minimum_is_not_measured():
    spec = _spec(epochs=1, min_seconds=5.0, max_passes=3)
    spec["timing"]["extend_short_windows"] = False  # the training window is not judged here
    result = run_training(_parts([0.01]), _context(spec))
    # The curve's (cold) pass, one warm pass to count from; 3 more cannot reach 5 s of
    # 0.01 s passes, so none is timed.
    evaluation = result["eval"]
    assert len(evaluation["passes"]) == 1 + 1
    assert evaluation["short_window"] is True and evaluation["measured"] is False
    assert evaluation["samples_per_s"] is None
    assert "not measured" in evaluation["short_window_reason"]
    assert "timing.max_eval_passes allows 2 more" in evaluation["short_window_reason"]


# ----------------------------------------------------------------------------- disturbed


@pytest.fixture
def cpu_hog():
    """A busy loop that is not a descendant of this process (started through a shell
    that exits at once), as another user's program would be; ended after the test."""
    out = subprocess.run(
        ["sh", "-c", f"'{sys.executable}' -c 'while True: pass' >/dev/null 2>&1 & echo $!"],
        capture_output=True,
        text=True,
        check=True,
    )
    pid = int(out.stdout.strip())
    time.sleep(0.2)
    yield pid
    os.kill(pid, signal.SIGKILL)


def _busy(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def test_host_activity_sees_another_process_burning_a_core(cpu_hog):
    """Unpinned (every CPU is the cell's), a busy loop anywhere takes its cores' time."""
    host = HostActivity(0.1)
    host.start("train")
    _busy(2.0)
    host.stop("train", 2.0)
    summary = host.summary()
    assert summary["other_cpu_cores"] >= 0.5
    assert summary["disturbed"] is True
    assert "others used" in summary["disturbed_reason"]
    assert any(p["pid"] == cpu_hog for p in summary["busiest_others"])


def test_host_activity_counts_this_process_and_its_children_as_its_own():
    """The cell's own CPU time (this process, DataLoader workers and other children)
    is subtracted; checked on the own-time reading, which other load cannot move.
    Each side burns a fixed amount of its own CPU time, however busy the machine is."""
    burn = "import time\nwhile time.process_time() < 0.8: pass"
    process = psutil.Process()
    before = own_cpu_seconds(process)
    child = subprocess.Popen([sys.executable, "-c", burn])
    start = time.process_time()
    while time.process_time() - start < 0.8:
        pass
    child.wait()
    assert own_cpu_seconds(process) - before >= 1.5  # 0.8 s here + 0.8 s in the child


def test_a_child_ended_in_the_window_is_own_where_psutil_reads_no_children(monkeypatch):
    """On macOS psutil's ``children_user``/``children_system`` are always 0 (psutil's
    docs), so a child that burns CPU and is waited for inside the window must be read
    elsewhere (getrusage) or it would count as other load. psutil patched as on macOS."""
    real_cpu_times = psutil.Process.cpu_times

    def as_on_macos(self):
        return real_cpu_times(self)._replace(children_user=0.0, children_system=0.0)

    monkeypatch.setattr(psutil.Process, "cpu_times", as_on_macos)
    process = psutil.Process()
    before = own_cpu_seconds(process)
    burn = "import time\nwhile time.process_time() < 0.3: pass"
    subprocess.run([sys.executable, "-c", burn], check=True)
    assert process.cpu_times().children_user == 0.0
    assert own_cpu_seconds(process) - before >= 0.3


def test_a_schedule_that_changes_the_work_holds_the_window_to_its_last_phase():
    from trainbench.measure.measurement import window_phase

    assert window_phase(None, 10) is None
    assert window_phase(["in-batch", "in-batch"], 10) is None  # the same work throughout
    phase = window_phase(["in-batch", "mined", "mined"], 10)
    assert (phase["phase"], phase["first_epoch"], phase["last_epoch"]) == ("mined", 2, 3)
    assert phase["first_step"] == 10
    assert window_phase(["mined", "in-batch", "mined"], 10)["first_step"] == 20


def test_a_device_that_settles_early_still_times_only_the_last_phase():
    """Epoch 1 fast, epochs 2-3 four times slower by design (as two_tower's mining): a
    device flat from step 5 and one flat from step 40 both time the last phase alone."""
    from trainbench.measure.measurement import TimingProtocol, measurement_window

    protocol = TimingProtocol()
    epochs = [[0.001] * 40, [0.004] * 40, [0.004] * 40]
    window = measurement_window(epochs, [8] * 120, 40, protocol)
    assert window["start_step"] >= 40
    assert window["timed"]["samples_per_s"] == pytest.approx(8 / 0.004, rel=1e-6)
