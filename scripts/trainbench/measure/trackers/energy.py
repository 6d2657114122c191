"""Energy of the timed regions, per domain where a counter can be read.

A tracker on the interface of :mod:`.base`: every domain's cumulative counter is read
right after a region's opening synchronization and right after its closing one, so the
energy of a ``train`` region is that of its steps (and a few milliseconds of tracker
bookkeeping at each edge, with the device idle). Step 0 runs outside every region and
is never counted; evaluation regions (``eval``) are summed apart. The domains and
their counters (NVML, Linux RAPL, macOS IOReport), by backend, are in
:mod:`.energy_counters`.

**Unreadable counters are data.** Every domain of a cell is recorded as
``{"status": "ok" | "short window" | "unavailable", "reason", "joules",
"window_seconds", "method"}``: no powercap folder, a permission error, NVML missing
or unsupported, a macOS without the extra, a read that fails mid-run — each is a reason,
never an exception out of the tracker.

**A minimum window** (``timing.min_energy_seconds``, 1 s): NVML's energy counter is
updated about every 100 ms (and on A100/H100 the driver samples power only part of each
period), so a reading can lag the true energy by up to one update period at each edge;
over 1 s, ten periods, that is at most about one period's energy (≈10%) in the worst
case, less as the edge errors cancel at steady power, and 1 s is also the throughput
window's minimum (``timing.min_timed_seconds``, docs/statistics.md §1). A training
window shorter than this is a ``short window``: its joules are kept only as
``raw_joules`` and never reported as a measurement. RAPL counters update every
millisecond or so; the same minimum applies to every domain, so one rule decides.

**Idle power** is measured once per cell, when the tracker is made (before step 0,
after a synchronization, nothing queued): every readable counter over
:data:`IDLE_SECONDS` (0.5 s) of sleep, divided by the elapsed time. **GPU state**
(NVML: temperature, enforced power limit, the driver's power reading) is read when the
tracker is made and again when its summary is taken, after the last evaluation.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from trainbench.measure.trackers.base import EVAL, TRAIN
from trainbench.measure.trackers.energy_counters import Source, open_sources

OK = "ok"
UNAVAILABLE = "unavailable"
SHORT = "short window"
DOMAINS = ("gpu", "cpu", "dram", "ane")  # the order of records and tables
IDLE_SECONDS = 0.5


# ----------------------------------------------------------------------------- tracker


@dataclass
class Window:
    """What the regions of one kind added up to."""

    regions: int = 0
    seconds: float = 0.0
    joules: dict[str, float] = field(default_factory=dict)


def _grouped(reasons: Mapping[str, str]) -> list[str]:
    """["cpu, dram: no /sys/class/powercap …", "gpu: …"]: domains sharing a reason once."""
    by_reason: dict[str, list[str]] = {}
    for name, reason in reasons.items():
        by_reason.setdefault(reason, []).append(name)
    return [f"{', '.join(names)}: {reason}" for reason, names in by_reason.items()]


def _in_order(names) -> list[str]:
    return sorted(names, key=lambda n: (DOMAINS.index(n) if n in DOMAINS else len(DOMAINS), n))


class EnergyTracker:
    """Tracker: joules per domain over the ``train`` regions (and, apart, ``eval``).

    Put it first in a region's tracker list: its counters are then read before the step
    timer's first event and after its last, so a read (up to ~1 ms for NVML) never
    lands inside a step. ``window_seconds`` is the time between its own two reads of
    each region, summed. ``sources`` (tests) replaces the machine's counters;
    ``idle_seconds`` 0 skips the idle sample. Construct it before training: it samples
    idle power then."""

    def __init__(
        self,
        device: Any,
        min_seconds: float = 1.0,
        sources: Sequence[Source] | None = None,
        idle_seconds: float = IDLE_SECONDS,
    ):
        self.min_seconds = float(min_seconds)
        self.sources = list(open_sources(device) if sources is None else sources)
        self.methods: dict[str, str] = {}
        self.reasons: dict[str, str] = {}
        for source in self.sources:
            self.methods.update(source.methods)
            self.reasons.update(source.unavailable)
        self.windows = {TRAIN: Window(), EVAL: Window()}
        self._open: tuple[float, dict[str, float]] | None = None
        self._closed = False
        self.gpu_before = self._gpu_state()
        self.gpu_after: dict | None = None
        self.idle = self._idle(device, idle_seconds)

    # -- reading ---------------------------------------------------------------------

    def _read(self) -> dict[str, float]:
        """Every readable domain now; a source that fails is unavailable from here on."""
        values: dict[str, float] = {}
        for source in self.sources:
            live = [n for n in source.methods if n not in self.reasons]
            if not live:
                continue
            try:
                read = source.read()
                values.update({n: float(read[n]) for n in live})
            except Exception as error:
                for name in live:
                    self.reasons[name] = f"read failed: {type(error).__name__}: {error}"
        return values

    def _idle(self, device: Any, seconds: float) -> dict:
        facts = {
            "method": f"every readable counter over {seconds:g} s of sleep after a device "
            "synchronization with nothing queued, before step 0; joules / elapsed seconds "
            "(NVML's counter updates about every 100 ms: the GPU's idle watts hold to about "
            "±20%; gpu_state.before.power_w is the driver's own reading beside it)",
            "seconds": None,
            "watts": {},
            "total_watts": None,
        }
        if seconds <= 0 or not any(n not in self.reasons for n in self.methods):
            return facts
        device.synchronize()
        t0, first = time.perf_counter(), self._read()
        time.sleep(seconds)
        t1, last = time.perf_counter(), self._read()
        shared = _in_order(set(first) & set(last))
        facts["seconds"] = t1 - t0
        facts["watts"] = {n: (last[n] - first[n]) / (t1 - t0) for n in shared}
        facts["total_watts"] = sum(facts["watts"].values()) if shared else None
        return facts

    def _gpu_state(self) -> dict | None:
        for source in self.sources:
            if source.state is not None:
                try:
                    return source.state()
                except Exception as error:
                    return {"errors": {"state": f"{type(error).__name__}: {error}"}}
        return None

    # -- the tracker interface -------------------------------------------------------

    def start(self, kind: str) -> None:
        self._open = (time.perf_counter(), self._read())

    def stop(self, kind: str, seconds: float) -> None:
        if self._open is None or kind not in self.windows:
            return
        t1, values = time.perf_counter(), self._read()
        t0, first = self._open
        window = self.windows[kind]
        window.regions += 1
        window.seconds += t1 - t0
        for name in set(first) & set(values):
            window.joules[name] = window.joules.get(name, 0.0) + values[name] - first[name]
        self._open = None

    def discard(self) -> None:
        """Forget the window opened by :meth:`start` (nothing was timed in it)."""
        self._open = None

    def measured_seconds(self, kind: str) -> float | None:
        """Seconds of the ``kind`` regions so far, or None where no domain is measured
        (nothing to lengthen a window for)."""
        if not any(n not in self.reasons for n in self.methods):
            return None
        return self.windows[kind].seconds

    def train_joules(self) -> tuple[float | None, float]:
        """Joules of the ``train`` regions so far over every domain still measured, and
        those regions' seconds; None joules where no domain is measured."""
        window = self.windows[TRAIN]
        live = [n for n in window.joules if n not in self.reasons]
        joules = math.fsum(window.joules[n] for n in live) if live else None
        return joules, window.seconds

    # -- the record ------------------------------------------------------------------

    def _domain(self, name: str, window: Window) -> dict:
        seconds = window.seconds if window.regions else None
        facts = {"status": OK, "reason": None, "joules": None, "window_seconds": seconds,
                 "method": self.methods.get(name)}  # fmt: skip
        if name in self.reasons:
            return {**facts, "status": UNAVAILABLE, "reason": self.reasons[name],
                    "window_seconds": None}  # fmt: skip
        if not window.regions or name not in window.joules:
            return {**facts, "status": UNAVAILABLE, "reason": "no timed region was measured"}
        if window.seconds < self.min_seconds:
            reason = (
                f"energy window {window.seconds:.3g} s < timing.min_energy_seconds "
                f"{self.min_seconds:g} s (NVML's counter updates about every 100 ms)"
            )
            return {**facts, "status": SHORT, "reason": reason,
                    "raw_joules": window.joules[name]}  # fmt: skip
        return {**facts, "joules": window.joules[name]}

    def _window(self, kind: str, samples: int | None) -> dict:
        window = self.windows[kind]
        names = _in_order(set(self.methods) | set(self.reasons))
        domains = {n: self._domain(n, window) for n in names}
        ok = [n for n in names if domains[n]["status"] == OK]
        short = [n for n in names if domains[n]["status"] == SHORT]
        total = sum(domains[n]["joules"] for n in ok) if ok else None
        others = _grouped({n: domains[n]["reason"] for n in names if n not in ok})
        status = OK if ok else SHORT if short else UNAVAILABLE
        reason = domains[short[0]]["reason"] if status == SHORT else "; ".join(others) or None
        if status == OK and others:
            reason = "not measured: " + "; ".join(others)
        per_sample = total / samples if total is not None and samples else None
        return {
            "status": status, "reason": reason, "domains": domains, "measured": "+".join(ok),
            "regions": window.regions, "window_seconds": window.seconds if window.regions else None,
            "samples": samples, "total_joules": total, "joules_per_sample": per_sample,
            "samples_per_joule": samples / total if per_sample and total > 0 else None,
            "mean_watts": total / window.seconds if total is not None and window.seconds else None,
        }  # fmt: skip

    def summary(self, samples: int | None = None) -> dict:
        """The record's ``energy``: the training window (``samples``: the samples of the
        timed training regions, step 0 excluded), evaluation apart, idle power and the
        GPU's state before and after."""
        if not self._closed:
            self.gpu_after = self._gpu_state()
            for source in self.sources:
                source.close()
            self._closed = True
        return {
            **self._window(TRAIN, samples),
            "scope": "timed training regions only: step 0 (outside every region) and "
            "evaluation excluded; warm-up steps after step 0 are inside the regions",
            "min_seconds": self.min_seconds,
            "eval": self._window(EVAL, None),
            "idle": self.idle,
            "gpu_state": {
                "before": self.gpu_before,
                "after": self.gpu_after,
                "method": "NVML nvmlDeviceGetTemperature(NVML_TEMPERATURE_GPU) °C, "
                "nvmlDeviceGetEnforcedPowerLimit and nvmlDeviceGetPowerUsage (mW, shown in W), "
                "read before step 0 and after the last evaluation",
            }
            if self.gpu_before is not None
            else None,
        }
