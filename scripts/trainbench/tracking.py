"""Trackers: honest step timing, latency summaries, placement checks, warning capture.

Timing rules (docs/measurement-reference.md section 1): accelerators queue work
and return at once, so a region's wall time is only read after a device sync at
both edges, and no step inside the region syncs (no per-step ``.item()``).
Per-step latencies come from device events recorded between steps and read
after the closing sync; on the CPU, which runs synchronously, from the clock.
"""

from __future__ import annotations

import re
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .devices import Device


def latency_summary(seconds: list[float] | np.ndarray) -> dict:
    """n, mean, percentiles and coefficient of variation of per-step times (seconds)."""
    values = np.asarray(seconds, dtype=float)
    if values.size == 0:
        return {
            "n": 0,
            "mean": None,
            "p50": None,
            "p90": None,
            "p99": None,
            "cv": None,
            "min": None,
            "max": None,
        }
    mean = float(values.mean())
    return {
        "n": int(values.size),
        "mean": mean,
        "p50": float(np.percentile(values, 50)),
        "p90": float(np.percentile(values, 90)),
        "p99": float(np.percentile(values, 99)),
        "cv": float(values.std(ddof=1) / mean) if values.size > 1 and mean > 0 else 0.0,
        "min": float(values.min()),
        "max": float(values.max()),
    }


@dataclass
class RegionTiming:
    wall_seconds: float
    step_seconds: list[float] = field(default_factory=list)


class StepTimer:
    """Times one region of steps: sync at its edges only, events in between."""

    def __init__(self, device: Device):
        self.device = device
        self._events: list[Any] = []
        self._clock: list[float] = []
        self._t0 = 0.0
        self._spare: list[Any] = []
        self.uses_events = device.make_event() is not None
        self.method = (
            f"{device.backend} timing events between steps; device synchronized at region edges"
            if self.uses_events
            else "time.perf_counter between steps (synchronous device); region edges synchronized"
        )

    def start(self, expected_steps: int = 0) -> None:
        """Open the region; events for ``expected_steps`` steps are made before the
        clock starts, so marking a step only records one."""
        spare = (
            [self.device.make_event() for _ in range(expected_steps)] if self.uses_events else []
        )
        self.device.synchronize()
        self._t0 = time.perf_counter()
        self._events, self._clock, self._spare = [], [self._t0], spare[::-1]
        if self.uses_events:
            event = self.device.make_event()
            event.record()
            self._events.append(event)

    def mark_step(self) -> None:
        """Called after each step's work has been queued; never syncs."""
        if self.uses_events:
            event = self._spare.pop() if self._spare else self.device.make_event()
            event.record()
            self._events.append(event)
        else:
            self._clock.append(time.perf_counter())

    def stop(self) -> RegionTiming:
        self.device.synchronize()
        wall = time.perf_counter() - self._t0
        if self.uses_events:
            steps = [
                a.elapsed_time(b) / 1000.0
                for a, b in zip(self._events, self._events[1:], strict=False)
            ]
        else:
            steps = list(np.diff(self._clock))
        return RegionTiming(wall, [float(s) for s in steps])


# ----------------------------------------------------------------------------- verification


def _device_types(tensors) -> list[str]:
    return sorted({t.device.type for t in tensors})


def verify_placement(model, optimizer, batch_tensors: dict, expected: str) -> dict:
    """Where parameters, buffers, batch tensors and optimizer state live, after step 1."""
    import torch

    state_tensors = [
        v
        for state in optimizer.state.values()
        for v in state.values()
        if isinstance(v, torch.Tensor)
    ]
    # Optimizer "step" counters may live on the CPU by design (capturable=False).
    state_tensors = [t for t in state_tensors if t.dim() > 0]
    facts = {
        "expected": expected,
        "parameters": _device_types(model.parameters()),
        "buffers": _device_types(model.buffers()),
        "optimizer_state": _device_types(state_tensors),
        "batch": {
            name: t.device.type for name, t in batch_tensors.items() if isinstance(t, torch.Tensor)
        },
    }
    checks = {
        "parameters_on_device": facts["parameters"] == [expected],
        "buffers_on_device": all(d == expected for d in facts["buffers"]),
        "optimizer_state_on_device": all(d == expected for d in facts["optimizer_state"]),
        "batch_on_device": all(d == expected for d in facts["batch"].values()),
    }
    facts["checks"] = checks
    facts["all_on_device"] = all(checks.values())
    return facts


FALLBACK_RE = re.compile(
    r"The operator '([^']+)' is not currently supported on the MPS backend and will fall back"
)
AUTOCAST_DISABLED_RE = re.compile(r"autocast.*(not supported|Disabling autocast)", re.IGNORECASE)


@dataclass
class WarningLog:
    fallback_ops: list[str] = field(default_factory=list)
    autocast_disabled: list[str] = field(default_factory=list)
    other: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {
            "cpu_fallback_ops": sorted(set(self.fallback_ops)),
            "autocast_disabled_warnings": self.autocast_disabled[:5],
            "other_warnings": sorted(set(self.other))[:20],
        }


@contextmanager
def capture_warnings() -> Iterator[WarningLog]:
    """Record every warning (MPS CPU-fallback warnings are emitted once per process
    unless warn_always is on) and still show them in the log."""
    import torch

    log = WarningLog()
    previous = torch.is_warn_always_enabled()
    torch.set_warn_always(True)
    original_show = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):
        text = str(message)
        match = FALLBACK_RE.search(text)
        if match:
            log.fallback_ops.append(match.group(1))
        elif AUTOCAST_DISABLED_RE.search(text):
            log.autocast_disabled.append(text)
        else:
            log.other.append(f"{category.__name__}: {text[:200]}")
        original_show(message, category, filename, lineno, file, line)

    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = show
        try:
            yield log
        finally:
            warnings.showwarning = original_show
            torch.set_warn_always(previous)
