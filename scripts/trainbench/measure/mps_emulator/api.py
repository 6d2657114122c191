"""``torch.mps``, ``torch.backends.mps`` and the accelerator API of the emulated device,
as the installed torch has them (every function patched over its module attribute, so
code that feature-detects them finds what a Mac with this torch would give it).

* Memory: ``current_allocated_memory``, ``driver_allocated_memory``,
  ``recommended_max_memory``, ``set_per_process_memory_fraction``, ``empty_cache``
  answer from the emulated allocator. ``torch.accelerator``'s memory statistics answer
  only where the installed torch's MPS allocator implements the device-allocator
  interface (pytorch#186748, June 2026: torch 2.13 and later); before it they raise as
  MPS did ("Allocator for mps is not a DeviceAllocator").
* Events (``torch/mps/event.py``, ``aten/src/ATen/mps/MPSEvent.mm``): in torch 2.13 an
  event's time is the host's clock in a Metal completion callback, and
  ``elapsed_time`` refuses an end that is not later than its start ("End event N was not
  recorded after start event M", pytorch#196395). The emulator stamps each recorded
  event with the host time plus a callback delay drawn (seeded) from 0 to
  ``event_jitter_s``, and stamps every ``reverse_every``-th event of a region 1 us before
  the one recorded ahead of it: the reversed pair that 2.13 allows, made certain, so
  code that reads events must survive it.
* Synchronizations (``torch.mps.synchronize``, ``torch.accelerator.synchronize``, an
  event's ``synchronize`` or ``elapsed_time``) are counted (:class:`.dispatch.SyncTally`).
* CUDA: ``torch.cuda.is_available()`` is False and anything that initialises CUDA
  raises the emulator's CUDA rule.
"""

from __future__ import annotations

import itertools
import random
import time
from collections.abc import Callable

import torch
from trainbench.measure.mps_emulator import rules
from trainbench.measure.mps_emulator.dispatch import (
    MpsDispatch,
    attention_for_device_tensors,
    factory_for_device_tensors,
    rebuild_on_device,
)

NOT_A_DEVICE_ALLOCATOR = "Allocator for mps is not a DeviceAllocator."
# The first release whose MPS allocator is a c10::DeviceAllocator (pytorch#186748).
DEVICE_ALLOCATOR_SINCE = (2, 13)


def torch_version() -> tuple[int, int]:
    major, minor = torch.__version__.split("+")[0].split(".")[:2]
    return int(major), int(minor)


class EmulatedEvents:
    """The ``torch.mps.Event`` class of the emulated device."""

    def __init__(self, mode: MpsDispatch, jitter_s: float, seed: int, reverse_every: int):
        self.mode, self.jitter_ns = mode, int(jitter_s * 1e9)
        self.reverse_every = reverse_every
        self.last_stamp = 0
        self.random = random.Random(seed)
        self.ids = itertools.count(1)
        self.reversed_pairs = 0
        self.recorded = 0
        self.event_class = self._make_class()

    def _make_class(self) -> type:
        events = self

        class Event:
            """torch.mps.Event on the emulated device (host timestamps, as in 2.13)."""

            def __init__(self, enable_timing: bool = False) -> None:
                self._id, self._timing, self._stamp = next(events.ids), enable_timing, 0

            def record(self) -> None:
                events.recorded += 1
                events.mode.syncs.event_recorded()
                delay = events.random.randint(0, events.jitter_ns) if events.jitter_ns else 0
                self._stamp = time.perf_counter_ns() + delay
                every = events.reverse_every
                if every and events.recorded % every == 0 and events.last_stamp:
                    self._stamp = events.last_stamp - 1000  # a reversed pair
                events.last_stamp = self._stamp

            def wait(self) -> None:
                """One stream, run in order on the host: nothing to wait for."""

            def query(self) -> bool:
                return True

            def synchronize(self) -> None:
                events.mode.syncs.wait("an event's synchronize()", explicit=True)

            def elapsed_time(self, end_event: Event) -> float:
                events.mode.syncs.wait("an event's elapsed_time()", explicit=True)
                if not (self._timing and end_event._timing) or not (
                    self._stamp and end_event._stamp
                ):
                    raise RuntimeError("Events were not created with argument 'enable_timing=True'")
                if end_event._stamp <= self._stamp:
                    events.reversed_pairs += 1
                    raise rules.broken(
                        rules.EmulatedMpsRuntimeError,
                        rules.EVENT_ORDER,
                        f"End event {end_event._id} was not recorded after start event "
                        f"{self._id} (host timestamps from Metal completion callbacks, "
                        "pytorch#196395)",
                    )
                return (end_event._stamp - self._stamp) / 1e6

        return Event


