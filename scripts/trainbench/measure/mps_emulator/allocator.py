"""The emulated MPS allocator: what it counts and what it refuses, after PyTorch's
``aten/src/ATen/mps/MPSAllocator.mm`` (torch 2.13).

* Initialised on first use (an allocation or a memory query): it reads and checks the
  watermark pair as :mod:`trainbench.common.mps_memory` states, raising MPS's own
  message ("invalid low watermark ratio 1.4") until the pair is valid.
* ``set_per_process_memory_fraction(f)`` replaces the high ratio (0 to 2; it is not
  checked against the low one).
* An allocation past ``high ratio x recommended_max_memory()`` raises MPS's own
  out-of-memory error (a plain RuntimeError, not torch.OutOfMemoryError).
* Freed blocks stay cached (the driver's figure) until ``empty_cache()`` or until the
  total crosses the low watermark, where the real allocator starts collecting them.

Live bytes are counted per storage of every tensor on the emulated device (views share
their base's); the peak is the largest count since the last reset. None of this is the
speed or the true footprint of Metal buffers (no alignment to Metal's page sizes, no
heaps): it is the arithmetic that decides whether a run is refused.
"""

from __future__ import annotations

import os
import weakref
from dataclasses import dataclass, field

from trainbench.common.mps_memory import (
    HIGH_DEFAULT,
    HIGH_VARIABLE,
    LOW_DEFAULT_UNIFIED,
    ratios_from,
    watermark_problem,
)
from trainbench.measure.mps_emulator import rules


def format_size(size: float) -> str:
    """c10::CachingAllocator::format_size."""
    if size <= 1024:
        return f"{int(size)} bytes"
    if size <= 1048576:
        return f"{size / 1024:.2f} KiB"
    if size <= 1073741824:
        return f"{size / 1048576:.2f} MiB"
    return f"{size / 1073741824:.2f} GiB"


def check_watermarks(high: float, low: float) -> None:
    """MPSAllocator's checks, with its messages (RuntimeError, as TORCH_CHECK raises)."""
    problem = watermark_problem(high, low)
    if problem:
        raise rules.broken(rules.EmulatedMpsRuntimeError, rules.WATERMARK, problem)


@dataclass
class EmulatedAllocator:
    recommended_max_bytes: int
    initialized: bool = False
    high_ratio: float = HIGH_DEFAULT
    low_ratio: float = LOW_DEFAULT_UNIFIED
    high_source: str = "default"
    allocated: int = 0
    cached: int = 0
    peak: int = 0
    peak_reserved: int = 0
    low_watermark_collections: int = 0
    refused: list = field(default_factory=list)
    _live: dict = field(default_factory=dict)  # storage key -> [bytes, wrappers]

    def initialize(self) -> None:
        """First use: the environment's ratios, checked (raises as MPS does)."""
        if self.initialized:
            return
        high, low = ratios_from(os.environ)
        check_watermarks(high, low)
        self.high_ratio, self.low_ratio = high, low
        self.high_source = HIGH_VARIABLE if HIGH_VARIABLE in os.environ else "default"
        self.initialized = True

    def set_memory_fraction(self, fraction: float) -> None:
        """torch.mps.set_per_process_memory_fraction: the high ratio, replaced."""
        if not isinstance(fraction, float):
            raise TypeError("Invalid type for fraction argument, must be `float`")
        if fraction < 0 or fraction > 2:
            raise ValueError(f"Invalid fraction value: {fraction}. Allowed range: 0~2")
        self.initialize()
        self.high_ratio, self.high_source = fraction, "set_per_process_memory_fraction"

    def max_allowed(self) -> int | None:
        if self.high_ratio == 0.0:
            return None
        return int(self.high_ratio * self.recommended_max_bytes)

    def low_limit(self) -> int | None:
        return None if self.low_ratio == 0.0 else int(self.low_ratio * self.recommended_max_bytes)

    @property
    def reserved(self) -> int:
        return self.allocated + self.cached

    def track(self, elem) -> None:
        """Count the storage of ``elem`` (the CPU tensor inside a device tensor) while
        any such tensor of it lives; refuse it past the high watermark. (The weak
        reference is to ``elem``: one on the device tensor would stop
        ``torch.utils.swap_tensors``, which ``Module.to`` uses for subclasses.)"""
        self.initialize()
        storage = elem.untyped_storage()
        key = (storage.data_ptr(), storage.nbytes())
        entry = self._live.get(key)
        if entry is None:
            self._allocate(key[1])
            entry = self._live[key] = [key[1], 0]
        entry[1] += 1
        weakref.finalize(elem, self._release, key)

    def _allocate(self, size: int) -> None:
        reuse = min(self.cached, size)
        limit = self.max_allowed()
        if limit is not None and self.reserved - reuse + size > limit:
            self.refused.append(size)
            other = 0
            raise rules.broken(
                rules.EmulatedMpsRuntimeError,
                rules.OUT_OF_MEMORY,
                f"MPS backend out of memory (MPS allocated: {format_size(self.reserved)}, "
                f"other allocations: {format_size(other)}, max allowed: "
                f"{format_size(limit)}). Tried to allocate {format_size(size)} on private "
                "pool. Use PYTORCH_MPS_HIGH_WATERMARK_RATIO=0.0 to disable upper limit for "
                "memory allocations (may cause system failure).",
            )
        self.cached -= reuse
        self.allocated += size
        low = self.low_limit()
        if low is not None and self.reserved > low and self.cached:
            self.cached = 0  # the allocator collects its cached blocks past the low watermark
            self.low_watermark_collections += 1
        self.peak = max(self.peak, self.allocated)
        self.peak_reserved = max(self.peak_reserved, self.reserved)

    def _release(self, key) -> None:
        entry = self._live.get(key)
        if entry is None:
            return
        entry[1] -= 1
        if entry[1] <= 0:
            del self._live[key]
            self.allocated -= entry[0]
            self.cached += entry[0]

    def empty_cache(self) -> None:
        self.cached = 0

    def reset_peak(self) -> None:
        self.peak, self.peak_reserved = self.allocated, self.reserved

    def facts(self) -> dict:
        return {
            "recommended_max_bytes": self.recommended_max_bytes,
            "high_watermark_ratio": self.high_ratio,
            "high_watermark_source": self.high_source,
            "low_watermark_ratio": self.low_ratio,
            "peak_allocated_bytes": self.peak,
            "peak_reserved_bytes": self.peak_reserved,
            "low_watermark_collections": self.low_watermark_collections,
            "refused_allocations": len(self.refused),
        }
