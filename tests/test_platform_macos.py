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

import psutil
import pytest
from helpers import tiny_config
from trainbench import config as tbconfig
from trainbench.launch import cell_lock, environment
from trainbench.measure import cpu_features as cf
from trainbench.measure import device_base, devices, macos_host
from trainbench.measure.devices import CpuDevice
from trainbench.measure.trackers import energy_counters as counters

CORE_LEVELS = ("sysctl", *macos_host.CORE_LEVEL_KEYS)
# pmset -g on a MacBook without High Power Mode (the settings in use), Low Power Mode on
PMSET_LIVE = """System-wide power settings:
Currently in use:
 standby              1
 sleep                1 (sleep prevented by powerd)
 hibernatemode        3
 displaysleep         10
 lowpowermode         1
 womp                 0
"""
# pmset -g therm on Apple silicon with nothing recorded (pmset.m's three notes)
PMSET_THERM = """Note: No thermal warning level has been recorded
Note: No performance warning level has been recorded
Note: No CPU power status has been recorded
"""
MAC_COMMANDS = {
    ("sysctl", "-n", "machdep.cpu.brand_string"): "Apple M2 Pro\n",
    ("sysctl", "hw.optional"): "hw.optional.arm.FEAT_BF16: 1\nhw.optional.arm.FEAT_FP16: 1\n"
    "hw.optional.neon: 1\nhw.optional.arm.FEAT_SME: 0\n",
    CORE_LEVELS: "hw.nperflevels: 2\nhw.perflevel0.physicalcpu: 6\nhw.perflevel0.logicalcpu: 6\n"
    "hw.perflevel1.physicalcpu: 4\nhw.perflevel1.logicalcpu: 4\n",
    ("pmset", "-g"): PMSET_LIVE,
    ("pmset", "-g", "therm"): PMSET_THERM,
}
ON_BATTERY = SimpleNamespace(percent=71, secsleft=9000, power_plugged=False)


@pytest.fixture
def macos(monkeypatch, tmp_path):
    """sys.platform 'darwin'; /proc and /sys unreadable; sysctl and pmset mocked (a
    MacBook with an M2 Pro on battery); no nvidia-smi; prctl fails the test if called.
    Returns the commands run."""
    calls: list[tuple] = []

    def fake_run(argv, **kwargs):
        calls.append(tuple(argv))
        if tuple(argv) not in MAC_COMMANDS:
            raise FileNotFoundError(argv[0])
        return SimpleNamespace(stdout=MAC_COMMANDS[tuple(argv)], returncode=0)

    real_open = builtins.open

    def no_proc(path, *args, **kwargs):
        if str(path).startswith(("/proc", "/sys")):
            raise AssertionError(f"{path} read on macOS")
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(sys, "platform", "darwin")
    monkeypatch.setattr(subprocess, "run", fake_run)
    monkeypatch.setattr(builtins, "open", no_proc)
    monkeypatch.setattr(counters, "POWERCAP", tmp_path / "no-sys-class-powercap-on-macos")
    monkeypatch.setattr(psutil, "sensors_battery", lambda: ON_BATTERY)
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


# -- the Mac's cores, power and thermal state (trainbench.measure.macos_host) ----------------


def test_host_facts_on_macos_hold_the_core_kinds_power_and_thermal_state(macos):
    facts = environment.host_facts()
    assert facts["cpu_core_levels"] == {
        "levels": 2,
        "performance_cores": 6,
        "performance_logical_cores": 6,
        "efficiency_cores": 4,
        "efficiency_logical_cores": 4,
    }
    assert facts["power"] == {
        "source": "battery",
        "battery_percent": 71.0,
        "low_power_mode": True,
        "pmset_power_mode": "lowpowermode 1",
    }
    assert facts["thermal"] == {
        "thermal_warning_level": None,
        "performance_warning_level": None,
        "cpu_speed_limit": None,
        "notes": [
            "No thermal warning level has been recorded",
            "No performance warning level has been recorded",
            "No CPU power status has been recorded",
        ],
    }
    assert {CORE_LEVELS, ("pmset", "-g"), ("pmset", "-g", "therm")} <= set(macos)


