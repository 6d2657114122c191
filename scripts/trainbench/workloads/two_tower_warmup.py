"""A new phase of two_tower's mining schedule, warmed before it is timed.

Where ``mine_schedule`` changes the work per step (FAISS hard negatives from epoch 2:
the document tower then encodes 1 + k documents per query), every device's window
starts at the first step of the schedule's last phase (docs/statistics.md section 1,
rule 6). The phase's first steps carry one-off work of their own: kernels and
oneDNN/cuDNN primitives for the new shapes, the allocator's growth to the larger
buffers, and the first touch of memory the process has not used before (in the run's
first cell, memory the machine has not backed yet). A burst too short to be a segment
of its own, at the window's start, lifts the first third of the window, which the
steady-state detector's drift rule then reads as no steady state.

The run's first step is untimed for the same reasons (step 0, "compilation and lazy
initialisation"). :func:`warm_phase` does the same for a new phase, in the mining hook
before its first timed region: forward and backward of the phase's step on a fixed
batch, gradients discarded and no optimizer step, so the parameters, the optimizer's
state, the data order and every random stream are as they were, and the timed steps
are those of a run without it. The record says what ran and what each pass cost
(seconds, page faults, system time): :func:`process_counters`.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch
from trainbench.measure.context import RunContext

try:
    import resource
except ImportError:  # pragma: no cover - Windows
    resource = None

# Warm-up passes of a new phase: the first meets its shapes and the allocator's growth,
# the second shows whether one was enough (its faults and time against the first).
PASSES = 2
WHAT = (
    "forward and backward of the new phase's training step on the first batch of training "
    "pairs (their mined negatives), outside every timed region, gradients discarded and "
    "no optimizer step: its shapes (kernels, oneDNN/cuDNN primitives), its larger buffers "
    "(allocator) and their first-touch memory meet the process before its timed steps"
)


def process_counters() -> dict | None:
    """This process's cumulative counters (every thread): page faults, CPU time and
    involuntary context switches (``getrusage``); None where there is none (Windows)."""
    if resource is None:  # pragma: no cover - Windows
        return None
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "minor_faults": int(usage.ru_minflt),
        "major_faults": int(usage.ru_majflt),
        "user_seconds": float(usage.ru_utime),
        "system_seconds": float(usage.ru_stime),
        "involuntary_switches": int(usage.ru_nivcsw),
    }


def _delta(before: dict | None, after: dict | None) -> dict | None:
    if before is None or after is None:
        return None
    return {key: after[key] - before[key] for key in before}


def warm_phase(
    loss_fn: Callable, model: torch.nn.Module, batch: dict, ctx: RunContext, passes: int = PASSES
) -> dict:
    """``passes`` forward and backward passes of ``loss_fn`` on ``batch`` in training mode,
    under the timed steps' autocast, the device synchronized at each pass's edges; every
    parameter's gradient is put back as it was (None between epochs) and no optimizer
    steps. The facts recorded: each pass's seconds and process counters."""
    params = list(model.parameters())
    saved = [p.grad for p in params]
    was_training = model.training
    # The loop's autocast: the cell's, off in a float64 reference run.
    amp = ctx.amp
    enabled = bool(amp.enabled) and not ctx.spec.get("reference")
    dtype = getattr(torch, amp.dtype) if enabled else None
    rows = []
    model.train()
    try:
        for _ in range(passes):
            for p in params:
                p.grad = None
            ctx.device.synchronize()
            before, t0 = process_counters(), time.perf_counter()
            with torch.autocast(device_type=ctx.torch_device.type, dtype=dtype, enabled=enabled):
                loss, _ = loss_fn(model, batch)
            loss.backward()
            ctx.device.synchronize()
            seconds = time.perf_counter() - t0
            rows.append({"seconds": seconds, "process": _delta(before, process_counters())})
    finally:
        for p, grad in zip(params, saved, strict=True):
            p.grad = grad
        model.train(was_training)
    return {
        "passes": len(rows),
        "seconds": sum(row["seconds"] for row in rows),
        "per_pass": rows,
        "what": WHAT,
    }
