"""Timed regions and the tracker interface (optimum-benchmark's composable trackers).

A :class:`TimedRegion` is one synchronized window: the device is synchronized at
both edges and never inside; every tracker is started right after the opening
synchronization and stopped right after the closing one, so they all observe the
same window and their own bookkeeping falls outside the clock.

Timing rules (measurement reference, section 1): CUDA and MPS queue work and
return at once, so a region's wall time is read only after a synchronization,
and no step inside the region synchronizes (no per-step ``.item()``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Protocol

from trainbench.measure.devices import Device

TRAIN = "train"
EVAL = "eval"


class Tracker(Protocol):
    """What a tracker does at the edges of every timed region."""

    def start(self, kind: str) -> None:
        """Called right after the opening synchronization (``kind``: train or eval)."""

    def stop(self, kind: str, seconds: float) -> None:
        """Called right after the closing synchronization with the region's wall time."""

    # Optional: ``clock_started(kind, t0)``, called with the region clock's start
    # (time.perf_counter) right after it is read, before the region's work.

    def summary(self) -> dict:
        """What the tracker measured over the whole run, for the record."""


class TimedRegion:
    """``with TimedRegion(device, trackers, TRAIN) as region: ...``; afterwards
    ``region.seconds`` is the synchronized wall time. On an exception the device is
    not synchronized again (it may be what failed) and trackers are not stopped."""

    def __init__(self, device: Device, trackers: Sequence[Tracker], kind: str):
        self.device, self.trackers, self.kind = device, list(trackers), kind
        self.seconds = 0.0
        self._t0 = 0.0

    def __enter__(self) -> TimedRegion:
        self.device.synchronize()
        for tracker in self.trackers:
            tracker.start(self.kind)
        self._t0 = time.perf_counter()
        for tracker in self.trackers:
            started = getattr(tracker, "clock_started", None)
            if started is not None:
                started(self.kind, self._t0)
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            return
        self.device.synchronize()
        self.seconds = time.perf_counter() - self._t0
        for tracker in reversed(self.trackers):
            tracker.stop(self.kind, self.seconds)