def test_an_intel_mac_or_an_older_macos_reads_none_never_an_error(macos, monkeypatch):
    """sysctl warns about names it does not know and prints the rest (exit status 1);
    pmset prints no power mode line; pmset -g therm on an Intel Mac prints levels and
    its CPU speed limit, each level after a date."""
    answers = {
        **MAC_COMMANDS,
        CORE_LEVELS: "hw.nperflevels: 1\nhw.perflevel0.physicalcpu: 4\n"
        "hw.perflevel0.logicalcpu: 8\n",
        ("pmset", "-g"): "System-wide power settings:\nCurrently in use:\n sleep 1\n",
        ("pmset", "-g", "therm"): "2024-05-01 10:00:00 +0200 Thermal Warning Level = 0\n"
        "Note: No performance warning level has been recorded\n"
        "2024-05-01 10:00:00 +0200 CPU Power notify\n\tCPU_Scheduler_Limit \t= 100\n"
        "\tCPU_Available_CPUs \t= 8\n\tCPU_Speed_Limit \t= 80\n",
    }
    monkeypatch.setattr(
        subprocess,
        "run",
        lambda argv, **k: SimpleNamespace(stdout=answers.get(tuple(argv), ""), returncode=1),
    )
    monkeypatch.setattr(psutil, "sensors_battery", lambda: None)  # a desktop
    facts = environment.host_facts()
    assert facts["cpu_core_levels"] == {
        "levels": 1,
        "performance_cores": 4,
        "performance_logical_cores": 8,
        "efficiency_cores": None,
        "efficiency_logical_cores": None,
    }
    assert facts["power"] == {
        "source": None, "battery_percent": None, "low_power_mode": None, "pmset_power_mode": None
    }  # fmt: skip
    thermal = facts["thermal"]
    assert (thermal["thermal_warning_level"], thermal["performance_warning_level"]) == (0, None)
    assert thermal["cpu_speed_limit"] == 80
    assert thermal["notes"] == ["No performance warning level has been recorded"]


def test_without_sysctl_or_pmset_every_mac_fact_is_none(macos, monkeypatch):
    def timing_out(argv, **kwargs):
        raise subprocess.TimeoutExpired(argv, kwargs.get("timeout"))

    monkeypatch.setattr(subprocess, "run", timing_out)
    facts = environment.host_facts()
    assert set(facts["cpu_core_levels"].values()) == {None}
    assert facts["thermal"] is None
    assert facts["power"]["low_power_mode"] is None
    assert facts["power"]["source"] == "battery"  # psutil, not pmset


@pytest.mark.parametrize(
    ("line", "low_power"),
    [("lowpowermode         0", False), ("lowpowermode 1", True), ("powermode 0", False),
     ("powermode            1", True), ("powermode 2", False)],
)  # fmt: skip
def test_low_power_mode_from_either_line_pmset_prints(line, low_power):
    """pmset.m: "powermode [0,1,2]" (off, low, high) where High Power Mode exists, else
    "lowpowermode [0,1]"; only the settings in use count."""
    custom = "Battery Power:\n lowpowermode 1\n" if not low_power else ""
    output = f"System-wide power settings:\n{custom}Currently in use:\n sleep 1\n {line}\n"
    mode = macos_host.power_mode(output)
    assert mode["low_power_mode"] is low_power
    assert mode["pmset_power_mode"] == " ".join(line.split())


def test_linux_reads_the_battery_and_runs_no_mac_command(monkeypatch):
    calls: list[tuple] = []

    def no_command(argv, **kwargs):
        calls.append(tuple(argv))
        raise FileNotFoundError(argv[0])

    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setattr(subprocess, "run", no_command)
    monkeypatch.setattr(psutil, "sensors_battery", lambda: SimpleNamespace(
        percent=99.5, secsleft=-2, power_plugged=True))  # fmt: skip
    facts = environment.host_facts()
    assert facts["cpu_core_levels"] is None and facts["thermal"] is None
    assert facts["power"] == {
        "source": "AC", "battery_percent": 99.5, "low_power_mode": None, "pmset_power_mode": None
    }  # fmt: skip
    assert not [argv for argv in calls if argv[0] in ("sysctl", "pmset")]


