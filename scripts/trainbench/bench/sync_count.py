"""Device synchronizations per training step, counted: the harness's timed steps against
the bare loop's on the same parts (benchmarks/step_overhead.py).

A synchronization makes the host wait for the device; one inside a step serializes the
host's issue of the next step behind the device's work, a tax no per-step timing of
the harness may add. They are counted, not timed:

- **explicit** ones, by a counter patched over the calls that wait for the device:
  the harness's and the bare loop's own ``Device.synchronize`` (the CPU's is a no-op
  that is still counted: where the harness *would* wait on an accelerator), and on
  CUDA also ``torch.cuda.synchronize`` and ``Event``/``Stream.synchronize`` when
  called directly;
- **implicit** ones on CUDA (``.item()``, a device-to-host copy, ``nonzero``, a
  blocking stream wait), by ``torch.cuda.set_sync_debug_mode("warn")``: every
  synchronizing operation warns once; the warnings are counted (those raised inside an
  explicit call already counted are not counted twice). The CPU has no implicit
  synchronization: the device runs in the host's own thread.

Per step, not per block: a block of ``n`` steps and one of ``2n`` are counted on each
side, and the difference divided by ``n`` is the count per step; what is left is the
block's fixed cost at its edges (the region's two synchronizations, the bare loop's
two), reported apart. The harness's per-step count minus the bare loop's is what the
harness adds.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import torch

# torch's warning text for a synchronizing CUDA operation under set_sync_debug_mode.
SYNC_WARNING = "called a synchronizing CUDA operation"


@dataclass
class SyncTally:
    """Synchronizations seen while a :func:`counting_syncs` block was open."""

    explicit: int = 0
    implicit: int = 0
    calls: dict[str, int] = field(default_factory=dict)
    depth: int = 0  # inside a counted call (nested calls are the outer one's)

    @property
    def total(self) -> int:
        return self.explicit + self.implicit


def method_text(device_type: str) -> str:
    """How :func:`counting_syncs` counts on ``device_type`` (for the results JSON)."""
    explicit = (
        "explicit: calls of the device's synchronize() (trainbench.measure.devices), "
        "torch.cuda.synchronize, torch.cuda.Event.synchronize and "
        "torch.cuda.Stream.synchronize, each through a patched counter"
    )
    if device_type == "cuda":
        return (
            f"{explicit}; implicit: torch.cuda.set_sync_debug_mode('warn'), one warning "
            "per synchronizing operation (.item(), device-to-host copy, nonzero, stream "
            "wait), counted (warnings inside a counted explicit call left out). Per step: "
            "(count over 2n steps - count over n steps) / n, each side; the rest is the "
            "block's edges"
        )
    return (
        "explicit: calls of the device's synchronize() (trainbench.measure.devices; a no-op "
        f"on {device_type}, counted where an accelerator would wait), through a patched "
        f"counter; {device_type} has no implicit synchronization (the host runs the "
        "work). Per step: (count over 2n steps - count over n steps) / n, each side; "
        "the rest is the block's edges"
    )


def _patched(owner: object, name: str, tally: SyncTally, log: list) -> Callable[[], None]:
    """Wrap ``owner.name`` with a counter; returns the undo. A call made inside another
    counted call (the CUDA device's synchronize calls torch.cuda.synchronize) is the
    outer call's: counted once."""
    original = owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)
    key = f"{getattr(owner, '__name__', owner)}.{name}"

    def counted(*args, **kwargs):
        if tally.depth:
            return original(*args, **kwargs)
        seen, tally.depth = len(log), 1
        try:
            return original(*args, **kwargs)
        finally:
            tally.depth = 0
            del log[seen:]  # an explicit call's own sync warning is this count, not another
            tally.explicit += 1
            tally.calls[key] = tally.calls.get(key, 0) + 1

    setattr(owner, name, counted)
    return lambda: setattr(owner, name, original)


@contextlib.contextmanager
def counting_syncs(device: object, device_type: str) -> Iterator[SyncTally]:
    """Count every synchronization while open (see the module's docstring).
    ``device`` is the run's :class:`trainbench.measure.devices.Device`; its class's
    ``synchronize`` is patched (the harness's regions and the bare loop both call it)."""
    tally, log, undo = SyncTally(), [], []
    # The device class's synchronize, wherever it is defined in the class's MRO.
    owner = next(c for c in type(device).__mro__ if "synchronize" in c.__dict__)
    undo.append(_patched(owner, "synchronize", tally, log))
    cuda = device_type == "cuda"
    if cuda:
        undo.append(_patched(torch.cuda, "synchronize", tally, log))
        undo.append(_patched(torch.cuda.Event, "synchronize", tally, log))
        undo.append(_patched(torch.cuda.Stream, "synchronize", tally, log))
    mode = torch.cuda.get_sync_debug_mode() if cuda else None
    try:
        with warnings.catch_warnings():  # restores the filters and showwarning on exit
            warnings.simplefilter("always")  # every synchronizing call warns, not once
            shown = warnings.showwarning

            def keep(message, category, filename, lineno, file=None, line=None):
                if SYNC_WARNING in str(message):
                    log.append(str(message))
                else:
                    shown(message, category, filename, lineno, file, line)

            warnings.showwarning = keep
            if cuda:
                torch.cuda.set_sync_debug_mode("warn")
            try:
                yield tally
            finally:
                if cuda:
                    torch.cuda.set_sync_debug_mode(mode)
    finally:
        for step in reversed(undo):
            step()
        tally.implicit = len(log)


def per_step(run_block: Callable[[int], object], device, device_type: str, steps: int) -> dict:
    """Synchronizations of ``run_block(n)`` (a block of ``n`` steps of one side) per step
    and at the block's edges: blocks of ``steps`` and ``2 * steps``, each counted."""
    counts = {}
    for n in (steps, 2 * steps):
        with counting_syncs(device, device_type) as tally:
            run_block(n)
        counts[n] = tally
    small, large = counts[steps], counts[2 * steps]
    return {
        "per_step": (large.total - small.total) / steps,
        "implicit_per_step": (large.implicit - small.implicit) / steps,
        "per_block_edges": 2 * small.total - large.total,
        "counted": {
            str(n): {"explicit": t.explicit, "implicit": t.implicit, "calls": t.calls}
            for n, t in counts.items()
        },  # fmt: skip
    }


__all__ = ["SYNC_WARNING", "SyncTally", "counting_syncs", "method_text", "per_step"]
