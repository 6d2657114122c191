"""What a workload's entry must hand the training loop, checked in the cell before
anything is timed: a wrong part becomes a failed record of class ``bad_input`` whose
message names the entry, the part and the contract it broke — never ``unknown``,
never a traceback from deep inside the loop, never a silent acceptance.

The contract (``trainbench.TrainingParts``; docs/configuration.md, examples/my_model.py):
``build(ctx)`` returns a ``TrainingParts`` whose ``model`` is an ``nn.Module``,
``optimizer`` a ``torch.optim.Optimizer``, ``train_loader`` and ``eval_loader``
iterables with a length (batches per pass), ``loss_fn`` and ``evaluate`` callables,
``primary_metric`` a name; the training split holds at least one full batch (a
record would otherwise claim a batch size that never ran); ``evaluate`` returns one
of two forms (:func:`two_forms`): ``{"metrics": {primary_metric: number, ...},
"samples": n}`` with no ``score``, or ``{"outputs": ..., "samples": n}`` with
``score(outputs)`` returning such metrics; any other combination (metrics with a
``score``, outputs without one, both, neither, metrics that are no dict, lack the
primary metric or hold it as no number) is named on the first evaluation, and is of
the same structure on the device and in the float64 reference; ``loss_fn`` returns
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
    """Raise :class:`BadInputError` when ``parts`` breaks the contract; then wrap
    ``parts.score`` (:class:`CheckedScore`) so that what it returns is checked on every
    call."""
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
    optional = {
        "score": "None or a callable (outputs) -> metrics",
        "train_metrics": "None or a callable (summed stats, samples) -> metrics",
        "before_epoch": "None or a callable (epoch) -> facts",
        "finish": "None or a callable (result) -> facts",
    }
    for part, wanted in optional.items():
        value = getattr(parts, part)
        checks.append((part, value is None or callable(value), wanted))
    checks.append(("higher_is_better", isinstance(parts.higher_is_better, bool), "True or False"))
    for part, ok, wanted in checks:
        if not ok:
            raise BadInputError(
                f"{who} returned TrainingParts whose {part} is {_kind(getattr(parts, part))}, "
                f"not {wanted}. Fix: pass {wanted} as {part} ({CONTRACT})."
            )
    if parts.score is not None and not isinstance(parts.score, CheckedScore):
        parts.score = CheckedScore(parts.score, parts.primary_metric, who)


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


EVALUATE = "evaluate(model, loader, ctx)"
SCORE = "score(outputs)"
JSON_LEAVES = (str, int, float, bool, type(None))


def two_forms(metric: str) -> str:
    """The two forms ``evaluate`` may take, as every evaluation message states them."""
    return (
        f"{EVALUATE} has two forms: {{'metrics': {{{metric!r}: number, ...}}, 'samples': n}} "
        f"with no score, or {{'outputs': ..., 'samples': n}} with a score function, "
        f"{SCORE} -> {{{metric!r}: number, ...}}"
    )


def _keys(mapping: Mapping) -> str:
    keys = sorted(map(repr, mapping))
    return f"[{', '.join(keys[:8])}{', ...' if len(keys) > 8 else ''}]"


def _returned(evaluation: Mapping) -> str:
    return f"a {type(evaluation).__name__} with keys {_keys(evaluation)}"


def _evaluate_error(who: str, what: str, metric: str, fix: str) -> BadInputError:
    return BadInputError(f"{who}: {what}. {two_forms(metric)}. Fix: {fix} ({CONTRACT}).")


def check_evaluation(evaluation: Any, parts: Any, ctx: Any, score: Callable | None) -> None:
    """``evaluate`` returned one of its two forms: a mapping with ``samples`` (a count)
    and either ``metrics`` (holding ``primary_metric`` as a number) with no ``score``, or
    ``outputs`` with a ``score`` to turn them into metrics. Any other combination is a
    :class:`BadInputError` naming what it returned, the two forms and the fix. Checked on
    every pass, the first right after the run's first evaluation; what ``score`` returns
    is checked where it is called (:func:`check_parts` wraps it)."""
    who, metric = entry_name(ctx), parts.primary_metric
    if not isinstance(evaluation, dict):
        raise _evaluate_error(who, f"{EVALUATE} returned {_kind(evaluation)}, not a dict",
                              metric, "return a dict of one of the two forms")  # fmt: skip
    has_metrics, has_outputs = "metrics" in evaluation, "outputs" in evaluation
    got = _returned(evaluation)
    if has_metrics and has_outputs:
        raise _evaluate_error(
            who, f"{EVALUATE} returned both 'metrics' and 'outputs' ({got}): one form, not both",
            metric, "with a score function return outputs only (score makes the metrics); "
            "without one, metrics only",
        )  # fmt: skip
    if not has_metrics and not has_outputs:
        raise _evaluate_error(
            who, f"{EVALUATE} returned neither 'metrics' nor 'outputs' ({got}); no metric "
            f"{metric!r}", metric,
            "return {'outputs': ..., 'samples': n} for your score function" if score is not None
            else f"return {{'metrics': {{{metric!r}: value, ...}}, 'samples': n}}",
        )  # fmt: skip
    if has_metrics and score is not None:
        raise _evaluate_error(
            who, f"{EVALUATE} returned metrics ({got}) while TrainingParts has a score "
            f"function, so {SCORE} would get no outputs", metric,
            "drop score=... from TrainingParts and keep the metrics, or return "
            "{'outputs': ..., 'samples': n} and let score compute the metrics from them",
        )  # fmt: skip
    if has_outputs and score is None:
        raise _evaluate_error(
            who, f"{EVALUATE} returned outputs ({got}) but TrainingParts has no score function "
            f"to turn them into metrics, so no metric {metric!r}", metric,
            "pass score=... (outputs -> metrics) to TrainingParts, or return "
            f"{{'metrics': {{{metric!r}: value, ...}}, 'samples': n}} instead of outputs",
        )  # fmt: skip
    if has_outputs and evaluation["outputs"] is None:
        raise _evaluate_error(who, f"{EVALUATE} returned outputs None ({got})", metric,
                              "return the outputs score needs (tensors, arrays, numbers)")  # fmt: skip
    samples = evaluation.get("samples")
    if not isinstance(samples, int) or isinstance(samples, bool) or samples < 0:
        found = _kind(samples) if "samples" in evaluation else "no 'samples'"
        shown = f" {samples!r}" if isinstance(samples, int | float) else ""
        raise _evaluate_error(
            who, f"{EVALUATE} returned {found}{shown} as 'samples' ({got}), not a count", metric,
            "return 'samples': n, the number of samples the pass evaluated (an int)",
        )  # fmt: skip
    if has_metrics:
        check_metrics(evaluation["metrics"], metric, who, f"the metrics {EVALUATE} returned")


def check_metrics(metrics: Any, metric: str, who: str, source: str) -> None:
    """``metrics`` (what ``source`` returned: evaluate's metrics, or score's) is a dict
    holding ``metric`` as a number (int or float; NaN allowed), and every value can be
    recorded (numbers, strings, None, and lists or str-keyed dicts of them)."""
    fix = f"return {{{metric!r}: value, ...}} with plain numbers (float(x), x.item())"
    if not isinstance(metrics, dict):
        raise _evaluate_error(who, f"{source} are {_kind(metrics)}, not a dict of metrics",
                              metric, fix)  # fmt: skip
    if metric not in metrics:
        raise _evaluate_error(
            who, f"{source} hold no metric {metric!r} (the primary_metric; its metrics: "
            f"{_keys(metrics)})", metric, f"{fix}, or name one of them as primary_metric",
        )  # fmt: skip
    value = metrics[metric]
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise _evaluate_error(
            who, f"{source} hold {metric!r} as {_kind(value)}, not a number", metric, fix
        )
    bad = _unrecordable(metrics, "metrics")
    if bad is not None:
        raise _evaluate_error(
            who, f"{source} hold {bad[0]} as {_kind(bad[1])}, which a record cannot hold "
            "(numbers, strings, None, and lists or dicts of them)", metric, fix,
        )  # fmt: skip


def _unrecordable(value: Any, path: str) -> tuple[str, Any] | None:
    """(path, value) of the first value JSON cannot hold, or None."""
    if isinstance(value, JSON_LEAVES):
        return None
    if isinstance(value, list | tuple):
        items = ((f"{path}[{i}]", item) for i, item in enumerate(value))
    elif isinstance(value, dict) and all(isinstance(key, str) for key in value):
        items = ((f"{path}.{key}", item) for key, item in value.items())
    else:
        return path, value
    return next(filter(None, (_unrecordable(item, where) for where, item in items)), None)


class CheckedScore:
    """The workload's ``score`` with what it returns checked on every call (in the
    training loop and in evaluation parity): a dict holding ``primary_metric`` as a
    number (:func:`check_metrics`)."""

    def __init__(self, score: Callable[[Any], Any], metric: str, who: str):
        self.score, self.metric, self.who = score, metric, who

    def __call__(self, outputs: Any) -> Any:
        metrics = self.score(outputs)
        check_metrics(metrics, self.metric, self.who, f"the metrics {SCORE} returned")
        return metrics


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