def test_the_mac_selftest_shows_the_core_kinds_power_and_thermal_state(macos, monkeypatch):
    from trainbench.evidence import mac

    monkeypatch.setattr(psutil, "virtual_memory", lambda: SimpleNamespace(total=16 * 2**30))
    machine = mac.mac_facts()
    assert machine["cpu_core_levels"]["performance_cores"] == 6
    assert machine["cpu_core_levels"]["efficiency_cores"] == 4
    assert machine["power"]["source"] == "battery" and machine["power"]["low_power_mode"]
    assert machine["thermal"]["notes"][0] == "No thermal warning level has been recorded"


# -- thread counts that hold on a Mac (trainbench.launch.environment) -----------------------


def cell_spec(device: str, **cpu_settings) -> dict:
    config = tiny_config(devices=["cpu", "mps", "cuda"])
    config["device_settings"]["cpu"].update(cpu_settings)
    tbconfig.validate_config(config)
    return tbconfig.cell_spec(config, tbconfig.Cell("matmul", device, 1, 0))


@pytest.mark.parametrize(
    ("platform", "device", "threads"),
    [("darwin", "cpu-t1", "1"), ("darwin", "cpu-t2", "2"), ("darwin", "cpu", None),
     ("darwin", "mps", None), ("darwin", "cuda", None), ("linux", "cpu-t2", None)],
)  # fmt: skip
def test_a_thread_count_caps_accelerate_and_openmp_on_macos_alone(
    monkeypatch, platform, device, threads
):
    """On macOS the cell's thread count reaches Accelerate (VECLIB_MAXIMUM_THREADS) and
    every OpenMP runtime (OMP_NUM_THREADS) before torch loads; an inherited value never
    does; Linux, where torch.set_num_threads caps both, gets neither."""
    spec = cell_spec(device)
    monkeypatch.setattr(sys, "platform", platform)
    monkeypatch.setenv("VECLIB_MAXIMUM_THREADS", "16")  # left by a parent: removed
    cell = environment.cell_environment(spec)
    assert cell.variables.get("VECLIB_MAXIMUM_THREADS") == threads
    assert cell.variables.get("OMP_NUM_THREADS") == threads
    assert cell.overrides == {}
    expected = (
        {}
        if threads is None
        else dict.fromkeys(("VECLIB_MAXIMUM_THREADS", "OMP_NUM_THREADS"), threads)
    )
    assert cell.thread_caps["set_by_launcher"] == expected
    accelerate = cell.thread_caps["accelerate"]
    if platform == "linux":
        assert accelerate is None
    elif threads:
        assert accelerate == f"capped at {threads} threads by VECLIB_MAXIMUM_THREADS"
    else:
        assert accelerate == "its default thread count: VECLIB_MAXIMUM_THREADS unset"


def test_the_configs_env_wins_over_the_launchers_thread_variables(monkeypatch):
    spec = cell_spec("cpu-t2", env={"VECLIB_MAXIMUM_THREADS": "4"})
    monkeypatch.setattr(sys, "platform", "darwin")
    cell = environment.cell_environment(spec)
    assert (
        cell.variables["VECLIB_MAXIMUM_THREADS"] == "4" and cell.variables["OMP_NUM_THREADS"] == "2"
    )
    assert cell.overrides == {"VECLIB_MAXIMUM_THREADS": "4"}
    assert cell.thread_caps == {
        "threads": 2,
        "set_by_launcher": {"OMP_NUM_THREADS": "2"},
        "accelerate": "capped at 4 threads by VECLIB_MAXIMUM_THREADS",
    }


@pytest.mark.parametrize(("device", "veclib"), [("cpu-t2", "2"), ("cpu", None)])
def test_the_record_says_what_held_the_thread_count(macos, device, veclib):
    from trainbench.launch.launcher import build_record

    spec = cell_spec(device)
    cell = environment.cell_environment(spec)
    attempt = {"attempt": 1, "status": "ok", "child": {"status": "ok", "result": {}}}
    env = build_record(spec, [attempt], cell)["environment"]
    assert env["thread_caps"] == cell.thread_caps
    assert env["thread_caps"]["threads"] == (2 if veclib else None)
    assert env["behaviour_variables"].get("VECLIB_MAXIMUM_THREADS") == veclib
    assert env["cpu_core_levels"]["performance_cores"] == 6
