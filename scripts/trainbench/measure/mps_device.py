"""The MPS device (Apple's GPU): every ``torch.mps`` call goes through :func:`_mps_fn`,
which returns ``None`` when the attribute does not exist in the installed torch, so the
path degrades to "not measured" instead of crashing. What it relies on, each with its
PyTorch source: docs/how-it-measures.md, "Apple's GPU (MPS)"."""

from __future__ import annotations

import os
import platform

import torch
from trainbench.common import mps_memory
from trainbench.measure.cpu_features import cpu_model_name
from trainbench.measure.device_base import (
    AmpPolicy,
    Device,
    MemoryReading,
    host_peak_rss_bytes,
    torch_version_tuple,
)


def _mps_fn(name: str):
    """torch.mps.<name> if this torch has it, else None (feature detection)."""
    module = getattr(torch, "mps", None)
    return getattr(module, name, None) if module is not None else None


def _mps_call(name: str, *args, default=None):
    fn = _mps_fn(name)
    if fn is None:
        return default
    try:
        return fn(*args)
    except (RuntimeError, AttributeError, TypeError):
        return default


REFUSED = object()  # what _accelerator_memory returns where the call is missing or fails


def _accelerator_memory(name: str, *args):
    """torch.accelerator.<name>(*args) where this torch has it and the current
    accelerator's allocator answers it; :data:`REFUSED` otherwise."""
    accelerator = getattr(torch, "accelerator", None)
    fn = getattr(accelerator, name, None)
    if fn is None:
        return REFUSED
    try:
        return fn(*args)
    except (RuntimeError, AssertionError, TypeError, ValueError):
        return REFUSED  # before pytorch#186748: "Allocator for mps is not a DeviceAllocator"


ALLOCATOR_PEAK_METHOD = (
    "torch.accelerator.max_memory_allocated after reset_peak_memory_stats: the MPS "
    "allocator's own peak of tensor memory (a device allocator since pytorch#186748)"
)
SAMPLED_PEAK_METHOD = (
    "sampled peak: max of torch.mps.current_allocated_memory() after forward, backward and "
    "optimizer step (this torch's MPS allocator has no peak statistics: a lower bound, "
    "spikes inside backward are missed)"
)