def _patch(target, name: str, value) -> None:
    """Replace ``target.name`` for the rest of the process (the emulator is final)."""
    setattr(target, name, value)


def patch_torch(mode: MpsDispatch, events: EmulatedEvents, allocator_stats: bool) -> None:
    """Point torch's MPS, accelerator and CUDA entry points at the emulated device."""
    alloc, syncs = mode.allocator, mode.syncs

    def synchronize(*_args) -> None:
        syncs.wait("torch.mps.synchronize()", explicit=True)

    def queried(value: Callable[[], int]) -> Callable[[], int]:
        def read() -> int:
            alloc.initialize()
            return int(value())

        return read

    def set_fraction(fraction) -> None:
        alloc.set_memory_fraction(fraction)

    mps = torch.mps
    for name, value in {
        "synchronize": synchronize,
        "current_allocated_memory": queried(lambda: alloc.allocated),
        "driver_allocated_memory": queried(lambda: alloc.reserved),
        "recommended_max_memory": queried(lambda: alloc.recommended_max_bytes),
        "set_per_process_memory_fraction": set_fraction,
        "empty_cache": alloc.empty_cache,
        "is_available": lambda: True,
        "device_count": lambda: 1,
        # Emulated ops draw from the CPU's generator: MPS's stream is the CPU's here.
        "manual_seed": lambda seed: torch.default_generator.manual_seed(int(seed)),
        "seed": lambda: torch.default_generator.seed(),
        "get_rng_state": lambda *_a: torch.get_rng_state(),
        "set_rng_state": lambda state, *_a: torch.set_rng_state(state),
        "Event": events.event_class,
    }.items():
        _patch(mps, name, value)
    _patch(mps.event, "Event", events.event_class)
    _patch(torch.backends.mps, "is_built", lambda: True)
    _patch(torch.backends.mps, "is_available", lambda: True)
    _patch(torch.accelerator, "synchronize", synchronize)
    torch.serialization.add_safe_globals([rebuild_on_device])  # torch.load(weights_only)
    for name in ("tensor", "as_tensor"):
        _patch(torch, name, factory_for_device_tensors(getattr(torch, name)))
    functional = torch.nn.functional
    attention = attention_for_device_tensors(functional.scaled_dot_product_attention)
    _patch(functional, "scaled_dot_product_attention", attention)
    _patch_device_allocator(alloc, allocator_stats)
    _patch_cuda()


def _patch_device_allocator(alloc, allocator_stats: bool) -> None:
    """torch.accelerator's memory statistics read torch._C's three functions."""

    def stats(*_args) -> dict:
        if not allocator_stats:
            raise RuntimeError(NOT_A_DEVICE_ALLOCATOR)
        alloc.initialize()
        return {
            "allocated_bytes": {"all": {"current": alloc.allocated, "peak": alloc.peak}},
            "reserved_bytes": {"all": {"current": alloc.reserved, "peak": alloc.peak_reserved}},
        }

    def reset_peak(*_args) -> None:
        if not allocator_stats:
            raise RuntimeError(NOT_A_DEVICE_ALLOCATOR)
        alloc.reset_peak()

    _patch(torch._C, "_accelerator_isAllocatorInitialized", lambda: True)
    _patch(torch._C, "_accelerator_getDeviceStats", stats)
    _patch(torch._C, "_accelerator_resetPeakStats", reset_peak)


def _patch_cuda() -> None:
    def refuse(*_args, **_kwargs):
        raise rules.broken(
            rules.EmulatedMpsRuntimeError, rules.CUDA_CALL, "a torch.cuda call initialised CUDA"
        )

    _patch(torch.cuda, "is_available", lambda: False)
    _patch(torch.cuda, "_lazy_init", refuse)
