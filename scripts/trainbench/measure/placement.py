"""Which logical CPUs a cell runs on: its own cores, the workflow's processes elsewhere.

pyperf's advice for a stable benchmark is CPU isolation: the benchmark on CPUs of its
own (``--affinity``), everything else on the others (``pyperf system tune``). A cell
cannot isolate CPUs (that takes the kernel's ``isolcpus`` or a cgroup, set up by the
machine's owner), but it can do the half that is in a process's hands:

* the cell's child pins itself to the **last** ``n`` logical CPUs it may use (its
  affinity mask, which a Slurm job step or ``taskset`` may already narrow), where ``n``
  is what the cell uses: its torch threads plus one per DataLoader worker
  (:func:`cores_used`). Threads and processes it starts
  later (OpenMP's pool, DataLoader workers, the FAISS worker) inherit the mask;
* its launcher, which waits on it, moves itself to the other CPUs while it waits.

A cell that uses every CPU it may use (at PyTorch's default threads, as every CUDA and
MPS cell does, or ``threads`` at least the CPUs allowed) is not pinned: the whole mask
is its cores. Pinning a CUDA cell to the one core that feeds the GPU was tried on an
H200 host and refused: its 16 OpenMP threads then shared that core, and its untimed
CPU work (eval parity's float64 evaluation) ran past the launcher's timeout.
Linux only (``os.sched_setaffinity``, feature-detected): macOS has no affinity API, so
there a cell's cores are the machine's (the disturbance rule then allows for the cores
it leaves free; :mod:`trainbench.measure.trackers.host`).

Nothing here imports torch: the launcher uses it before any cell runs.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

CAN_PIN = hasattr(os, "sched_setaffinity") and hasattr(os, "sched_getaffinity")


def allowed_cpus() -> list[int]:
    """The logical CPUs this process may run on (all of them where there is no
    affinity API)."""
    if CAN_PIN:
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def cores_used(spec: dict, torch_threads: int | None = None) -> int | None:
    """How many logical CPUs a cell may keep busy: its torch threads (``threads`` of a
    CPU cell, else ``torch_threads``, PyTorch's default) plus its DataLoader workers.
    An accelerator cell counts its torch threads too: one host thread feeds the device,
    but its CPU work beside (FAISS mining, the float64 evaluation of eval parity, data
    preparation) runs on PyTorch's threads. None when the threads are PyTorch's default
    and ``torch_threads`` is not given: the whole machine, by design."""
    settings = spec.get("device_settings") or {}
    workers = int(settings.get("num_workers") or 0)
    threads = (settings.get("threads") if spec.get("backend", "cpu") == "cpu" else None) or (
        torch_threads
    )
    return None if not threads else int(threads) + workers


def chosen_cpus(spec: dict, allowed: Sequence[int]) -> list[int] | None:
    """The CPUs a cell is pinned to: the last :func:`cores_used` of ``allowed``; None
    when the cell uses them all (or PyTorch's default threads), so it is not pinned."""
    used = cores_used(spec)
    cpus = sorted(allowed)
    if used is None or used >= len(cpus):
        return None
    return cpus[-used:]


def pin_cell(spec: dict) -> dict:
    """Pin this process (a cell's child, before it starts any thread) to its CPUs when
    ``timing.pin_cpus`` is on (the default). Returns what is in force, for the record:
    ``pinned``, ``cpus`` (the CPUs the cell may run on now), ``allowed`` (how many it
    might have used) and, when not pinned, ``reason``."""
    allowed = allowed_cpus()
    facts: dict = {"pinned": False, "cpus": allowed, "allowed": len(allowed)}
    if not (spec.get("timing") or {}).get("pin_cpus", True):
        facts["reason"] = "timing.pin_cpus is false"
    elif not CAN_PIN:
        facts["reason"] = "no CPU affinity API on this platform (os.sched_setaffinity)"
    elif (chosen := chosen_cpus(spec, allowed)) is None:
        facts["reason"] = "the cell uses every CPU it may run on"
    else:
        os.sched_setaffinity(0, chosen)
        facts.update(pinned=True, cpus=chosen)
    return facts


class LauncherPlacement:
    """The launcher's side: while its cell runs, it stays off the cell's CPUs (its
    original mask minus the cell's), and before each attempt it goes back to its
    original mask (:meth:`restore`), which the next attempt's child inherits and
    chooses from."""

    def __init__(self, spec: dict):
        self.original = allowed_cpus() if CAN_PIN else None
        enabled = (spec.get("timing") or {}).get("pin_cpus", True)
        chosen = chosen_cpus(spec, self.original) if (CAN_PIN and enabled) else None
        self.elsewhere = sorted(set(self.original) - set(chosen)) if chosen else None

    def restore(self) -> None:
        if self.elsewhere and self.original:
            os.sched_setaffinity(0, self.original)

    def while_cell_runs(self) -> None:
        if self.elsewhere:
            os.sched_setaffinity(0, self.elsewhere)
