"""The float64 reference run in the child (the spec and the decision to make one are
in :mod:`trainbench.launch.reference`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

REFERENCE_DTYPE = "float64"

if TYPE_CHECKING:
    from trainbench.measure.context import RunContext
    from trainbench.measure.parts import TrainingParts


def run_reference(parts: TrainingParts, ctx: RunContext) -> dict:
    """The first ``reference.steps`` steps of epoch 1 (at most one epoch) in float64:
    the same initial weights (drawn in float32, cast exactly), the same batches,
    dropout masks and optimizer, through the training loop's own step, with no
    autocast and nothing timed."""
    import time

    import torch
    from trainbench.measure.precision import cast_floats, default_dtype
    from trainbench.measure.training import TrainingLoop
    from trainbench.measure.training_facts import model_facts

    loop = TrainingLoop(parts, ctx)
    dtype = torch.float64
    requested = int(ctx.spec["reference"]["steps"])
    limit = min(requested, loop.steps_per_epoch)
    losses: list[torch.Tensor] = []
    started = time.perf_counter()
    with default_dtype(dtype):
        parts.model.to(dtype)
        if parts.before_epoch is not None:
            parts.before_epoch(1)
        parts.model.train()
        batches = loop.batches()
        for step in range(limit):
            loss, _ = loop.train_step(cast_floats(next(batches), dtype), step)
            loop.state.global_step += 1
            losses.append(loss)
    values = torch.stack(losses)
    return {
        "kind": "reference",
        "dtype": REFERENCE_DTYPE,
        "loss_dtype": str(losses[0].dtype).replace("torch.", ""),
        "requested_steps": requested,
        "steps": {"losses": [values.double().tolist()]},  # one list per epoch, as in a run
        "steps_per_epoch": loop.steps_per_epoch,
        "seconds": time.perf_counter() - started,
        "model": model_facts(parts),
        "method": "the cell's workload built as in the cell (float32 initial weights, same "
        "seed, data and batch order), then model and floating batch tensors cast to float64 "
        "and torch's default dtype set to float64; autocast off; the training loop's own "
        "step; the first steps of epoch 1",
    }
