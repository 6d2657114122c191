"""Trackers, composed by the training loop (optimum-benchmark's style): each one a
small object that observes the synchronized edges of every timed region
(:class:`TimedRegion`) and reports a summary for the record.

- :class:`StepTimer` — every step's time (device events or the clock)
- :class:`HostActivity` — CPU time of other processes: is the machine disturbed?
- :class:`MemoryTracker` — peak memory and one snapshot per epoch
- :class:`EnergyTracker` — joules per domain (NVML, RAPL, IOReport) over the timed regions
- :mod:`.verification` — placement, autocast really active, captured warnings
"""

from trainbench.measure.trackers.base import EVAL, TRAIN, TimedRegion, Tracker
from trainbench.measure.trackers.energy import EnergyTracker
from trainbench.measure.trackers.host import HostActivity
from trainbench.measure.trackers.memory import MemoryTracker
from trainbench.measure.trackers.steps import StepTimer
from trainbench.measure.trackers.verification import (
    AutocastProbe,
    WarningLog,
    autocast_facts,
    capture_warnings,
    verify_placement,
)

__all__ = [
    "EVAL",
    "TRAIN",
    "AutocastProbe",
    "EnergyTracker",
    "HostActivity",
    "MemoryTracker",
    "StepTimer",
    "TimedRegion",
    "Tracker",
    "WarningLog",
    "autocast_facts",
    "capture_warnings",
    "verify_placement",
]
