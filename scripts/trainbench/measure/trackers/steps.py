"""Per-step times inside training regions: device events on CUDA/MPS, the clock on the CPU."""

from __future__ import annotations

import time
from typing import Any

from trainbench.measure.devices import Device
from trainbench.measure.trackers.base import TRAIN


class StepTimer:
    """Times every step of every training region without synchronizing inside it.

    On a device with timing events, an event is recorded when a region starts and
    after each step's work has been queued; step times are read from consecutive
    events once the region's closing synchronization has happened. On the CPU,
    which runs synchronously, the clock between steps is exact. Events for the
    expected steps are made before the region's clock starts (:meth:`prepare`),
    so marking a step only records one."""

    def __init__(self, device: Device):
        self.device = device
        self.uses_events = device.make_event() is not None
        self.method = (
            f"{device.backend} timing events between steps; device synchronized at region edges"
            if self.uses_events
            else "time.perf_counter between steps (synchronous device); region edges synchronized"
        )
        self.regions: list[list[float]] = []  # step seconds of each closed region
        self.region_seconds: list[float] = []  # synchronized wall time of each region
        self._marks: list[Any] = []
        self._spare: list[Any] = []
        self.pairs_refused = 0  # event pairs whose end was not after their start (MPS)
        self.steps_shared = 0  # steps timed as an even share of a longer span

    def prepare(self, expected_steps: int) -> None:
        """Make the events of the next region now, outside every timed region."""
        if self.uses_events:
            self._spare = [self.device.make_event() for _ in range(expected_steps + 1)]

    def _event(self) -> Any:
        event = self._spare.pop() if self._spare else self.device.make_event()
        event.record()
        return event

    def start(self, kind: str) -> None:
        """The region's first event (a device timestamp: recorded last of all the
        trackers' starts, so the others' bookkeeping is not in the first step)."""
        if kind == TRAIN:
            self._marks = [self._event()] if self.uses_events else []

    def clock_started(self, kind: str, t0: float) -> None:
        """On the clock: the first mark is the region clock's own start, so the steps'
        times add up to at most the region's wall time."""
        if kind == TRAIN and not self.uses_events:
            self._marks = [t0]

    def mark_step(self) -> None:
        """After each step's work has been queued; never synchronizes."""
        self._marks.append(self._event() if self.uses_events else time.perf_counter())

    def stop(self, kind: str, seconds: float) -> None:
        if kind != TRAIN:
            return
        marks = self._marks
        if self.uses_events:
            steps, refused, shared = event_step_seconds(marks, seconds)
            self.pairs_refused += refused
            self.steps_shared += shared
        else:
            steps = [b - a for a, b in zip(marks, marks[1:], strict=False)]
        self.regions.append([float(s) for s in steps])
        self.region_seconds.append(float(seconds))
        self._marks, self._spare = [], []

    def reading_facts(self) -> dict:
        """How the events read (:func:`event_step_seconds`); nothing on the clock."""
        if not self.uses_events:
            return {}
        return {
            "event_pairs_refused": self.pairs_refused,
            "steps_sharing_a_span": self.steps_shared,
        }

    def summary(self) -> dict:
        return {
            "method": self.method,
            "region_seconds": list(self.region_seconds),
            **self.reading_facts(),
        }


def event_step_seconds(marks: list[Any], region_seconds: float) -> tuple[list[float], int, int]:
    """Each step's seconds from the region's events: (seconds, pairs refused, steps that
    share a span).

    An event pair can be refused: torch 2.13's ``torch.mps.Event.elapsed_time`` reads host
    timestamps taken in Metal's completion callbacks and raises when the end is not later
    than the start, which short steps can give (pytorch#196395). A refused pair never
    fails the cell: the step's start is read against the next event that reads, and the
    steps that span share its time evenly (their sum, what a window's throughput uses, is
    still measured). Each event is read as an end at most once (an MPS end event is
    waited for once). Where no later event reads, the region's synchronized wall time
    less the steps already read is shared by the rest."""
    steps: list[float] = []
    refused = shared = 0
    start, count = 0, len(marks)
    while start < count - 1:
        end, span = start + 1, None
        while end < count and span is None:
            try:
                span = marks[start].elapsed_time(marks[end]) / 1000.0
            except RuntimeError:
                refused += 1
                end += 1
        if span is None:
            rest = count - 1 - start
            share = max(region_seconds - sum(steps), 0.0) / rest
            return steps + [share] * rest, refused, shared + rest
        width = end - start
        steps.extend([span / width] * width)
        shared += width if width > 1 else 0
        start = end
    return steps, refused, shared
