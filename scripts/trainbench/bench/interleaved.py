"""Harness and bare loop interleaved in short blocks inside one process: a comparison
sensitive enough to resolve a 2% tax.

Whole runs a minute apart (the rounds of :mod:`.throughput_run`) differ by up to 1.7x
on a lent GPU host, far more than the tax the benchmark looks for. Here one process
builds the workload's parts once (model, optimizer, loader, loss) and alternates
*blocks* of training steps between the variants on those same parts:

- ``harness``: a block is one timed region of the harness's own training loop
  (:meth:`trainbench.measure.training.TrainingLoop.train_steps`: every tracker at the region's
  edges, a timing event per step, data wait, loss collection — exactly an epoch's
  region); its time is the region's own synchronized wall time.
- ``bare``: the same parts in the bare best-practice loop of :mod:`.throughput_loops`;
  a block is ``steps`` steps between two device synchronizations, timed by the same
  clock.
- ``bare-aa``: the bare loop again under a second name, measured exactly like ``bare``.
  Its ratio to ``bare`` (the A/A comparison) is the method's own floor: a harness ÷ bare
  verdict is reported only when the A/A interval lies within ±1%.

Each round runs the variants in a palindrome (``H B A A B H``; the order rotated each
round), so a linear drift of the machine within the round cancels for every pair (the
ABBA design). A round's throughput per variant is its two blocks' samples over their
seconds; the round's paired ratios go to the summary, whose interval is a bootstrap CI
of the median over rounds (:func:`trainbench.analysis.stats.intervals.paired_ratio_interval`).
The block length is calibrated once, before the rounds: the steps the bare loop needs
for ``block_seconds`` (pyperf calibrates its loops the same way), the same for every
variant.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from trainbench import workloads
from trainbench.bench.throughput_loops import _bare_step, release_device
from trainbench.measure.context import check_autocast_kernels, make_context
from trainbench.measure.heap import frozen_heap
from trainbench.measure.training import TrainingLoop, TrainingParts

HARNESS, BARE, BARE_AA = "harness", "bare", "bare-aa"
METHOD = "interleaved"


@dataclass
class Block:
    """One block of one variant: its steps, samples and synchronized wall seconds, and
    (where the device has events) the summed per-step (harness) or edge-to-edge (bare)
    event seconds of the same steps."""

    variant: str
    steps: int
    samples: int
    seconds: float
    event_seconds: float | None


class Runner:
    """A variant's block runner over shared parts: ``run(steps) -> Block``."""

    name: str

    def run(self, steps: int) -> Block:  # pragma: no cover - interface
        raise NotImplementedError


class HarnessRunner(Runner):
    """Blocks of the harness's training loop: each one timed region, as an epoch's."""

    def __init__(self, parts: TrainingParts, ctx) -> None:
        self.name = HARNESS
        self.loop = TrainingLoop(parts, ctx)
        self.batches = self.loop.endless_batches()
        self.label = 0

    def run(self, steps: int) -> Block:
        self.label += 1
        before = len(self.loop.state.step_samples)
        _, _, seconds = self.loop.train_steps(self.label, steps, self.batches)
        wall = self.loop.timer.region_seconds[-1]
        if self.label == 1:
            # The loop's first call holds step 0 (synchronized alone, outside the region).
            seconds, before = seconds[1:], before + 1
        samples = sum(self.loop.state.step_samples[before:])
        events = float(sum(seconds)) if self.loop.timer.uses_events else None
        return Block(self.name, len(seconds), samples, wall, events)


class BareRunner(Runner):
    """Blocks of the bare loop: ``steps`` steps between two synchronizations, a device
    event at each edge where the device has events."""

    def __init__(self, name: str, step: Callable[[], int], device) -> None:
        self.name, self.step, self.device = name, step, device
        self.profiler = None  # benchmarks/step_overhead.py profiles inside the clock

    def run(self, steps: int) -> Block:
        start, end = self.device.make_event(), self.device.make_event()
        self.device.synchronize()
        t0 = time.perf_counter()
        if self.profiler is not None:
            self.profiler.clock_started("train", t0)
        if start is not None:
            start.record()
        samples = 0
        for _ in range(steps):
            samples += self.step()
        if end is not None:
            end.record()
        self.device.synchronize()
        wall = time.perf_counter() - t0
        if self.profiler is not None:
            self.profiler.stop("train", wall)
        events = start.elapsed_time(end) / 1000.0 if start is not None else None
        return Block(self.name, steps, samples, wall, events)


