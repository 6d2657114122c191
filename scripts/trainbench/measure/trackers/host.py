"""Is anything else running on the cell's cores? Other CPU time while a cell is timed.

pyperf warns when a system is too noisy to benchmark and advises CPU isolation; here
the cell measures what reached it. From the opening of the first timed region to the
close of the last, per logical CPU (psutil, ``/proc/stat`` on Linux), and by kind:

* **the cell's cores** are the CPUs it may run on (its affinity mask, narrowed by
  :mod:`trainbench.measure.placement`; the whole machine where it is not pinned);
* **work on them** is their user, nice and system time: what processes and kernel
  threads ran there. Interrupt time (irq, softirq) is reported beside it, not judged:
  the kernel never charges it to a process, so the cell's own device and disk
  interrupts would read as someone else's;
* **the cell's own** CPU time is this process, its finished children
  (``getrusage(RUSAGE_CHILDREN)``: psutil's children fields are 0 on macOS) and its
  live children (DataLoader workers, the FAISS worker); all of it ran on the cell's
  cores, which children inherit;
* **others'** = work on the cell's cores − the cell's own.

The rule (docs/statistics.md, "A disturbed machine is detected"): the cell is
``disturbed`` when others took at least ``share`` (``timing.disturbed_core_share``,
10%) of the time of the cores it uses, beyond the cores of its set it leaves free:
others' seconds ≥ ((cores in the set − cores used) + share × cores used) × span. A
pinned cell's set is exactly the cores it uses, so any 10% taken from them counts; an
unpinned cell (macOS, or one using the whole machine) loses nothing to work the
scheduler can put on the cores it leaves idle. A CUDA cell is also disturbed when
another process holds a compute context on its GPU
(:mod:`trainbench.measure.trackers.gpu_neighbours`).

For the reader the record also attributes the machine's other CPU time: by kind
(user, system, irq, softirq), on the cell's cores and on the rest, and by process
(the processes that used the most CPU time between the span's start and the record,
named, Snakemake's and the launcher's among them; processes that started and ended
inside the span are only in the unattributed remainder).

Resolution: the kernel counts CPU time in ticks (10 ms on Linux), so the estimate is
meaningful over windows of a second or more (the minimum timed window).
"""

from __future__ import annotations

import contextlib
import os
import resource
import time
from collections.abc import Sequence

import psutil

# Fields of psutil.cpu_times() that are not work done on this machine's CPUs by some
# process or the kernel (guest time is already counted in user).
_NOT_BUSY = {"idle", "iowait", "steal", "guest", "guest_nice"}
_KINDS = ("user", "nice", "system", "irq", "softirq")
# How many of the busiest other processes the record names.
TOP_PROCESSES = 8


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


