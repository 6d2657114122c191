"""What a training run's record says about its model, settings, checks and task
(the parts of :func:`trainbench.measure.training_result.loop_result` that are facts
about the run rather than measurements)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainbench.measure.heap import GC_METHOD

if TYPE_CHECKING:
    from trainbench.measure.loop_state import LoopSettings
    from trainbench.measure.parts import TrainingParts
    from trainbench.measure.trackers import WarningLog


def model_facts(parts: TrainingParts) -> dict:
    """The model's name and parameter counts."""
    params = list(parts.model.parameters())
    return {
        "name": parts.model_name,
        "parameters": sum(p.numel() for p in params),
        "trainable_parameters": sum(p.numel() for p in params if p.requires_grad),
    }


def settings_facts(parts: TrainingParts, settings: LoopSettings) -> dict:
    """The settings a run trained with, as in force (docs/statistics.md §1)."""
    optimizer = parts.optimizer
    if settings.staged:
        staging = "whole data set staged on the device once; batches gathered there"
    elif settings.prefetch:
        staging = "next batch copied to the device on a side stream during the current step"
    else:
        staging = "batch copied to the device at the start of its step" + (
            " (pinned memory, non_blocking)" if settings.pinned else ""
        )
    compiled = settings.compile_mode is not None
    return {
        "batch_size": settings.batch_size,
        "gradient_accumulation": settings.accumulation,
        "effective_batch_size": settings.batch_size * settings.accumulation,
        "epochs": settings.epochs,
        "steps_per_epoch": settings.steps_per_epoch,
        "warmup_steps": settings.warmup_steps,
        "timing": settings.protocol.as_dict(),
        "optimizer": type(optimizer).__name__,
        "optimizer_options": {
            k: v
            for k, v in optimizer.defaults.items()
            if isinstance(v, (int, float, bool, str, type(None)))
        },
        "scheduler": type(parts.scheduler).__name__ if parts.scheduler is not None else None,
        "step_scheduler": type(parts.step_scheduler).__name__
        if parts.step_scheduler is not None
        else None,
        "grad_scaler": settings.grad_scaler,
        "optimizer_host_waits_per_step": optimizer_host_waits(optimizer, settings.grad_scaler),
        "garbage_collection": GC_METHOD,
        "data_staging": staging,
        "compile": {
            "mode": settings.compile_mode,
            "compiled": "the workload's loss function (model forward + loss; backward "
            "through AOTAutograd)"
            if compiled
            else None,
            "evaluation": "eager module" if compiled else None,
            "errors_suppressed": False if compiled else None,
        },
        **parts.extra_settings,
    }


def optimizer_host_waits(optimizer, grad_scaler: bool) -> int:
    """Host waits on the device that each optimizer step adds, by what torch does: a
    GradScaler reads ``found_inf`` with ``.item()`` before stepping an optimizer that
    cannot take the scale itself (``torch/amp/grad_scaler.py``, ``_maybe_opt_step``); a
    fused Adam/AdamW takes it (``_step_supports_amp_scaling``) and adds none."""
    if not grad_scaler:
        return 0
    return 0 if getattr(optimizer, "_step_supports_amp_scaling", False) else 1


def verification_facts(verification: dict, log: WarningLog | None) -> dict:
    """Placement and autocast checks after step 0 (``verification``), and the
    CPU-fallback warnings the cell's warning log caught (``log``)."""
    facts = dict(verification)
    facts["cpu_fallback_ops"] = sorted(set(log.fallback_ops)) if log else []
    if log and log.autocast_disabled:
        facts["autocast_active"] = False
        facts["autocast_disabled_warning"] = log.autocast_disabled[0]
    return facts


def task_facts(parts: TrainingParts, rows: list[dict]) -> dict:
    """The primary metric after the last configured epoch and at its best epoch, and
    the final training loss."""
    metric = parts.primary_metric
    values = [(row["eval_metrics"] or {}).get(metric) for row in rows]
    scored = [(v, row["epoch"]) for v, row in zip(values, rows, strict=True) if v is not None]
    pick = max if parts.higher_is_better else min
    best, best_epoch = pick(scored) if scored else (None, None)
    return {
        "primary_metric": metric,
        "higher_is_better": parts.higher_is_better,
        "final": values[-1] if values else None,
        "best": best,
        "best_epoch": best_epoch,
        "final_loss": rows[-1]["train_loss"] if rows else None,
    }
