"""Where a step's time goes (trainbench.measure.step_breakdown, trainbench.analysis.stats.breakdown):
synthetic steps whose cause is known get the right label. On the CPU: a host sleep per
step (the cores idle while the step runs: launch-bound), a sleeping loader (input-bound),
heavy matmuls (device-bound); the same on CUDA where a GPU is present."""

from __future__ import annotations

import time

import pandas as pd
import pytest
import torch
from trainbench.analysis.stats.breakdown import BoundRule, step_breakdown_table
from trainbench.measure import step_breakdown

SETTINGS = {"min_seconds": 0.3, "max_steps": 40, "max_share": 0.04, "min_steps": 10}


class FakeDevice:
    def __init__(self, device: torch.device):
        self.device = device

    def synchronize(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize()


def synthetic_steps(device: str, host_sleep: float = 0.0, loader_sleep: float = 0.0,
                    matmul: int = 0) -> step_breakdown.DiagnosticSteps:  # fmt: skip
    """A training step and its batches, as the loop hands them to the diagnostic pass."""
    dev = torch.device(device)
    weights = torch.randn(matmul, matmul, device=dev) if matmul else None

    def batches():
        while True:
            if loader_sleep:
                time.sleep(loader_sleep)
            yield {"x": torch.ones(1, device=dev)}

    def train_step(batch, step_in_epoch):
        if host_sleep:
            time.sleep(host_sleep)
        if weights is not None:
            out = weights
            for _ in range(4):
                out = out @ weights
        return batch["x"], {}

    return step_breakdown.DiagnosticSteps(
        train_step, batches(), FakeDevice(dev).synchronize, dev.type, steps_per_epoch=10
    )


def measure(device: str, settings: dict = SETTINGS, loop_seconds: float = 1000.0, **kwargs):
    """The diagnostic pass of a loop that started ``loop_seconds`` ago."""
    started_at = time.perf_counter() - loop_seconds
    return step_breakdown.measure(synthetic_steps(device, **kwargs), settings, started_at)


def label(device: str, **kwargs) -> tuple[str, dict]:
    measured = measure(device, **kwargs)
    steady = measured["data_wait_s"] + measured["step_s"]  # the timed step holds both
    runs = pd.DataFrame([{
        "workload": "synthetic", "device": device, "batch_size": 1, "rep": 0, "status": "ok",
        "backend": device, "step_p50_s": steady, **{f"bd_{k}": measured[v] for k, v in (
            ("steps", "steps"), ("seconds", "seconds"), ("data_wait_s", "data_wait_s"),
            ("host_issue_s", "host_issue_s"), ("step_s", "step_s"), ("device_s", "device_s"),
            ("kernel_s", "kernel_s"), ("cpu_s", "cpu_s"), ("threads", "torch_threads"))},
    }])  # fmt: skip
    table = step_breakdown_table(runs, BoundRule())
    assert len(table) == 1
    return str(table["bound"].iloc[0]), measured


def test_the_pass_lasts_its_minimum_and_records_its_method():
    measured = measure("cpu", host_sleep=0.01)
    assert measured["seconds"] >= SETTINGS["min_seconds"]
    assert 1 <= measured["steps"] <= SETTINGS["max_steps"]
    assert measured["device_s"] is None and measured["kernel_s"] is None  # the CPU
    assert "cannot" not in measured["method"] and "process's CPU time" in measured["method"]


def test_a_short_cell_gets_a_shorter_pass_but_never_fewer_than_min_steps():
    """At most max_share of the loop's time before the pass (the cost stays under 5% of
    a short cell), at least min_steps steps."""
    settings = {**SETTINGS, "max_share": 0.04, "min_steps": 10, "max_steps": 1000}
    short = measure("cpu", settings, loop_seconds=5.0, host_sleep=0.002)
    assert short["shortened"] and short["min_seconds_in_force"] == pytest.approx(0.2, rel=0.05)
    assert short["seconds"] < 0.3 and short["steps"] >= 10
    tiny = measure("cpu", settings, loop_seconds=0.1, host_sleep=0.002)
    assert tiny["steps"] == 10  # min_steps, though the budget is 4 ms
    long = measure("cpu", settings, host_sleep=0.002)
    assert not long["shortened"] and long["seconds"] >= settings["min_seconds"]


def test_cpu_host_sleep_is_launch_bound():
    bound, measured = label("cpu", host_sleep=0.02)
    assert bound == "launch-bound", measured


def test_cpu_loader_sleep_is_input_bound():
    bound, measured = label("cpu", loader_sleep=0.02)
    assert bound == "input-bound", measured


def test_cpu_heavy_matmuls_are_device_bound():
    # one thread, kept busy: on a 16-core host the threads of a 384 x 384 matmul idle
    # (measured on the H100 host: launch-bound at 16 threads), which the rule reads right
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        bound, measured = label("cpu", matmul=384)
    finally:
        torch.set_num_threads(threads)
    assert bound == "device-bound", measured


def test_labels_follow_the_configured_thresholds():
    rule = BoundRule.from_config({"input_share": 0.9, "device_busy": 0.2})
    assert rule.label("cuda", data=0.5, issue=0.1, busy=0.3) == "device-bound"
    assert rule.label("cuda", data=0.95, issue=0.1, busy=0.3) == "input-bound"
    assert BoundRule().label("cuda", data=0.0, issue=0.8, busy=0.2) == "launch-bound"
    assert BoundRule().label("cuda", data=0.0, issue=0.3, busy=0.5) == "mixed"
    assert BoundRule().label("cuda", data=float("nan"), issue=float("nan"), busy=float("nan")) == (
        "insufficient data"
    )


needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


@needs_cuda
def test_cuda_host_sleep_is_launch_bound_and_big_matmuls_device_bound():
    bound, measured = label("cuda", host_sleep=0.01)
    assert bound == "launch-bound", measured
    bound, measured = label("cuda", matmul=4096)
    assert bound == "device-bound", measured
    assert measured["kernel_s"] and measured["kernel_s"] > 0, measured["kernel_method"]


def test_cuda_busy_is_kernel_time_not_the_events_span():
    """A host that sleeps between kernels: the events' span covers the sleep, the
    kernels do not; the label follows the kernels (launch-bound), the span is kept."""
    runs = pd.DataFrame([{
        "workload": "w", "device": "cuda", "batch_size": 8, "rep": 0, "status": "ok",
        "backend": "cuda", "step_p50_s": 0.010, "bd_steps": 50, "bd_seconds": 0.5,
        "bd_data_wait_s": 0.0002, "bd_host_issue_s": 0.0095, "bd_step_s": 0.0098,
        "bd_device_s": 0.0097, "bd_kernel_s": 0.0012, "bd_cpu_s": 0.0095, "bd_threads": 4,
    }])  # fmt: skip
    row = step_breakdown_table(runs).iloc[0]
    assert row["bound"] == "launch-bound"
    assert row["device_busy"] == pytest.approx(0.12) and row["device_span"] == pytest.approx(0.97)
    assert "events' span 97%" in row["reason"]
    without_profiler = step_breakdown_table(runs.assign(bd_kernel_s=None)).iloc[0]
    assert without_profiler["device_busy"] == pytest.approx(0.03)  # step - issue: a lower bound
