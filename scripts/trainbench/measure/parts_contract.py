"""What a workload's entry must hand the training loop, checked in the cell before
anything is timed: a wrong part becomes a failed record of class ``bad_input`` whose
message names the entry, the part and the contract it broke — never ``unknown``,
never a traceback from deep inside the loop, never a silent acceptance.

The contract (``trainbench.TrainingParts``; docs/configuration.md, examples/my_model.py):
``build(ctx)`` returns a ``TrainingParts`` whose ``model`` is an ``nn.Module``,
``optimizer`` a ``torch.optim.Optimizer``, ``train_loader`` and ``eval_loader``
iterables with a length (batches per pass), ``loss_fn`` and ``evaluate`` callables,
``primary_metric`` a name; the training split holds at least one full batch (a
record would otherwise claim a batch size that never ran); ``evaluate`` returns a
mapping with ``metrics`` (holding ``primary_metric``) or ``outputs`` for ``score``,
of the same structure on the device and in the float64 reference; ``loss_fn`` returns
``(loss, stats)``: a scalar tensor and a dict of tensors. ``build(ctx)`` raising is
class ``build_failed``, with the user's traceback kept.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
from trainbench.measure.parts import TrainingParts

CONTRACT = "the contract: docs/configuration.md#your-own-model, examples/my_model.py"


class BadInputError(ValueError):
    """The cell's input breaks a contract (class ``bad_input`` in the record)."""


class BuildFailedError(RuntimeError):
    """The workload's ``build(ctx)`` raised (class ``build_failed``); the exception it
    raised is chained (``from``), so its traceback stays in the cell's log."""


def entry_name(ctx: Any) -> str:
    """``workloads.<name>.entry`` ``module:function`` (or the bundled workload)."""
    name = ctx.spec["cell"]["workload"]
    entry = ctx.workload_settings.get("entry")
    return f"`workloads.{name}.entry` {entry!r}" if entry else f"the bundled workload {name!r}"


def _kind(value: Any) -> str:
    return "None" if value is None else f"a {type(value).__module__}.{type(value).__qualname__}"


def check_parts(parts: Any, ctx: Any) -> None:
    """Raise :class:`BadInputError` when ``parts`` breaks the contract."""
    who = entry_name(ctx)
    if not isinstance(parts, TrainingParts):
        raise BadInputError(
            f"{who} returned {_kind(parts)}, not trainbench.TrainingParts. "
            f"Fix: return TrainingParts(model=..., optimizer=..., ...) ({CONTRACT})."
        )
    checks: list[tuple[str, bool, str]] = [
        ("model", isinstance(parts.model, torch.nn.Module), "a torch.nn.Module"),
        ("optimizer", isinstance(parts.optimizer, torch.optim.Optimizer),
         "a torch.optim.Optimizer"),
        ("train_loader", _is_loader(parts.train_loader), "an iterable of batches with a length"),
        ("eval_loader", _is_loader(parts.eval_loader), "an iterable of batches with a length"),
        ("loss_fn", callable(parts.loss_fn), "a callable (model, batch) -> (loss, stats)"),
        ("evaluate", callable(parts.evaluate), "a callable (model, loader, ctx) -> dict"),
        ("primary_metric", isinstance(parts.primary_metric, str) and bool(parts.primary_metric),
         "the name of a metric evaluate returns"),
    ]  # fmt: skip
    for part, ok, wanted in checks:
        if not ok:
            raise BadInputError(
                f"{who} returned TrainingParts whose {part} is {_kind(getattr(parts, part))}, "
                f"not {wanted}. Fix: pass {wanted} as {part} ({CONTRACT})."
            )


def _is_loader(value: Any) -> bool:
    return hasattr(value, "__iter__") and hasattr(value, "__len__")


def check_full_batch(parts: Any, ctx: Any) -> None:
    """At least one full training batch at the cell's batch size."""
    loader = parts.train_loader
    if len(loader) >= 1:
        return
    dataset = getattr(loader, "dataset", None)
    size = (
        f"{len(dataset)} samples"
        if dataset is not None and hasattr(dataset, "__len__")
        else ("fewer samples")
    )
    name, bs = ctx.spec["cell"]["workload"], ctx.batch_size
    raise BadInputError(
        f"`workloads.{name}.batch_sizes` has {bs}, but the training split of {entry_name(ctx)} "
        f"holds {size}: not one full batch, so a record would claim a batch size that never "
        f"ran. Fix: use batch sizes of at most the training split's size, or give it more data."
    )


def check_evaluation(evaluation: Any, parts: Any, ctx: Any, score: Callable | None) -> None:
    """``evaluate`` returned a mapping with ``samples`` and either ``metrics`` holding
    ``primary_metric`` or ``outputs`` for ``score``."""
    who = entry_name(ctx)
    if not isinstance(evaluation, Mapping):
        raise BadInputError(
            f"{who}: evaluate returned {_kind(evaluation)}, not a dict. Fix: return "
            f"{{'metrics': {{{parts.primary_metric!r}: value}}, 'samples': n}} ({CONTRACT})."
        )
    if "outputs" in evaluation and score is not None:
        return
    metrics = evaluation.get("metrics")
    if not isinstance(metrics, Mapping) or parts.primary_metric not in metrics:
        found = sorted(metrics) if isinstance(metrics, Mapping) else _kind(metrics)
        raise BadInputError(
            f"{who}: evaluate returned no metric {parts.primary_metric!r} (its metrics: "
            f"{found}). Fix: return {{'metrics': {{{parts.primary_metric!r}: value, ...}}, "
            f"'samples': n}}, or outputs with a score function ({CONTRACT})."
        )


def build_failed(exc: Exception, ctx: Any) -> BuildFailedError:
    """The error for a ``build(ctx)`` that raised ``exc`` (raise it ``from exc``)."""
    return BuildFailedError(
        f"{entry_name(ctx)}: build(ctx) raised {type(exc).__name__}: {exc}. build(ctx) must "
        f"return TrainingParts ({CONTRACT}). Fix: the traceback above, in the cell's log, "
        "shows the line of your code that raised."
    )


def check_loss_output(output: Any, ctx: Any) -> None:
    """``loss_fn(model, batch)`` returned ``(loss, stats)``: a tensor of one element and
    a mapping of tensors (checked on the first step, before anything is summed)."""
    pair = isinstance(output, tuple | list) and len(output) == 2
    loss, stats = output if pair else (None, None)
    if (
        pair
        and isinstance(loss, torch.Tensor)
        and loss.numel() == 1
        and isinstance(stats, Mapping)
        and all(isinstance(v, torch.Tensor) for v in stats.values())
    ):
        return
    got = (
        f"({_kind(loss)} of {loss.numel()} elements, {_kind(stats)})"
        if pair and isinstance(loss, torch.Tensor)
        else f"({_kind(loss)}, {_kind(stats)})"
        if pair
        else _kind(output)
    )
    raise BadInputError(
        f"{entry_name(ctx)}: loss_fn(model, batch) returned {got}, not (loss, stats): a "
        "one-element loss tensor and a dict of tensors to sum over the epoch. Fix: return "
        f"`loss, {{}}` when there are no stats ({CONTRACT})."
    )