def cell_cpus() -> list[int]:
    """The logical CPUs this process may run on: its affinity mask (all CPUs where the
    platform has none)."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(psutil.cpu_count(logical=True) or 1))


def _per_cpu_kinds() -> list[dict[str, float]]:
    return [
        {k: float(getattr(t, k, 0.0) or 0.0) for k in _KINDS} for t in psutil.cpu_times(percpu=True)
    ]


def disturbance_threshold_seconds(span: float, set_cores: int, used: int, share: float) -> float:
    """Others' CPU seconds on the cell's cores that make it disturbed (module docstring):
    the idle capacity of the set beyond the cores the cell uses, plus ``share`` of the
    cores it uses, over ``span`` seconds."""
    used = max(1, min(int(used), int(set_cores)))
    return ((set_cores - used) + share * used) * span


def other_processes() -> dict[int, tuple[str, float]]:
    """{pid: (name, CPU seconds)} of every process but this one and its children."""
    me = psutil.Process()
    mine = {me.pid}
    with contextlib.suppress(psutil.Error):
        mine.update(c.pid for c in me.children(recursive=True))
    out = {}
    for p in psutil.process_iter(["name", "cpu_times"]):
        times = p.info.get("cpu_times")
        if p.pid in mine or times is None:
            continue
        out[p.pid] = (p.info.get("name") or "?", float(times.user + times.system))
    return out


def busiest(before: dict, after: dict, top: int = TOP_PROCESSES) -> list[dict]:
    """The processes that used the most CPU between two :func:`other_processes`
    snapshots (present in both), busiest first."""
    used = [
        {"pid": pid, "name": name, "cpu_seconds": seconds - before[pid][1]}
        for pid, (name, seconds) in after.items()
        if pid in before and seconds - before[pid][1] > 0
    ]
    return sorted(used, key=lambda e: -e["cpu_seconds"])[:top]


class HostActivity:
    """Tracker: others' CPU use on the cell's cores (and anywhere) over the span of the
    timed regions; a CUDA cell's GPU neighbours (``gpu``, a
    :class:`~trainbench.measure.trackers.gpu_neighbours.GpuNeighbours`) beside it."""

    def __init__(self, share: float, cores_used: int | None = None, gpu=None):
        self.share = float(share)
        self.process = psutil.Process()
        self.cpus = cell_cpus()
        # A cell at the machine's default threads uses every core of its set.
        self.cores_used = min(int(cores_used or len(self.cpus)), len(self.cpus))
        self.gpu = gpu
        self.load_avg_start = load_average()
        self._first: tuple | None = None
        self._last: tuple | None = None
        self._processes: dict | None = None

    def _reading(self) -> tuple[float, list[dict[str, float]], float]:
        return time.perf_counter(), _per_cpu_kinds(), own_cpu_seconds(self.process)

    def start(self, kind: str) -> None:
        if self._first is None:
            self._processes = other_processes()
            if self.gpu is not None:
                self.gpu.read()
            self._first = self._reading()

    def stop(self, kind: str, seconds: float) -> None:
        self._last = self._reading()

    def _kinds(self, cpus: Sequence[int]) -> dict[str, float]:
        first, last = self._first[1], self._last[1]
        return {k: sum(last[c][k] - first[c][k] for c in cpus if c < len(last)) for k in _KINDS}

    def summary(self) -> dict:
        facts = {
            "method": "psutil per logical CPU (user, nice and system time) of the cores "
            "the cell may run on, minus the CPU time of this process and its children "
            "(live ones: psutil; ended ones: getrusage RUSAGE_CHILDREN), from the first "
            "timed region's start to the last one's end; interrupt time apart",
            "logical_cores": psutil.cpu_count(logical=True),
            "cell_cpus": self.cpus,
            "cores_used": self.cores_used,
            "threshold_share": self.share,
            "load_avg_start": self.load_avg_start,
            "load_avg_end": load_average(),
            "span_seconds": None,
            "other_cpu_seconds": None,
            "other_cpu_cores": None,
            "disturbed": False,
            "disturbed_reason": None,
        }
        if self.gpu is not None:
            self.gpu.read()
            facts["gpu_neighbours"] = self.gpu.summary()
        if self._first is None or self._last is None:
            return facts
        span = self._last[0] - self._first[0]
        own = self._last[2] - self._first[2]
        everywhere = range(len(self._last[1]))
        rest = [c for c in everywhere if c not in set(self.cpus)]
        on_cell, elsewhere = self._kinds(self.cpus), self._kinds(rest)
        work = on_cell["user"] + on_cell["nice"] + on_cell["system"]
        others = max(0.0, work - own)
        machine_others = max(
            0.0, work + elsewhere["user"] + elsewhere["nice"] + elsewhere["system"] - own
        )
        threshold = disturbance_threshold_seconds(span, len(self.cpus), self.cores_used, self.share)
        reasons = []
        if span > 0 and others > threshold:
            cpus = "CPUs" if len(self.cpus) > 1 else "CPU"
            reasons.append(
                f"others used {others / (self.cores_used * span):.0%} of the time of the "
                f"{self.cores_used} core{'s' if self.cores_used > 1 else ''} the cell uses "
                f"({cpus} {_cpu_list(self.cpus)}; limit {self.share:.0%})"
            )
        neighbours = (facts.get("gpu_neighbours") or {}).get("others") or []
        if neighbours:
            named = ", ".join(f"pid {n['pid']}" + (f" {n['name']}" if n["name"] else "")
                              for n in neighbours)  # fmt: skip
            reasons.append(f"another process on its GPU ({named})")
        facts.update(
            span_seconds=span,
            own_cpu_seconds=own,
            cell_cpu_others_seconds=others,
            cell_cpu_others_share=others / (self.cores_used * span) if span > 0 else None,
            threshold_seconds=threshold,
            # every CPU: the figure earlier records carry (and the rule judged)
            other_cpu_seconds=machine_others,
            other_cpu_cores=machine_others / span if span > 0 else None,
            kinds_on_cell_cpus={k: round(v, 3) for k, v in on_cell.items()},
            kinds_elsewhere={k: round(v, 3) for k, v in elsewhere.items()},
            busiest_others=busiest(self._processes or {}, other_processes()),
            disturbed=bool(reasons),
            disturbed_reason="; ".join(reasons) or None,
        )
        return facts


def host_activity(spec: dict, device, torch_threads: int) -> HostActivity:
    """The cell's tracker as its spec says: the share from ``timing``, the cores it uses
    (:func:`trainbench.measure.placement.cores_used`) and, on CUDA, its GPU's
    neighbours."""
    from trainbench.measure.measurement import TimingProtocol
    from trainbench.measure.placement import cores_used

    gpu = None
    if spec.get("backend") == "cuda":
        from trainbench.measure.trackers.energy_counters import nvml_index
        from trainbench.measure.trackers.gpu_neighbours import GpuNeighbours

        gpu = GpuNeighbours(nvml_index(device)[0])
    share = TimingProtocol.from_spec(spec).disturbed_core_share
    return HostActivity(share, cores_used(spec, torch_threads), gpu)


def _cpu_list(cpus: Sequence[int]) -> str:
    cpus = sorted(cpus)
    if len(cpus) > 2 and cpus[-1] - cpus[0] == len(cpus) - 1:
        return f"{cpus[0]}-{cpus[-1]}"
    return ",".join(str(c) for c in cpus)
