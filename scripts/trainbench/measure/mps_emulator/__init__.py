"""An emulated Apple GPU (MPS) for any machine: a cell runs its real code path on a
device that says ``mps:0`` and is held to MPS's rules, while every op computes on the CPU.

It answers "would this run on MPS?", never "how fast": no figure it yields is an MPS
measurement. What it holds a cell to (each with its PyTorch source, in the modules):

* the device's tensors themselves (:mod:`.dispatch`): no float64 or complex128 device
  tensor, created, cast or copied; no cast to float64 in a copy out of the device; no
  pinned memory; no CUDA call; one device per op; and every host wait counted;
* the allocator (:mod:`.allocator`): the watermark pair read and checked at first use as
  MPS does, the memory fraction replacing the high ratio, MPS's out-of-memory error past
  it, a peak that is the allocator's own;
* the API of the installed torch (:mod:`.api`): ``torch.mps``'s memory functions and
  events (host timestamps that can come out reversed, as 2.13's do), the accelerator's
  memory statistics only where that torch's MPS allocator has them.

What it cannot show: speed and memory bandwidth; Metal's kernels and their numerics
(fp16 sums, fast-math transcendentals: the canary and parity here compare CPU kernels);
ops MPS lacks (``NotImplementedError`` for the 'MPS device', and the CPU fallback with
``PYTORCH_ENABLE_MPS_FALLBACK``): every ATen op runs here; MPSGraph's compile per shape;
unified memory under pressure (paging, swap) and Metal's allocation granularity;
process crashes inside Metal or MPSGraph (``LLVM ERROR``, ``MTLReportFailure``); MPS's
own random-number streams; differences between macOS releases (bf16 needs macOS 14).

Installing it is process-wide and final (:mod:`.native`): a cell's process does it first
thing, when its spec carries ``mps_emulator`` (``make mps-ready``, the emulated tests).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import psutil
import torch
from trainbench.measure.mps_emulator import api, native
from trainbench.measure.mps_emulator.allocator import EmulatedAllocator
from trainbench.measure.mps_emulator.dispatch import MpsDispatch, MpsTensor
from trainbench.measure.mps_emulator.rules import EmulatedMpsError

# A Mac's recommendedMaxWorkingSetSize is about three quarters of its unified memory.
RECOMMENDED_SHARE = 0.75
DEFAULT_EVENT_JITTER_S = 0.0
DEFAULT_REVERSE_EVERY = 7

WHAT_IT_IS = (
    "MPS emulator: every op computed on the CPU, held to MPS's rules (no float64 on the "
    "device, watermarks, events and memory APIs of this torch); not an MPS measurement"
)


@dataclass
class MpsEmulator:
    mode: MpsDispatch
    events: api.EmulatedEvents
    how: str
    options: dict
    facts: dict = field(default_factory=dict)

    def refresh(self) -> dict:
        """The emulator's facts now, in the same dict (a record holding it sees them)."""
        self.facts.update(
            {
                "what": WHAT_IT_IS,
                "device_guard": self.how,
                "options": self.options,
                "torch": torch.__version__,
                "ops": self.mode.ops,
                "allocator": self.mode.allocator.facts(),
                "syncs": self.mode.syncs.facts(),
                "events": {
                    "recorded": self.events.recorded,
                    "reversed_pairs_refused": self.events.reversed_pairs,
                    "jitter_s": self.options["event_jitter_s"],
                },
            }
        )
        return self.facts


_INSTALLED: list[MpsEmulator] = []


def install(options: dict | None = None) -> MpsEmulator:
    """Install the emulator in this process (once; later calls return it).

    ``options``: ``recommended_max_bytes`` (default 3/4 of this machine's memory),
    ``event_jitter_s`` (0), ``reverse_every`` (7; 0: never), ``allocator_stats`` (default: whether the installed
    torch's MPS allocator has peak statistics), ``seed`` (0)."""
    if _INSTALLED:
        return _INSTALLED[0]
    options = dict(options or {})
    options.setdefault(
        "recommended_max_bytes", int(RECOMMENDED_SHARE * psutil.virtual_memory().total)
    )
    options.setdefault("event_jitter_s", DEFAULT_EVENT_JITTER_S)
    options.setdefault("reverse_every", DEFAULT_REVERSE_EVERY)
    options.setdefault("allocator_stats", api.torch_version() >= api.DEVICE_ALLOCATOR_SINCE)
    options.setdefault("seed", 0)
    how = native.register()
    mode = MpsDispatch(EmulatedAllocator(int(options["recommended_max_bytes"])))
    events = api.EmulatedEvents(
        mode, float(options["event_jitter_s"]), int(options["seed"]), int(options["reverse_every"])
    )
    api.patch_torch(mode, events, bool(options["allocator_stats"]))
    mode.__enter__()  # on for the rest of the process
    emulator = MpsEmulator(mode, events, how, options)
    emulator.refresh()
    _INSTALLED.append(emulator)
    return emulator


def installed() -> MpsEmulator | None:
    return _INSTALLED[0] if _INSTALLED else None


__all__ = ["EmulatedMpsError", "MpsEmulator", "MpsTensor", "install", "installed", "WHAT_IT_IS"]
