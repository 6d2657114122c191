"""Where one training step's time goes: a short diagnostic pass after the timed window.

The timed window says how fast a device trains; this pass says why. It runs after the
last timed region (epochs, evaluation, extension), never inside one, and changes none of
the timed numbers: more training steps of the final model on the training loader (no
evaluation, no learning-rate step), each started from an idle device:

1. synchronize the device, read the clocks (wall, and the process's CPU time);
2. fetch the batch (``data_wait``: the loader, plus enqueueing its copy to the device);
3. call the training step without synchronizing (``host_issue``: the host's time to
   enqueue one step's work from an idle device; in a steady run the host fills the
   launch queue and then waits on the device, so issue time read there says nothing);
4. synchronize (``step``: from the batch in hand to the step's work done).

The device's time of the step: on CUDA, the same steps run once more under
``torch.profiler`` and the kernels' device time per step is recorded (``kernel``: busy
time, the gaps while the host is still issuing excluded); the CUDA events around each
step's enqueue give its span (``device``: not busy time, since a device waiting for a
slow host between kernels is inside it). On MPS only synchronized edges exist: the
device's work after the host finished issuing, ``step`` − ``host_issue``, is a lower
bound of its busy time. On the CPU the device is the host, so what the step kept the
cores busy with is read from the process's CPU time (``cpu``: seconds of all threads;
``cpu`` ÷ (``step`` × threads) is the share of the cores the step used).

The record keeps the medians and the method; the shares of the timed window's steady
step, the label (launch-bound, input-bound, device-bound, mixed) and its reason are
computed from the records by the statistics layer (:mod:`trainbench.analysis.stats.breakdown`).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

PROFILED_STEPS = 10  # CUDA: steps under torch.profiler for the kernel-time cross-check
# timing.step_breakdown's defaults (the schema's, for a spec made without them).
DEFAULTS = {"min_seconds": 0.5, "max_steps": 200, "max_share": 0.04, "min_steps": 10}


@dataclass(frozen=True)
class DiagnosticSteps:
    """What the diagnostic pass runs: the training loop's own step
    (``step(batch, step_in_epoch)``, never synchronizing) over ``batches`` (the training
    loader pass after pass, on the device), on a device that ``synchronize`` waits for."""

    step: Callable[[dict, int], Any]
    batches: Iterator[dict]
    synchronize: Callable[[], None]
    backend: str  # the device's type: cuda, mps or cpu
    steps_per_epoch: int


def _median(values: list[float]) -> float | None:
    return float(statistics.median(values)) if values else None


class _Events:
    """CUDA events around each step's enqueue; nothing elsewhere."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self.pairs: list[tuple] = []

    def start(self):
        if not self.enabled:
            return None
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def stop(self, start) -> None:
        if start is not None:
            end = torch.cuda.Event(enable_timing=True)
            end.record()
            self.pairs.append((start, end))

    def seconds(self) -> list[float]:
        return [start.elapsed_time(end) / 1000.0 for start, end in self.pairs]


def _diagnostic_steps(steps: DiagnosticSteps, count: int | None, min_seconds: float,
                      max_steps: int, events: _Events, min_steps: int = 1) -> list[dict]:  # fmt: skip
    """Steps from an idle device until ``count`` steps (or ``min_seconds`` of them and
    at least ``min_steps``)."""
    sync, clock, cpu_clock = steps.synchronize, time.perf_counter, time.process_time
    batches = steps.batches
    rows: list[dict] = []
    started = clock()
    while len(rows) < max_steps:
        if count is not None and len(rows) >= count:
            break
        if count is None and len(rows) >= min_steps and clock() - started >= min_seconds:
            break
        sync()
        t0 = clock()
        batch = next(batches)
        t1, cpu1 = clock(), cpu_clock()
        start = events.start()
        steps.step(batch, len(rows) % steps.steps_per_epoch)
        t2 = clock()
        events.stop(start)
        sync()
        t3, cpu3 = clock(), cpu_clock()
        rows.append({"data_wait": t1 - t0, "host_issue": t2 - t1, "step": t3 - t1,
                     "cpu": cpu3 - cpu1})  # fmt: skip
    return rows


