"""Another process on the cell's GPU: NVML's list of processes with a compute context.

A CUDA cell shares its GPU with whatever else holds a compute context on it. NVML
lists those processes (``nvmlDeviceGetComputeRunningProcesses``: pid and memory) and,
where the driver keeps them, their recent SM utilisation samples
(``nvmlDeviceGetProcessUtilization``). The cell reads the list when its first timed
region opens and once its last one has closed; a process other than the cell's own
found in either list is a neighbour, named in the record (pid, name where this process
can see it, memory, SM utilisation), and the cell is disturbed.

Inside a container NVML reports the host's pids, which ``os.getpid()`` does not match.
The cell is the one process of its own process tree with a context on the GPU (the
fork server never touches a device; DataLoader workers and the FAISS worker do not
either), so where none of the listed pids is the cell's, one of them is taken to be
the cell and the others are neighbours: a neighbour is then counted, and named by its
host pid only. Where NVML lists no process at all, not even the cell, it cannot see
them (a restricted container): ``unavailable``, with the reason.
"""

from __future__ import annotations

import contextlib
import importlib
import os
from typing import Any

import psutil


def _own_pids() -> set[int]:
    me = psutil.Process()
    pids = {me.pid}
    with contextlib.suppress(psutil.Error):
        pids.update(child.pid for child in me.children(recursive=True))
    return pids


def _name(pid: int) -> str | None:
    try:
        return psutil.Process(pid).name()
    except psutil.Error:
        return None


class GpuNeighbours:
    """Other processes with a compute context on the cell's GPU (NVML), at the span's
    two edges. ``available`` is False (with ``reason``) where NVML is missing or
    lists nothing."""

    def __init__(self, nvml_index: int):
        self.index = nvml_index
        self.reason: str | None = None
        self.nvml: Any = None
        self.handle: Any = None
        self.seen: dict[int, dict] = {}
        self.readings = 0
        self._since_us = 0
        try:
            self.nvml = importlib.import_module("pynvml")
            self.nvml.nvmlInit()
            self.handle = self.nvml.nvmlDeviceGetHandleByIndex(nvml_index)
        except Exception as error:  # no driver, no library, no such GPU
            self.reason = f"NVML not available: {type(error).__name__}: {error}"

    @property
    def available(self) -> bool:
        return self.handle is not None and self.reason is None

    def read(self) -> None:
        """One look at the GPU's compute processes (never raises)."""
        if not self.available:
            return
        try:
            listed = self.nvml.nvmlDeviceGetComputeRunningProcesses(self.handle)
        except Exception as error:
            self.reason = f"nvmlDeviceGetComputeRunningProcesses failed: {error}"
            return
        self.readings += 1
        if not listed:
            self.reason = "NVML lists no compute process on this GPU, not even the cell's"
            return
        own = _own_pids()
        pids = [int(p.pid) for p in listed]
        if own.isdisjoint(pids):
            # A container's pid namespace: one listed process is the cell.
            listed = sorted(listed, key=lambda p: int(p.pid))[1:] if len(listed) > 1 else []
            namespaced = True
        else:
            listed = [p for p in listed if int(p.pid) not in own]
            namespaced = False
        for process in listed:
            pid = int(process.pid)
            memory = getattr(process, "usedGpuMemory", None)
            entry = self.seen.setdefault(pid, {"pid": pid, "name": None})
            entry["name"] = entry["name"] or (None if namespaced else _name(pid))
            entry["pid_namespace"] = "host" if namespaced else "this"
            entry["memory_bytes"] = int(memory) if isinstance(memory, int) else None
        self._utilisation()

    def _utilisation(self) -> None:
        """SM utilisation samples since the last look, per pid (where kept)."""
        try:
            samples = self.nvml.nvmlDeviceGetProcessUtilization(self.handle, self._since_us)
        except Exception:
            return  # not supported, or no sample since: the list above still holds
        for sample in samples:
            self._since_us = max(self._since_us, int(sample.timeStamp))
            entry = self.seen.get(int(sample.pid))
            if entry is not None:
                entry["sm_util_max"] = max(entry.get("sm_util_max") or 0, int(sample.smUtil))

    def summary(self) -> dict:
        return {
            "method": "NVML nvmlDeviceGetComputeRunningProcesses (and "
            "nvmlDeviceGetProcessUtilization where kept) of the cell's GPU, when the first "
            "timed region opened and after the last one closed",
            "nvml_index": self.index,
            "available": self.available and self.readings > 0,
            "reason": self.reason,
            "others": sorted(self.seen.values(), key=lambda e: e["pid"]),
            "own_pid": os.getpid(),
        }
