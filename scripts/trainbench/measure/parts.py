"""What a workload hands the training loop (``TrainingParts``; its contract is checked
by :mod:`trainbench.measure.parts_contract`), and the loop's own error classes and the
names of torch.compile's (which the launcher classifies a failed cell by, without torch)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # torch for the annotations only: the launcher imports this module
    import torch
    from trainbench.measure.context import RunContext


class NonFiniteLossError(FloatingPointError):
    """The training loss became NaN or infinite."""


class CompileFailedError(RuntimeError):
    """torch.compile could not compile the training step (recorded as compile_failed)."""


# torch.compile's exception classes (dynamo, inductor) and the loop's wrapper.
COMPILE_ERROR_NAMES = frozenset(
    {
        "CompileFailedError",
        "TorchDynamoException",
        "BackendCompilerFailed",
        "InductorError",
        "Unsupported",
    }
)


@dataclass
class TrainingParts:
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    train_loader: Iterable
    eval_loader: Iterable
    # (model, batch on device) -> (loss, {name: on-device tensor to sum over the epoch})
    loss_fn: Callable[[torch.nn.Module, dict], tuple[torch.Tensor, dict]]
    # (model, loader, ctx) -> {"metrics": {...}, "samples": int}; or, with `score`,
    # {"outputs": ..., "samples": int} and score(outputs) -> metrics, computed after
    # the timed evaluation region (host-side metric code is not device time).
    evaluate: Callable[[torch.nn.Module, Iterable, RunContext], dict]
    primary_metric: str
    higher_is_better: bool = True
    scheduler: Any = None  # stepped once per epoch
    step_scheduler: Any = None  # stepped after every optimizer step (e.g. warm-up + decay)
    # (summed train stats, samples) -> per-epoch train metrics
    train_metrics: Callable[[dict, int], dict] | None = None
    # Called before each epoch outside every timed region (e.g. hard-negative mining);
    # returns facts recorded with the epoch (its own timings included).
    before_epoch: Callable[[int], dict] | None = None
    # The work per step of each configured epoch, where a schedule changes it (e.g.
    # two_tower's hard-negative mining from its second epoch): one label per epoch. The
    # measurement window then starts no earlier than the last phase's first step, on
    # every device, so that a speedup compares the same work (docs/statistics.md §1).
    epoch_phases: list[str] | None = None
    score: Callable[[Any], dict] | None = None
    model_name: str = ""
    extra_settings: dict = field(default_factory=dict)
    # Workload facts added to the loop's result (e.g. best-epoch metrics).
    finish: Callable[[dict], dict] | None = None
