"""The float64 reference of a cell's first training steps, against which the parity
test measures how far each device's training drifts (docs/statistics.md, "Parity").

Repeat k of every device of a workload starts from the same weights and sees the same
batches (they share ``run_seed``), so their per-step training losses differ only by
arithmetic — until training, which amplifies every difference, has turned the
rounding into a change as large as a change of seed. A run of the same steps in
float64 is the yardstick: how far the baseline's float32 losses lie from it says how
far correct arithmetic of that precision drifts on this workload, at each step; the
parity test scales that by each device's precision (``trainbench.precision``).

One reference per workload, batch size and repeat, on the CPU (float64 exists
everywhere there, not on MPS): the baseline cell's spec with ``reference: {dtype,
steps}`` added, run by the launcher like a cell (a fresh process, a record, a
timeout) but untimed and without the canary. It is made only where it is needed —
another device of the same repeat finished ``ok`` with losses not bit-identical to
the baseline's — so a machine with one device pays nothing.
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from trainbench import config as tbconfig
from trainbench.records import atomic_write_json

if TYPE_CHECKING:
    from trainbench.context import RunContext
    from trainbench.training import TrainingParts

REFERENCE_DTYPE = "float64"
SKIPPED = "skipped"


def reference_spec(
    config: dict, cell: tbconfig.Cell, steps: int, data_path: str | None = None
) -> dict:
    """The spec of ``cell``'s float64 reference: the cell's own spec (workload
    settings, seeds, data) on the CPU with the config's CPU settings, autocast off,
    and ``reference`` set. ``cell`` is the baseline's cell of that repeat."""
    variant = tbconfig.find_variant(config, cell.device)
    spec = tbconfig.cell_spec(config, cell, data_path=data_path)
    if variant.backend != "cpu":
        spec["backend"] = "cpu"
        spec["device_settings"] = copy.deepcopy(config["device_settings"]["cpu"])
        spec["device_settings"]["threads"] = None
    spec["device_settings"]["autocast"] = "off"
    spec.pop("compile", None)
    spec["faults"] = []
    spec["reference"] = {"dtype": REFERENCE_DTYPE, "steps": int(steps)}
    spec["config_hash"] = tbconfig.config_hash(spec)
    return spec


def _losses(record: dict) -> list[float] | None:
    steps = ((record.get("result") or {}).get("steps") or {}).get("losses")
    return [x for epoch in steps for x in epoch] if steps else None


def need_for_reference(baseline: dict | None, others: Sequence[dict]) -> str | None:
    """Why this repeat needs no reference (None: it needs one): the baseline did not
    finish ok, no other device finished ok, or every ok device's losses are
    bit-identical to the baseline's (parity then says ``identical``)."""
    if not baseline or baseline.get("status") != "ok":
        return "the baseline cell of this repeat has no ok record"
    ok = [r for r in others if r.get("status") == "ok"]
    if not ok:
        return "no other device of this repeat finished ok"
    base = _losses(baseline)
    if base is not None and all(_losses(r) == base for r in ok):
        return "every other device's losses are bit-identical to the baseline's"
    return None


def read_records(paths: Sequence[str | os.PathLike]) -> list[dict]:
    out = []
    for path in paths:
        with open(path) as fh:
            out.append(json.load(fh))
    return out


def write_skipped(output: str | os.PathLike, spec: dict, reason: str) -> dict:
    record = {"status": SKIPPED, "reason": reason, "cell": spec["cell"], "spec": spec}
    Path(output).parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(output, record)
    return record


def make_reference(
    spec: dict,
    baseline_record: str | os.PathLike,
    other_records: Sequence[str | os.PathLike],
    output: str | os.PathLike,
    log_path: str | os.PathLike,
) -> dict:
    """Write the reference record of one repeat: run it (through the launcher) when
    :func:`need_for_reference` says it is needed, else a ``skipped`` record with the
    reason."""
    from trainbench.launcher import run_cell

    baseline = read_records([baseline_record])[0]
    reason = need_for_reference(baseline, read_records(other_records))
    if reason is not None:
        Path(log_path).parent.mkdir(parents=True, exist_ok=True)
        Path(log_path).write_text(f"trainbench reference not made: {reason}\n")
        return write_skipped(output, spec, reason)
    return run_cell(spec, output, log_path)


def run_reference(parts: TrainingParts, ctx: RunContext) -> dict:
    """The first ``reference.steps`` steps of epoch 1 (at most one epoch) in float64:
    the same initial weights (drawn in float32, cast exactly), the same batches,
    dropout masks and optimizer, through the training loop's own step, with no
    autocast and nothing timed."""
    import time

    import torch

    from trainbench.precision import cast_floats, default_dtype
    from trainbench.training import TrainingLoop
    from trainbench.training_facts import model_facts

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
            loop.global_step += 1
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
