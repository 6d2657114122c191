"""Is anything else running? CPU time used by other processes while a cell is timed.

pyperf warns when a system is too noisy to benchmark; here the cell measures it.
From the opening of the first timed region to the close of the last, the machine's
busy CPU time (psutil, every core) minus the CPU time of this process and its
children (live ones read by psutil; ended ones by ``getrusage(RUSAGE_CHILDREN)``,
since psutil's children fields are always 0 on macOS) is the CPU time other
processes used; divided by the wall time it is the number of cores they kept busy
on average. The load average is read at both ends.
A cell is ``disturbed`` when others kept at least ``threshold_cores`` busy.

Resolution: the kernel counts CPU time in ticks (10 ms on Linux), so the estimate
is meaningful over windows of a second or more (the minimum timed window).
"""

from __future__ import annotations

import os
import resource
import time

import psutil

# Fields of psutil.cpu_times() that are not work done by some process on this machine.
_NOT_BUSY = {"idle", "iowait", "steal", "guest", "guest_nice"}


def machine_busy_seconds() -> float:
    """CPU seconds every core has spent working since boot (guest time is already in user)."""
    times = psutil.cpu_times()
    return float(sum(v for k, v in times._asdict().items() if k not in _NOT_BUSY))


def waited_children_cpu_seconds() -> float:
    """CPU seconds of this process's children that have ended and been waited for (and
    of their own waited-for descendants): ``getrusage(RUSAGE_CHILDREN)``, the same on
    Linux and macOS. psutil's ``children_user``/``children_system`` are the same
    numbers on Linux (/proc's cutime and cstime) but always 0 on macOS and Windows."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def own_cpu_seconds(process: psutil.Process) -> float:
    """CPU seconds of this process (``process`` is this process: psutil.Process()),
    its finished children (:func:`waited_children_cpu_seconds`) and its live children
    (DataLoader workers, compiler workers; psutil)."""
    if process.pid != os.getpid():
        raise ValueError("own_cpu_seconds reads the caller's own children: pass psutil.Process()")
    own = process.cpu_times()
    total = own.user + own.system + waited_children_cpu_seconds()
    for child in process.children(recursive=True):
        try:
            times = child.cpu_times()
        except psutil.Error:
            continue  # it ended between listing and reading: counted once waited for
        total += times.user + times.system
    return float(total)


def load_average() -> list[float] | None:
    try:
        return [round(v, 2) for v in os.getloadavg()]
    except OSError:  # not available on this platform
        return None


class HostActivity:
    """Tracker: other processes' CPU use over the span of the timed regions."""

    def __init__(self, threshold_cores: float):
        self.threshold_cores = float(threshold_cores)
        self.process = psutil.Process()
        self.load_avg_start = load_average()
        self._first: tuple[float, float, float] | None = None
        self._last: tuple[float, float, float] | None = None

    def _reading(self) -> tuple[float, float, float]:
        return time.perf_counter(), machine_busy_seconds(), own_cpu_seconds(self.process)

    def start(self, kind: str) -> None:
        if self._first is None:
            self._first = self._reading()

    def stop(self, kind: str, seconds: float) -> None:
        self._last = self._reading()

    def summary(self) -> dict:
        facts = {
            "method": "psutil: busy CPU time of the machine minus this process and its "
            "children (live ones: psutil; ended ones: getrusage RUSAGE_CHILDREN), from "
            "the first timed region's start to the last one's end",
            "logical_cores": psutil.cpu_count(logical=True),
            "threshold_cores": self.threshold_cores,
            "load_avg_start": self.load_avg_start,
            "load_avg_end": load_average(),
            "span_seconds": None,
            "other_cpu_seconds": None,
            "other_cpu_cores": None,
            "disturbed": False,
        }
        if self._first is None or self._last is None:
            return facts
        span = self._last[0] - self._first[0]
        busy = self._last[1] - self._first[1]
        own = self._last[2] - self._first[2]
        other = max(0.0, busy - own)
        cores = other / span if span > 0 else None
        facts.update(
            span_seconds=span,
            other_cpu_seconds=other,
            other_cpu_cores=cores,
            disturbed=bool(cores is not None and cores >= self.threshold_cores),
        )
        return facts
