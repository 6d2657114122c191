"""The disturbance rule on the cell's own cores (docs/statistics.md, "A disturbed
machine is detected"): the threshold, pinning, a hog on the cell's CPU or elsewhere,
and another process on the cell's GPU (NVML faked)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest
from trainbench.measure import placement
from trainbench.measure.trackers.gpu_neighbours import GpuNeighbours
from trainbench.measure.trackers.host import HostActivity, disturbance_threshold_seconds

LINUX_PIN = placement.CAN_PIN and len(os.sched_getaffinity(0)) >= 2 if placement.CAN_PIN else False


def test_threshold_is_a_share_of_the_cores_used_beyond_the_free_ones():
    # pinned: the set is the cores used; 10% of 1 core over 2 s
    assert disturbance_threshold_seconds(2.0, 1, 1, 0.1) == pytest.approx(0.2)
    # unpinned CUDA cell on 16 CPUs: the 15 it leaves free, then 10% of its one
    assert disturbance_threshold_seconds(1.0, 16, 1, 0.1) == pytest.approx(15.1)
    # a CPU cell on every core
    assert disturbance_threshold_seconds(1.0, 16, 16, 0.1) == pytest.approx(1.6)
    # more threads than CPUs: the set bounds it
    assert disturbance_threshold_seconds(1.0, 2, 8, 0.1) == pytest.approx(0.2)


def spec(backend="cpu", threads=None, workers=0, pin=True):
    return {
        "backend": backend,
        "device_settings": {"threads": threads, "num_workers": workers},
        "timing": {"pin_cpus": pin},
    }


def test_cores_used_and_the_cpus_chosen():
    # an accelerator cell's CPU side runs on PyTorch's threads: the machine
    assert placement.cores_used(spec("cuda")) is None
    assert placement.cores_used(spec("cuda", workers=2), torch_threads=16) == 18
    assert placement.cores_used(spec("cpu", threads=2, workers=1)) == 3
    assert placement.cores_used(spec("cpu")) is None  # PyTorch's default: the machine
    assert placement.cores_used(spec("cpu"), torch_threads=8) == 8
    cpus = list(range(16))
    assert placement.chosen_cpus(spec("cuda"), cpus) is None
    assert placement.chosen_cpus(spec("cpu", threads=4), cpus) == [12, 13, 14, 15]
    assert placement.chosen_cpus(spec("cpu"), cpus) is None
    assert placement.chosen_cpus(spec("cpu", threads=16), cpus) is None
    assert placement.chosen_cpus(spec("cpu", threads=1), [0, 2, 4]) == [4]


def _detached(code: str) -> int:
    """A Python process outside this process's tree (started through a shell that
    exits at once), as another user's program would be; its pid."""
    out = subprocess.run(
        ["sh", "-c", f"'{sys.executable}' -c \"{code}\" >/dev/null 2>&1 & echo $!"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    time.sleep(0.3)
    return int(out.stdout.strip())


def _hog(cpu: int | None) -> int:
    """A busy loop outside this process's tree, pinned to ``cpu`` where given."""
    pin = f"os.sched_setaffinity(0, {{{cpu}}}); " if cpu is not None else ""
    return _detached(f"import os; {pin}exec('while True: pass')")


def _measure_pinned(cell_cpu: int, seconds: float = 1.5) -> dict:
    """This process as a pinned one-core cell on ``cell_cpu``, busy for ``seconds``."""
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {cell_cpu})
    try:
        host = HostActivity(0.1, cores_used=1)
        host.start("train")
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            pass
        host.stop("train", seconds)
        return host.summary()
    finally:
        os.sched_setaffinity(0, before)


@pytest.mark.slow
@pytest.mark.skipif(not LINUX_PIN, reason="needs Linux CPU affinity and 2 or more CPUs")
@pytest.mark.skipif(
    os.getloadavg()[0] > (os.cpu_count() or 1),
    reason="the machine is busy (load average above its CPUs): a hog elsewhere cannot be told apart",
)
def test_a_hog_on_the_cells_cpu_is_flagged_and_one_elsewhere_is_not():
    cpus = sorted(os.sched_getaffinity(0))
    cell, other = cpus[-1], cpus[0]
    pid = _hog(cell)
    try:
        on_cell = _measure_pinned(cell)
    finally:
        os.kill(pid, signal.SIGKILL)
    assert on_cell["cell_cpus"] == [cell]
    assert on_cell["disturbed"] is True, on_cell
    assert on_cell["cell_cpu_others_share"] > 0.3
    pid = _hog(other)
    try:
        elsewhere = _measure_pinned(cell)
    finally:
        os.kill(pid, signal.SIGKILL)
    # On a quiet machine 0-3% (not flagged); other tests running beside this one on a
    # two-core machine add their own share, so it is compared with the hog's.
    assert elsewhere["cell_cpu_others_share"] < on_cell["cell_cpu_others_share"] - 0.2
    # the machine-wide figure still sees the hog
    assert elsewhere["other_cpu_cores"] > 0.5


@pytest.mark.skipif(not placement.CAN_PIN, reason="needs Linux CPU affinity")
def test_pin_cell_and_the_launcher_moving_off(monkeypatch):
    cpus = sorted(os.sched_getaffinity(0))
    before = set(cpus)
    try:
        facts = placement.pin_cell(spec("cpu", threads=1))
        if len(cpus) >= 2:
            assert facts["pinned"] is True and facts["cpus"] == [cpus[-1]]
            assert os.sched_getaffinity(0) == {cpus[-1]}
        else:
            assert facts["pinned"] is False
    finally:
        os.sched_setaffinity(0, before)
    assert placement.pin_cell(spec("cpu", 1, pin=False))["reason"] == "timing.pin_cpus is false"
    assert "every CPU" in placement.pin_cell(spec("cpu"))["reason"]
    launcher = placement.LauncherPlacement(spec("cpu", threads=1))
    try:
        launcher.while_cell_runs()
        if len(cpus) >= 2:
            assert os.sched_getaffinity(0) == set(cpus[:-1])
        launcher.restore()
        assert os.sched_getaffinity(0) == before
    finally:
        os.sched_setaffinity(0, before)


class FakeNvml:
    """pynvml's calls the neighbour check uses, over a list of (pid, memory)."""

    def __init__(self, processes):
        self.processes = processes

    def nvmlInit(self):
        pass

    def nvmlDeviceGetHandleByIndex(self, index):
        return index

    def nvmlDeviceGetComputeRunningProcesses(self, handle):
        return [SimpleNamespace(pid=p, usedGpuMemory=m) for p, m in self.processes]

    def nvmlDeviceGetProcessUtilization(self, handle, since):
        return [SimpleNamespace(pid=p, smUtil=40, timeStamp=since + 1) for p, _ in self.processes]


def _neighbours(monkeypatch, processes) -> dict:
    fake = FakeNvml(processes)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    gpu = GpuNeighbours(0)
    host = HostActivity(1.0, cores_used=1, gpu=gpu)  # CPU load here cannot flag it
    host.start("train")
    host.stop("train", 0.1)
    return host.summary()


def test_another_process_on_the_gpu_is_named_and_disturbs(monkeypatch):
    me = os.getpid()
    alone = _neighbours(monkeypatch, [(me, 1 << 30)])
    assert alone["gpu_neighbours"]["available"] is True
    assert alone["gpu_neighbours"]["others"] == []
    assert "GPU" not in (alone["disturbed_reason"] or "")
    pid = _detached("import time; time.sleep(30)")
    try:
        shared = _neighbours(monkeypatch, [(me, 1 << 30), (pid, 2 << 30)])
    finally:
        os.kill(pid, signal.SIGKILL)
    assert shared["disturbed"] is True
    other = shared["gpu_neighbours"]["others"][0]
    assert other["pid"] == pid and other["name"].startswith("python")
    assert other["sm_util_max"] == 40
    assert f"another process on its GPU (pid {pid}" in shared["disturbed_reason"]


def test_a_container_gpu_list_counts_neighbours_by_host_pid(monkeypatch):
    # NVML reports host pids: none is ours; one of two is taken to be the cell.
    shared = _neighbours(monkeypatch, [(900001, 1), (900002, 1)])
    assert len(shared["gpu_neighbours"]["others"]) == 1
    assert shared["gpu_neighbours"]["others"][0]["pid_namespace"] == "host"
    assert shared["disturbed"] is True
    alone = _neighbours(monkeypatch, [(900001, 1)])
    assert alone["gpu_neighbours"]["others"] == []
    assert "GPU" not in (alone["disturbed_reason"] or "")
    hidden = _neighbours(monkeypatch, [])
    assert hidden["gpu_neighbours"]["available"] is False
    assert "not even the cell's" in hidden["gpu_neighbours"]["reason"]