def palindrome(names: list[str], round_index: int) -> list[str]:
    """The round's order: the names rotated by the round, then the same reversed
    (``a b c c b a``): each variant's two blocks sit symmetrically about the round's
    middle, so a linear drift adds the same to every variant."""
    shift = round_index % len(names)
    order = names[shift:] + names[:shift]
    return order + order[::-1]


def calibrate_steps(runner: Runner, block_seconds: float, min_steps: int, max_steps: int) -> int:
    """Steps per block: the bare loop's steps in ``block_seconds`` (from one timed probe
    block of ``min_steps``, then a second at the estimate), within [min_steps, max_steps]."""
    steps = min_steps
    for _ in range(2):
        block = runner.run(steps)
        per_step = block.seconds / max(block.steps, 1)
        steps = int(min(max_steps, max(min_steps, math.ceil(block_seconds / max(per_step, 1e-9)))))
    return steps


def round_rows(blocks: list[Block], base: dict, round_index: int) -> list[dict]:
    """One results row per variant for a round: its blocks' samples over their seconds,
    the event-vs-wall gap of the same blocks, and the blocks themselves."""
    rows = []
    for name in dict.fromkeys(b.variant for b in blocks):
        mine = [b for b in blocks if b.variant == name]
        wall = sum(b.seconds for b in mine)
        samples = sum(b.samples for b in mine)
        row = {
            **base,
            "variant": name,
            "round": round_index,
            "status": "ok",
            "method": METHOD,
            "steps": sum(b.steps for b in mine),
            "samples": samples,
            "wall_s": wall,
            "samples_per_s": samples / wall if wall > 0 else math.nan,
            "blocks": [
                {
                    "steps": b.steps,
                    "samples": b.samples,
                    "seconds": b.seconds,
                    "event_seconds": b.event_seconds,
                }
                for b in mine
            ],  # fmt: skip
        }
        events = [b.event_seconds for b in mine]
        if all(e is not None for e in events):
            # The harness: its summed per-step events vs its regions' wall clock; the
            # bare loop: its edge events vs its wall clock.
            row["event_vs_wall"] = sum(events) / wall - 1.0  # type: ignore[arg-type]
        rows.append(row)
    return rows


@dataclass
class InterleavedPlan:
    rounds: int = 10
    block_seconds: float = 0.3
    min_block_steps: int = 3
    max_block_steps: int = 400
    warmup_rounds: int = 1


def measure_interleaved(spec: dict, plan: InterleavedPlan) -> Iterator[dict]:
    """Build the case's parts once; warm every variant up; calibrate the block; then
    ``plan.rounds`` palindromic rounds of harness, bare and bare-aa blocks. Yields one
    row per variant per round (round -1: the warm-up round, kept apart)."""
    ctx = make_context(spec)
    parts: TrainingParts = workloads.get(spec["cell"]["workload"]).build_parts(ctx)
    check_autocast_kernels(parts.model, ctx)
    harness = HarnessRunner(parts, ctx)
    step = _bare_step(ctx, parts, None, spec["workload_settings"])
    runners = {
        HARNESS: harness,
        BARE: BareRunner(BARE, step, ctx.device),
        BARE_AA: BareRunner(BARE_AA, step, ctx.device),
    }
    warmup = max(int(spec["workload_settings"]["warmup_steps"]), plan.min_block_steps)
    # Step 0 and the configured warm-up, in the harness (its step 0 is timed apart).
    harness.run(warmup)
    first_step_s = harness.loop.state.first_step_seconds
    steps = calibrate_steps(runners[BARE], plan.block_seconds, plan.min_block_steps,
                            plan.max_block_steps)  # fmt: skip
    base = {
        "workload": spec["cell"]["workload"],
        "batch_size": spec["cell"]["batch_size"],
        "block_steps": steps,
        "block_seconds_target": plan.block_seconds,
        "first_step_s": first_step_s,
        "timing_method": harness.loop.timer.method,
        "amp": ctx.amp.as_dict(),
        "dataloader": ctx.loader_kwargs,
    }
    names = list(runners)
    with frozen_heap():  # as in a cell (trainbench.measure.heap), for every variant alike
        for round_index in range(-plan.warmup_rounds, plan.rounds):
            blocks = [runners[n].run(steps) for n in palindrome(names, max(round_index, 0))]
            for row in round_rows(blocks, base, round_index):
                row["load_average_1min"] = os.getloadavg()[0]
                if round_index < 0:
                    row["status"] = "process_warmup"
                yield row
    del runners, harness, step, parts
    release_device(ctx.torch_device)


__all__ = [
    "BARE",
    "BARE_AA",
    "HARNESS",
    "METHOD",
    "Block",
    "InterleavedPlan",
    "calibrate_steps",
    "measure_interleaved",
    "palindrome",
    "round_rows",
]
