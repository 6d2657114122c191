"""What the bundled training workloads share: the cell's prepared data, its two
loaders, Adam, the count of optimizer updates a warm-up schedule spans, and the
assembly of :class:`trainbench.measure.training.TrainingParts` from a workload's step."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch
from torch import nn
from trainbench.measure.context import RunContext
from trainbench.measure.data import BatchTensorDataset, make_loader
from trainbench.measure.data import to_device as data_to_device
from trainbench.measure.devices import fused_optimizer
from trainbench.measure.training import TrainingParts


class Step(NamedTuple):
    """A workload's training step and evaluation, as :class:`TrainingParts` takes them:
    ``loss_fn(model, batch)``, ``evaluate(model, loader, ctx)`` and, where evaluation
    returns outputs instead of metrics, ``score(outputs)``."""

    loss_fn: Callable[[nn.Module, dict], tuple[torch.Tensor, dict]]
    evaluate: Callable[[nn.Module, Iterable, RunContext], dict]
    score: Callable[[Any], dict] | None = None


def load_cell_data(ctx: RunContext, data_file: str) -> tuple[dict, Any]:
    """The cell's prepared data: ``meta.json`` and the arrays of ``data_file`` (an
    ``np.load`` of the npz, read lazily; a context manager that closes it)."""
    data_dir = Path(ctx.spec["data_path"])
    meta = json.loads((data_dir / "meta.json").read_text())
    return meta, np.load(data_dir / data_file)


def cell_loaders(
    ctx: RunContext, train_set: BatchTensorDataset, eval_set: BatchTensorDataset
) -> tuple[Iterable, Iterable]:
    """The cell's training loader (shuffled by the run's generator 1, at the cell's
    batch size) and evaluation loader (in order, at the evaluation batch size)."""
    train_loader = make_loader(train_set, ctx.batch_size, True, ctx.generator(1), ctx.loader_kwargs)
    eval_loader = make_loader(eval_set, ctx.eval_batch_size, False, None, ctx.loader_kwargs)
    return train_loader, eval_loader


def to_device(batch: dict, device: torch.device) -> dict:
    """Every tensor of ``batch`` on ``device``: non-blocking to an accelerator, blocking
    to the CPU (:func:`trainbench.measure.data.copy_to`)."""
    return data_to_device(batch, device)


def adam(model: nn.Module, opt: dict, device: torch.device) -> torch.optim.Adam:
    """Adam over every parameter with the config's ``lr`` and ``weight_decay``, fused
    where the device has it."""
    return torch.optim.Adam(
        model.parameters(),
        lr=opt["lr"],
        weight_decay=opt["weight_decay"],
        fused=fused_optimizer("auto", device.type),
    )


def optimizer_updates(settings: dict, train_loader: Iterable) -> int:
    """Optimizer updates of the whole run (at least 1): the steps of an epoch (capped at
    ``max_steps_per_epoch``) over ``gradient_accumulation``, rounded up, times epochs."""
    steps_per_epoch = len(train_loader)
    if settings.get("max_steps_per_epoch"):
        steps_per_epoch = min(steps_per_epoch, int(settings["max_steps_per_epoch"]))
    accumulation = int(settings["gradient_accumulation"])
    return max(1, -(-steps_per_epoch // accumulation) * int(settings["epochs"]))


def warmup_updates(opt: dict, total_updates: int) -> int:
    """The warm-up's updates: the config's ``warmup_ratio`` of ``total_updates``."""
    return int(round(float(opt["warmup_ratio"]) * total_updates))


def best_epoch_metrics(result: dict) -> dict | None:
    """The evaluation metrics of the run's best epoch (None when it has none)."""
    best = result["task"]["best_epoch"]
    if best is None:
        return None
    return result["epochs"][best - 1]["eval_metrics"]


def assemble_parts(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    loaders: tuple[Iterable, Iterable],
    step: Step,
    **options: Any,
) -> TrainingParts:
    """:class:`TrainingParts` of the model, its optimizer, the (training, evaluation)
    loaders and the step; ``options`` are the other fields (primary_metric, ...)."""
    train_loader, eval_loader = loaders
    return TrainingParts(
        model=model,
        optimizer=optimizer,
        train_loader=train_loader,
        eval_loader=eval_loader,
        loss_fn=step.loss_fn,
        evaluate=step.evaluate,
        score=step.score,
        **options,
    )