class MpsDevice(Device):
    backend = "mps"
    # Decided by reset_peak_memory: sampled inside the steps only where the allocator
    # keeps no peak of its own (torch before pytorch#186748).
    samples_memory_per_step = True

    def __init__(self, settings: dict | None = None):
        super().__init__(settings)
        self._sampled_peak: int | None = None
        self._allocator_peak = False
        self._fraction_in_force: float | None = None

    def availability(self) -> tuple[bool, str]:
        backend = getattr(torch.backends, "mps", None)
        if backend is None or not hasattr(backend, "is_built"):
            return False, f"this torch ({torch.__version__}) has no torch.backends.mps"
        if not backend.is_built():
            return False, (
                f"this torch build ({torch.__version__}) was built without MPS; "
                "MPS needs macOS on Apple silicon"
            )
        if not backend.is_available():
            return (
                False,
                "torch.backends.mps.is_available() is False: macOS < 12.3 or no Metal device",
            )
        return True, "MPS available"

    def facts(self) -> dict:
        return {
            "backend": "mps",
            "name": platform.machine() + " " + (platform.mac_ver()[0] or ""),
            "chip": cpu_model_name(),
            "recommended_max_memory_bytes": _mps_call("recommended_max_memory"),
            "macos": platform.mac_ver()[0] or None,
        }

    def synchronize(self) -> None:
        _mps_call("synchronize")

    def make_event(self):
        event_mod = _mps_fn("event")
        event_cls = getattr(event_mod, "Event", None) if event_mod is not None else None
        if event_cls is None:
            return None
        try:
            return event_cls(enable_timing=True)
        except (TypeError, RuntimeError):
            return None

    def apply_settings(self) -> dict:
        fraction = self.settings.get("memory_fraction")
        applied = None
        if fraction is not None and _mps_fn("set_per_process_memory_fraction") is not None:
            # Only report the fraction as in force when the call did not fail.
            refused = object()
            outcome = _mps_call("set_per_process_memory_fraction", float(fraction), default=refused)
            applied = None if outcome is refused else float(fraction)
        self._fraction_in_force = applied
        in_force = super().apply_settings()
        in_force.update(
            {
                "memory_fraction": applied,
                **self.watermarks_in_force(),
                "cpu_fallback_enabled": os.environ.get("PYTORCH_ENABLE_MPS_FALLBACK") == "1",
            }
        )
        return in_force

    def watermarks_in_force(self) -> dict:
        """The allocator's two ratios as they hold now, each with where it came from:
        set_per_process_memory_fraction replaces the environment's high ratio
        (trainbench.common.mps_memory)."""
        high, low = mps_memory.ratios_from(os.environ)
        high_source = (
            mps_memory.HIGH_VARIABLE if mps_memory.HIGH_VARIABLE in os.environ else "MPS default"
        )
        if self._fraction_in_force is not None:
            high, high_source = self._fraction_in_force, "set_per_process_memory_fraction"
        low_source = (
            mps_memory.LOW_VARIABLE if mps_memory.LOW_VARIABLE in os.environ else "MPS default"
        )
        return {
            "high_watermark_ratio": high,
            "high_watermark_source": high_source,
            "low_watermark_ratio": low,
            "low_watermark_source": low_source,
        }

    def _amp_policy(self, requested: str) -> AmpPolicy:
        if requested == "auto":
            requested = "fp16"
        dtype = "bfloat16" if requested == "bf16" else "float16"
        if dtype == "bfloat16":
            return AmpPolicy(
                True, dtype, False, "bf16 autocast on MPS (needs macOS 14); no GradScaler"
            )
        scaler_ok = torch_version_tuple() >= (2, 8)
        reason = (
            "fp16 autocast with GradScaler (MPS GradScaler works from torch 2.8)"
            if scaler_ok
            else "fp16 autocast without GradScaler: torch < 2.8 cannot scale MPS gradients"
        )
        return AmpPolicy(True, dtype, scaler_ok, reason)

    def reset_peak_memory(self) -> None:
        """Reset the allocator's peak where it keeps one (then the steps sample
        nothing), else start sampling afresh."""
        self._sampled_peak = None
        self.current_memory_bytes()  # the allocator's first use: it exists from here
        accelerator = _accelerator_memory("current_accelerator")
        on_mps = getattr(accelerator, "type", None) == "mps"
        stats = None
        if on_mps and _accelerator_memory("reset_peak_memory_stats") is not REFUSED:
            stats = _accelerator_memory("memory_stats")
        self._allocator_peak = isinstance(stats, dict) and "allocated_bytes.all.peak" in stats
        self.samples_memory_per_step = not self._allocator_peak

    def current_memory_bytes(self) -> int | None:
        value = _mps_call("current_allocated_memory")
        return int(value) if value is not None else None

    def sample_memory(self) -> None:
        value = self.current_memory_bytes()
        if value is not None and (self._sampled_peak is None or value > self._sampled_peak):
            self._sampled_peak = value

    def memory_reading(self, initial: int | None) -> MemoryReading:
        driver = _mps_call("driver_allocated_memory")
        peak = _accelerator_memory("max_memory_allocated") if self._allocator_peak else REFUSED
        allocator = isinstance(peak, int)
        return MemoryReading(
            initial,
            int(peak) if allocator else self._sampled_peak,
            ALLOCATOR_PEAK_METHOD if allocator else SAMPLED_PEAK_METHOD,
            {
                "driver_allocated_bytes_at_end": int(driver) if driver is not None else None,
                "recommended_max_memory_bytes": _mps_call("recommended_max_memory"),
                "limit_method": self.memory_limit_method(),
                "host_peak_rss_bytes": host_peak_rss_bytes(),
            },
        )

    def memory_limit_bytes(self) -> int | None:
        """The allocator's hard cap in force: the high ratio (the memory fraction where
        one was set) x recommended_max_memory(); with no cap (ratio 0.0) the recommended
        working set itself, past which unified memory pages."""
        value = _mps_call("recommended_max_memory")
        if value is None:
            return None
        high = self.watermarks_in_force()["high_watermark_ratio"]
        return int(value * high) if high > 0 else int(value)

    def memory_limit_method(self) -> str:
        marks = self.watermarks_in_force()
        if marks["high_watermark_ratio"] <= 0:
            return "no high watermark (ratio 0.0): torch.mps.recommended_max_memory()"
        return (
            f"the MPS allocator's cap: high watermark ratio {marks['high_watermark_ratio']:g} "
            f"({marks['high_watermark_source']}) x torch.mps.recommended_max_memory()"
        )

    def reserved_memory_bytes(self) -> int | None:
        """torch.mps.driver_allocated_memory(): every Metal allocation of the process,
        the allocator's cache included (grows where current_allocated_memory does not:
        the leaks of pytorch issues 164299 and 181213)."""
        value = _mps_call("driver_allocated_memory")
        return int(value) if value is not None else None

    def empty_cache(self) -> None:
        _mps_call("empty_cache")
