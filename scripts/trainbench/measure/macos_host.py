"""The machine's state beside its model, for every record: a Mac's performance and
efficiency cores (``sysctl``), its Low Power Mode and thermal state (``pmset``); on every
platform, the power source and battery charge (``psutil.sensors_battery``).

The ``sysctl`` and ``pmset`` commands run on macOS alone, each once per call and with a
short timeout; a key or line they do not print reads as None, never an error (an Intel
Mac or a macOS before 12 has no ``hw.perflevel1``; a desktop has no battery). The formats
are those of Apple's sources: ``sysctl`` prints ``name: value`` for each name it knows and
warns about the others (system_cmds, ``sysctl/sysctl.c``); ``pmset -g`` prints the
settings in use, Low Power Mode as ``lowpowermode 0|1`` or, where High Power Mode exists,
``powermode 0|1|2`` (0 off, 1 low, 2 high); ``pmset -g therm`` prints ``Thermal Warning
Level = N`` and ``Performance Warning Level = N`` or a note that none has been recorded,
then ``CPU_Speed_Limit = N`` and its siblings where the CPU's power is limited
(PowerManagement, ``pmset/pmset.m``). No Mac ran this module.
"""

from __future__ import annotations

import re
import subprocess
import sys

COMMAND_TIMEOUT_S = 2.0
# sysctl name -> the key recorded; perflevel0 is the fastest kind of core.
CORE_LEVEL_KEYS = {
    "hw.nperflevels": "levels",
    "hw.perflevel0.physicalcpu": "performance_cores",
    "hw.perflevel0.logicalcpu": "performance_logical_cores",
    "hw.perflevel1.physicalcpu": "efficiency_cores",
    "hw.perflevel1.logicalcpu": "efficiency_logical_cores",
}
POWER_MODE_LINE = re.compile(r"^\s*(lowpowermode|powermode)\s+(\d+)\b", re.MULTILINE)
THERMAL_LINES = {
    "thermal_warning_level": re.compile(r"Thermal Warning Level\s*=\s*(\d+)"),
    "performance_warning_level": re.compile(r"Performance Warning Level\s*=\s*(\d+)"),
    "cpu_speed_limit": re.compile(r"CPU_Speed_Limit\s*=\s*(\d+)"),
}
LOW_POWER = 1  # the value of lowpowermode and of powermode that means Low Power Mode


def _stdout(argv: list[str]) -> str | None:
    """What ``argv`` printed (whatever its exit status: sysctl counts unknown names in
    it), or None when it could not run or timed out."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout


def _integer(text: str) -> int | None:
    try:
        return int(text.strip())
    except ValueError:
        return None


def core_levels() -> dict | None:
    """The kinds of cores (``hw.nperflevels``) and each one's physical and logical count:
    performance cores (perflevel0; every core where there is one kind) and efficiency
    cores (perflevel1). None off macOS; a key sysctl does not know is None."""
    if sys.platform != "darwin":
        return None
    values: dict[str, int | None] = dict.fromkeys(CORE_LEVEL_KEYS.values())
    for line in (_stdout(["sysctl", *CORE_LEVEL_KEYS]) or "").splitlines():
        name, _, value = line.partition(":")
        if name.strip() in CORE_LEVEL_KEYS:
            values[CORE_LEVEL_KEYS[name.strip()]] = _integer(value)
    return values


def power_mode(pmset_output: str | None) -> dict:
    """Low Power Mode from ``pmset -g``'s settings in use: ``low_power_mode`` (None: no
    such line) and the line as printed (``pmset_power_mode``, e.g. "powermode 2")."""
    text = pmset_output or ""
    in_use = text.split("Currently in use:", 1)[-1]
    match = POWER_MODE_LINE.search(in_use)
    if match is None:
        return {"low_power_mode": None, "pmset_power_mode": None}
    return {
        "low_power_mode": int(match[2]) == LOW_POWER,
        "pmset_power_mode": f"{match[1]} {match[2]}",
    }


def _battery() -> tuple[str | None, float | None]:
    """("AC" or "battery", the charge in percent); None where psutil cannot tell (no
    battery: a desktop, a server)."""
    import psutil

    try:
        battery = psutil.sensors_battery()
    except (AttributeError, OSError, RuntimeError, ValueError):
        return None, None
    if battery is None:
        return None, None
    plugged = battery.power_plugged
    source = None if plugged is None else ("AC" if plugged else "battery")
    percent = None if battery.percent is None else round(float(battery.percent), 1)
    return source, percent


def power_facts() -> dict:
    """The power source and battery charge (every platform), and on macOS Low Power Mode
    (None elsewhere)."""
    source, percent = _battery()
    mode = power_mode(_stdout(["pmset", "-g"]) if sys.platform == "darwin" else None)
    return {"source": source, "battery_percent": percent, **mode}


def thermal_state(pmset_therm_output: str) -> dict:
    """``pmset -g therm`` parsed: the thermal and performance warning levels and the CPU
    speed limit in percent (None where not printed), and pmset's notes (such as "No
    thermal warning level has been recorded")."""
    facts: dict = {
        key: _integer(match[1]) if (match := pattern.search(pmset_therm_output)) else None
        for key, pattern in THERMAL_LINES.items()
    }
    facts["notes"] = [
        line.strip().removeprefix("Note:").strip()
        for line in pmset_therm_output.splitlines()
        if line.strip().startswith("Note:")
    ]
    return facts


def thermal_facts() -> dict | None:
    """The thermal state (:func:`thermal_state`); None off macOS or where pmset did not run."""
    if sys.platform != "darwin":
        return None
    output = _stdout(["pmset", "-g", "therm"])
    return None if output is None else thermal_state(output)