def _kernel_seconds_per_step(steps: DiagnosticSteps, count: int) -> tuple[float | None, str]:
    """CUDA kernels' device time per step over ``count`` steps under torch.profiler."""
    try:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            _diagnostic_steps(steps, count, 0.0, count, _Events(False))
        total_us = 0.0
        for event in prof.key_averages():
            value = getattr(event, "self_device_time_total", None)
            if value is None:
                value = getattr(event, "self_cuda_time_total", 0.0)
            total_us += float(value or 0.0)
        return (
            total_us / 1e6 / count,
            "torch.profiler (CUDA activity): self device time of every kernel, summed, per step",
        )
    except Exception as exc:  # the cross-check only: never the cell's failure
        return None, f"torch.profiler failed: {type(exc).__name__}: {exc}"[:300]


def settings_in_force(spec: dict) -> dict | None:
    """The cell's ``timing.step_breakdown`` with its defaults; None where it is off."""
    settings = (spec.get("timing") or {}).get("step_breakdown") or {}
    if not settings.get("enabled", True):
        return None
    return {**DEFAULTS, **settings}


def run(steps: DiagnosticSteps, settings: dict, started_at: float) -> dict:
    """:func:`measure`; an error is recorded (``error``), never the cell's."""
    try:
        return measure(steps, settings, started_at)
    except Exception as exc:  # the timed measurement is complete; say what failed
        return {"error": f"{type(exc).__name__}: {exc}"[:500]}


def measure(steps: DiagnosticSteps, settings: dict, started_at: float) -> dict:
    """The diagnostic pass of ``steps`` (settings: ``timing.step_breakdown``; the
    training loop started at ``started_at``, a ``time.perf_counter`` reading). The
    caller stops learning-rate steps and puts the model in training mode first."""
    t_start = time.perf_counter()
    backend = steps.backend
    events = _Events(backend == "cuda")
    # At most max_share of the loop's time so far (a short cell gets a shorter pass),
    # never fewer than min_steps steps nor more than min_seconds.
    budget = float(settings["max_share"]) * (t_start - started_at)
    seconds = min(float(settings["min_seconds"]), budget)
    rows = _diagnostic_steps(steps, None, seconds, int(settings["max_steps"]), events,
                             min(int(settings["min_steps"]), int(settings["max_steps"])))  # fmt: skip
    device = events.seconds() if backend == "cuda" else []
    kernel, kernel_method = (None, None)
    if backend == "cuda":
        kernel, kernel_method = _kernel_seconds_per_step(steps, PROFILED_STEPS)
    threads = torch.get_num_threads()
    median = {
        key: _median([row[key] for row in rows])
        for key in ("data_wait", "host_issue", "step", "cpu")
    }
    result = {
        "steps": len(rows),
        "seconds": time.perf_counter() - t_start,
        "min_seconds_in_force": seconds,
        "shortened": seconds < float(settings["min_seconds"]),
        "backend": backend,
        "data_wait_s": median["data_wait"],
        "host_issue_s": median["host_issue"],
        "step_s": median["step"],
        "cpu_s": median["cpu"],
        "torch_threads": threads,
        "device_s": _median(device) if device else None,
        "kernel_s": kernel,
        "kernel_method": kernel_method,
        "method": METHODS[backend if backend in METHODS else "cpu"],
    }
    if backend == "mps":
        result["device_s"] = median["step"]  # the synchronized edge: an upper bound
    return result


METHODS = {
    "cuda": "after the timed window, steps from an idle device (synchronized before each): "
    "data_wait = fetching the batch; host_issue = the training step's call, not "
    "synchronized; device = CUDA events around that call (its span on the stream, idle gaps "
    "included: not busy time); "
    "step = the batch in hand to the step's work done (synchronized); medians over the "
    "steps; kernel = torch.profiler's kernel time per step over 10 more steps (the device's "
    "busy time)",
    "mps": "after the timed window, steps from an idle device (torch.mps.synchronize "
    "before each): data_wait = fetching the batch; host_issue = the training step's call, "
    "not synchronized; step = the batch in hand to the step's work done (synchronized); "
    "device = step (the synchronized edge, the host's issue included; MPS has no "
    "device-side step timer here: step - host_issue bounds the device's busy time from "
    "below); medians over the steps",
    "cpu": "after the timed window, steps one after another: data_wait = fetching the "
    "batch; step = the training step (the CPU computes as it is called: the host's issue "
    "and the device's work are one); cpu = the process's CPU time over the step, all "
    "threads (cpu / (step x torch_threads) = the share of the cores kept busy); medians "
    "over the steps",
}
