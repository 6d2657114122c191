"""The energy counters an :class:`~.energy.EnergyTracker` reads: each :class:`Source`
a group of domains read together at every region edge, or the reason each cannot be
read. Domains, by backend:

========  ===================================================  ======================
domain    counter                                              cells
========  ===================================================  ======================
gpu       NVML ``nvmlDeviceGetTotalEnergyConsumption`` (mJ,    cuda (the cell's GPU)
          since driver load; Volta or newer), ``pynvml`` from
          the ``nvidia-ml-py`` package
cpu       Linux RAPL: ``/sys/class/powercap/intel-rapl:N``     cpu, cuda (Linux)
          package zones, ``energy_uj`` (µJ), wrap-around at
          ``max_energy_range_uj``; macOS: IOReport CPU total
dram      RAPL ``dram`` subzones; macOS: IOReport DRAM         cpu, cuda, mps
ane       IOReport Apple Neural Engine                         mps
========  ===================================================  ======================

On macOS every domain comes from IOReport through the optional ``zeus-apple-silicon``
package (extra ``apple``; no sudo), feature-detected and never imported unconditionally:
cpu, gpu, ane and dram for MPS cells, cpu and dram for CPU cells.

**Why not zeus.** ``zeus==0.16.0`` resolves beside the pinned set (``pip install
--dry-run`` would add amdsmi, httpx, httpcore, tyro, typeguard, docstring-parser,
nvidia-ml-py and zeus itself, ~9 MB), but its wheel also installs top-level ``tests``,
``docs``, ``examples`` and ``zeusd`` packages into site-packages, ``import
zeus.monitor`` takes ~1.5 s (it imports pandas and scikit-learn's metrics), and on a
machine without counters ``ZeusMonitor`` returns an empty GPU dict and ``None`` CPU
energy with no reason — the reasons, the short-window rule and the wrap-around would
have to be re-derived here anyway. So this module uses the building blocks directly:
``nvidia-ml-py`` (pure Python, one ``pynvml.py`` over ctypes: imports in milliseconds
and raises ``NVMLError_LibraryNotFound`` only at ``nvmlInit`` where there is no driver,
so it is a base dependency), RAPL files read here, and ``zeus-apple-silicon`` as the
optional ``apple`` extra — the very packages zeus itself uses for these counters.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

POWERCAP = Path("/sys/class/powercap")
# RAPL ranges are 65-262 kJ: even at 1 kW a zone needs > 60 s to wrap, so a read every
# 60 s (besides the region edges) never lets one wrap twice unseen.
RAPL_POLL_SECONDS = 60.0
APPLE_FIELDS = {"cpu": "cpu_total_mj", "gpu": "gpu_mj", "ane": "ane_mj", "dram": "dram_mj"}
NO_APPLE_EXTRA = (
    "macOS without the `apple` extra (in the clone: .venv/bin/pip install -e '.[apple]')"
)


@dataclass
class Source:
    """Counters read together at each edge: ``read()`` gives the cumulative joules of
    every readable domain; ``methods`` says how each is read, ``unavailable`` why the
    others cannot be; ``state()`` (NVML only) the GPU's temperature and power limit."""

    methods: dict[str, str]
    unavailable: dict[str, str]
    read: Callable[[], dict[str, float]] = dict
    close: Callable[[], None] = lambda: None
    state: Callable[[], dict] | None = None


def unavailable_source(names: Sequence[str], reason: str) -> Source:
    return Source({}, dict.fromkeys(names, reason))


# ----------------------------------------------------------------------------- RAPL


@dataclass
class RaplZone:
    """One powercap zone, accumulated across wrap-arounds of its counter."""

    path: Path
    max_uj: int
    last_uj: int
    total_uj: int = 0

    @classmethod
    def open(cls, path: Path) -> RaplZone:
        max_uj = int((path / "max_energy_range_uj").read_text())
        return cls(path, max_uj, int((path / "energy_uj").read_text()))

    def update(self) -> None:
        """Add the energy since the last read; a smaller value means the counter wrapped
        past ``max_energy_range_uj`` (once: reads are at most RAPL_POLL_SECONDS apart)."""
        raw = int((self.path / "energy_uj").read_text())
        delta = raw - self.last_uj
        self.total_uj += delta if delta >= 0 else delta + self.max_uj
        self.last_uj = raw


