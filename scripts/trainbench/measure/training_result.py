"""A training run's result, as its record holds it: the measurement window and its
steady state, per-step times and losses, evaluation, trackers, facts
(docs/statistics.md, "The protocol of one cell")."""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainbench.measure.measurement import epoch_windows, eval_window
from trainbench.measure.training_facts import (
    model_facts,
    settings_facts,
    task_facts,
    verification_facts,
)

if TYPE_CHECKING:
    from trainbench.measure.training import TrainingLoop


def loop_result(loop: TrainingLoop) -> dict:
    """The run's result for the record (see docs/statistics.md for every part)."""
    window = loop._window()
    start = window["start_step"]
    for row, part in zip(
        loop.epoch_rows, epoch_windows(loop.step_seconds, loop.step_samples, start), strict=True
    ):
        row.update(part)
    timed = loop.step_seconds + loop.extension_seconds
    in_regions = sum(sum(region) for region in timed) - (loop.first_step_seconds or 0)
    region_seconds = sum(loop.timer.region_seconds)
    waits = loop.data_wait[start:]
    window["timed"]["region_seconds"] = region_seconds
    window["timed"]["steps_vs_regions"] = in_regions / region_seconds if region_seconds else None
    window["warmup"].update(
        configured_steps=loop.warmup_steps, first_step_seconds=loop.first_step_seconds
    )
    return {
        "kind": "training",
        "model": model_facts(loop.parts),
        "settings": settings_facts(loop),
        "epochs": loop.epoch_rows,
        "steps": {
            "seconds": loop.step_seconds,
            "losses": loop.step_losses,
            "samples": loop.step_samples,
            "extension_seconds": loop.extension_seconds,
            "method": loop.timer.method + "; step 0 alone, synchronized at both edges; "
            "losses: each step's training loss (float64 copies of the device values, "
            "collected once per epoch)",
        },
        "extension": loop._extension(),
        **{k: window[k] for k in ("steady_state", "warmup", "timed")},
        "window_phase": loop.phase,
        "step_latency_s": window["step_latency_s"],
        "outliers": window["outliers"],
        "timing_method": loop.timer.method,
        "data_wait": {
            "seconds": float(sum(waits)),
            "per_step_mean_s": float(sum(waits)) / len(waits) if waits else None,
            "method": "host time blocked fetching the next batch (loader, plus enqueueing "
            "its copy to the device), steps of the measurement window",
        },
        "eval": eval_window(loop.eval_passes, loop.protocol),
        "quality": loop.quality.summary(),
        "step_breakdown": loop.breakdown,
        "eval_parity": loop.eval_parity,
        "host": loop.host.summary(),
        "memory": loop.memory.summary(),
        "energy": loop.energy.summary(samples=sum(loop.step_samples[1:])),
        "verification": verification_facts(loop),
        "task": task_facts(loop.parts, loop.epoch_rows),
    }
