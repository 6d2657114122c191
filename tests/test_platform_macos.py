"""Every place that reads platform facts, with the platform patched to macOS: no
/proc, no prctl, no powercap, sysctl answers mocked. (No Mac exists here: these
check the macOS branches' logic, never macOS itself.)"""

from __future__ import annotations

import builtins
import ctypes
import os
import resource
import subprocess
import sys
from types import SimpleNamespace

import pytest
from trainbench.launch import cell_lock, environment
from trainbench.measure import cpu_features as cf
from trainbench.measure import device_base, devices
from trainbench.measure.devices import CpuDevice
from trainbench.measure.trackers import energy_counters as counters

SYSCTL = {
    ("sysctl", "-n", "machdep.cpu.brand_string"): "Apple M2 Pro\n",
    ("sysctl", "hw.optional"): "hw.optional.arm.FEAT_BF16: 1\nhw.optional.arm.FEAT_FP16: 1\n"
    "hw.optional.neon: 1\nhw.optional.arm.FEAT_SME: 0\n",
}


@pytest.fixture
def macos(monkeypatch, tmp_path):
    """sys.platform 'darwin'; /proc and /sys unreadable; sysctl mocked; no nvidia-smi;
    prctl fails the test if called. Returns the sysctl commands run."""
    calls: list[tuple] = []

    def fake_run(argv, **kwargs):
        calls.append(tuple(argv))
        if tuple(argv) not in SYSCTL:
            raise FileNotFoundError(argv[0])
        return SimpleNamespace(stdout=SYSCTL[tuple(argv)], returncode=0)

    real_open = builtins.open

    def no_proc(path, *args, **kwargs):
        if str(path).startswith(("/proc", "/sys")):
            raise AssertionError(f"{path} read on macOS")
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(sys, "platform", "darwin")
    monkeypatch.setattr(subprocess, "run", fake_run)
    monkeypatch.setattr(builtins, "open", no_proc)
    monkeypatch.setattr(counters, "POWERCAP", tmp_path / "no-sys-class-powercap-on-macos")
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi
    return calls


def test_host_facts_on_macos_come_from_sysctl(macos):
    facts = environment.host_facts()
    assert facts["cpu_model"] == "Apple M2 Pro"
    assert facts["cpu_precision_flags"] == ["arm.feat_bf16", "arm.feat_fp16", "neon"]
    assert facts["gpu_models"] is None and facts["logical_cores"] == os.cpu_count()
    assert ("sysctl", "hw.optional") in macos


def test_cpu_device_facts_on_macos_name_the_isa_from_sysctl(macos):
    facts = CpuDevice().facts()
    assert facts["name"] == "Apple M2 Pro"
    isa = facts["isa"]
    assert isa["flags_source"] == "sysctl hw.optional"
    assert isa["precision_flags"] == ["arm.feat_bf16", "arm.feat_fp16", "neon"]
    assert "flags arm.feat_bf16 arm.feat_fp16 neon" in cf.isa_text(isa)


def test_without_sysctl_the_cpu_is_named_by_platform(macos, monkeypatch):
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: (_ for _ in ()).throw(OSError("no")))
    monkeypatch.setattr(environment.platform, "processor", lambda: "arm")
    assert environment.cpu_model_name() == "arm"
    assert environment.cpu_precision_flags() == []


def test_linux_without_proc_falls_back_to_platform(monkeypatch):
    real_open = builtins.open

    def no_proc(path, *args, **kwargs):
        if str(path).startswith("/proc"):
            raise FileNotFoundError(path)
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setattr(builtins, "open", no_proc)
    monkeypatch.setattr(environment.platform, "processor", lambda: "x86_64")
    assert environment.cpu_model_name() == "x86_64"


@pytest.mark.parametrize(("platform", "scale"), [("darwin", 1), ("linux", 1024)])
def test_peak_rss_is_bytes_on_macos_and_kib_on_linux(monkeypatch, platform, scale):
    monkeypatch.setattr(sys, "platform", platform)
    monkeypatch.setattr(
        device_base.resource, "getrusage", lambda who: SimpleNamespace(ru_maxrss=4096)
    )
    assert devices.host_peak_rss_bytes() == 4096 * scale
    assert resource.getrusage is not None  # the real module is untouched outside the patch


def test_child_guard_never_calls_prctl_on_macos(macos, monkeypatch):
    def no_libc(*args, **kwargs):
        raise AssertionError("prctl (libc) loaded on macOS")

    monkeypatch.setattr(ctypes, "CDLL", no_libc)
    exits = []
    monkeypatch.setattr(os, "_exit", exits.append)
    cell_lock.child_guard(os.getppid())()
    assert exits == []  # the launcher is alive: the child goes on
    cell_lock.child_guard(-1)()
    assert exits == [1]  # the launcher is gone already: the child leaves


def test_energy_on_macos_never_reads_powercap(macos, monkeypatch):
    monkeypatch.setitem(sys.modules, "zeus_apple_silicon", None)

    def no_rapl(*args, **kwargs):
        raise AssertionError("RAPL opened on macOS")

    monkeypatch.setattr(counters, "rapl_source", no_rapl)
    (source,) = counters.open_sources(CpuDevice())
    assert source.unavailable == dict.fromkeys(("cpu", "dram"), counters.NO_APPLE_EXTRA)


def test_threads_in_force_are_recorded_whatever_the_platform(macos):
    import torch

    before = torch.get_num_threads()
    try:
        in_force = CpuDevice({"threads": 1}).apply_settings()
        assert in_force["torch_threads"] == 1
    finally:
        torch.set_num_threads(before)