class RaplReader:
    """Every RAPL zone of a cell, read under one lock by the edges and by a daemon
    thread every ``poll_seconds`` (so no zone wraps twice between two reads)."""

    def __init__(self, zones: Mapping[str, list[RaplZone]], poll_seconds: float | None):
        self.zones = {name: list(z) for name, z in zones.items()}
        self.lock = threading.Lock()
        self.stopped = threading.Event()
        self.thread = None
        if poll_seconds:
            self.thread = threading.Thread(target=self._poll, args=(poll_seconds,), daemon=True)
            self.thread.start()

    def _poll(self, seconds: float) -> None:
        while not self.stopped.wait(seconds):
            with contextlib.suppress(Exception):  # the next edge's read reports it
                self.read()

    def read(self) -> dict[str, float]:
        with self.lock:
            for zones in self.zones.values():
                for zone in zones:
                    zone.update()
            return {n: sum(z.total_uj for z in zones) / 1e6 for n, zones in self.zones.items()}

    def close(self) -> None:
        self.stopped.set()


def _zone_name(path: Path) -> str:
    try:
        return (path / "name").read_text().strip()
    except OSError:
        return ""


def _rapl_zones(root: Path) -> dict[str, list[Path]]:
    """Package zones (cpu) and their dram subzones; psys, core and uncore are left out
    (the platform, or parts of a package)."""
    found: dict[str, list[Path]] = {"cpu": [], "dram": []}
    for top in sorted(root.glob("intel-rapl:*")):
        if top.name.count(":") != 1:
            continue
        if _zone_name(top).startswith("package"):
            found["cpu"].append(top)
        elif _zone_name(top) == "dram":
            found["dram"].append(top)
        found["dram"] += [s for s in sorted(top.glob(f"{top.name}:*")) if _zone_name(s) == "dram"]
    return found


def _open_error(error: OSError, path: Path) -> str:
    if isinstance(error, PermissionError):
        return (
            f"RAPL files not readable (permission): {path}/energy_uj is root-only on "
            "kernels patched for PLATYPUS (CVE-2020-8694); grant read access to measure"
        )
    return f"RAPL files not readable: {type(error).__name__}: {error}"


def rapl_source(root: Path | None = None, poll_seconds: float | None = RAPL_POLL_SECONDS) -> Source:
    """cpu (package zones) and dram from Linux RAPL under ``root`` (default
    :data:`POWERCAP`); each unreadable one with its reason."""
    root = POWERCAP if root is None else Path(root)
    if not root.is_dir():
        return unavailable_source(
            ("cpu", "dram"), f"no {root} (no RAPL here: a VM or container without powercap)"
        )
    zones: dict[str, list[RaplZone]] = {}
    methods, missing = {}, {}
    for name, paths in _rapl_zones(root).items():
        if not paths:
            missing[name] = f"no RAPL {'package' if name == 'cpu' else name} zone in {root}"
            continue
        try:
            zones[name] = [RaplZone.open(p) for p in paths]
        except OSError as error:
            missing[name] = _open_error(error, paths[0])
            continue
        methods[name] = (
            f"Linux RAPL powercap energy_uj (µJ) of {', '.join(p.name for p in paths)}, "
            f"summed; wrap-around at max_energy_range_uj; read at the region edges and every "
            f"{poll_seconds or 0:g} s by a daemon thread"
        )
    if not zones:
        return Source({}, missing)
    reader = RaplReader(zones, poll_seconds)
    return Source(methods, missing, reader.read, reader.close)


# ----------------------------------------------------------------------------- NVML


def nvml_index(device: Any) -> tuple[int, str]:
    """The cell's GPU as NVML numbers it (CUDA_VISIBLE_DEVICES may renumber)."""
    index = int(getattr(device, "settings", {}).get("device_index", 0))
    try:
        import torch

        mapped = torch.cuda._get_nvml_device_index(torch.device("cuda", index))
        return int(mapped), "torch.cuda._get_nvml_device_index (CUDA_VISIBLE_DEVICES applied)"
    except Exception:
        return index, "the CUDA index (torch's NVML mapping was not available)"


def _nvml_reason(error: Exception) -> str:
    text = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
    if "not supported" in str(error).lower():
        return f"NVML energy counter not supported on this GPU (needs Volta or newer): {text}"
    return f"NVML not available: {text}"


def _nvml_state(nvml: Any, handle: Any) -> dict:
    """Temperature (°C), enforced power limit and the driver's power reading (W)."""
    state: dict[str, Any] = {}
    reads = {
        "temperature_c": lambda: nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU),
        "power_limit_w": lambda: nvml.nvmlDeviceGetEnforcedPowerLimit(handle) / 1000.0,
        "power_w": lambda: nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0,
    }
    for key, read in reads.items():
        try:
            state[key] = float(read())
        except Exception as error:
            state[key] = None
            state.setdefault("errors", {})[key] = _nvml_reason(error)
    return state


def nvml_source(device: Any) -> Source:
    """gpu from NVML's total-energy counter of the cell's GPU."""
    try:
        nvml = importlib.import_module("pynvml")
    except ImportError as error:
        return unavailable_source(("gpu",), f"NVML not available: {error} (nvidia-ml-py)")
    index, how = nvml_index(device)
    try:
        nvml.nvmlInit()
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        nvml.nvmlDeviceGetTotalEnergyConsumption(handle)
    except Exception as error:
        return unavailable_source(("gpu",), _nvml_reason(error))
    method = (
        f"NVML nvmlDeviceGetTotalEnergyConsumption (mJ since driver load) of NVML GPU "
        f"{index} ({how}); updated about every 100 ms"
    )
    return Source(
        {"gpu": method},
        {},
        lambda: {"gpu": nvml.nvmlDeviceGetTotalEnergyConsumption(handle) / 1000.0},
        state=lambda: _nvml_state(nvml, handle),
    )


# ----------------------------------------------------------------------------- IOReport


def apple_source(names: Sequence[str]) -> Source:
    """Apple Silicon domains from IOReport through zeus-apple-silicon (no sudo)."""
    try:
        module = importlib.import_module("zeus_apple_silicon")
    except ImportError:
        return unavailable_source(names, NO_APPLE_EXTRA)
    try:
        monitor = module.AppleEnergyMonitor()
        first = monitor.get_cumulative_energy()
    except Exception as error:
        return unavailable_source(names, f"IOReport not available: {type(error).__name__}: {error}")
    fields = {
        n: APPLE_FIELDS[n] for n in names if getattr(first, APPLE_FIELDS[n], None) is not None
    }
    missing = {
        n: f"IOReport reports no {APPLE_FIELDS[n]} on this chip" for n in names if n not in fields
    }
    methods = {
        n: f"IOReport energy model via zeus-apple-silicon AppleEnergyMonitor."
        f"get_cumulative_energy().{attr} (mJ)"
        for n, attr in fields.items()
    }

    def read() -> dict[str, float]:
        metrics = monitor.get_cumulative_energy()
        return {n: float(getattr(metrics, attr)) / 1000.0 for n, attr in fields.items()}

    return Source(methods, missing, read)


def open_sources(device: Any, platform: str | None = None) -> list[Source]:
    """The counters of a cell's domains on this machine (see the module docstring)."""
    platform = platform or sys.platform
    backend = getattr(device, "backend", "cpu")
    if platform == "darwin":
        return [
            apple_source(("cpu", "gpu", "ane", "dram") if backend == "mps" else ("cpu", "dram"))
        ]
    if platform.startswith("linux"):
        sources = [rapl_source()]
    else:
        sources = [unavailable_source(("cpu", "dram"), f"no energy counter read on {platform}")]
    if backend == "cuda":
        sources.append(nvml_source(device))
    return sources
