"""A training run's result, as its record holds it: the measurement window and its
steady state, per-step times and losses, evaluation, trackers, facts
(docs/statistics.md, "The protocol of one cell"). Read from the loop's settings, state
and trackers (:mod:`trainbench.measure.loop_state`), never from the loop itself."""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainbench.measure.loop_state import measured_window
from trainbench.measure.measurement import UNSTEADY_RETRIES, epoch_windows, eval_window
from trainbench.measure.training_facts import (
    model_facts,
    settings_facts,
    task_facts,
    verification_facts,
)

if TYPE_CHECKING:
    from trainbench.measure.context import RunContext
    from trainbench.measure.loop_state import LoopSettings, LoopState, LoopTrackers
    from trainbench.measure.parts import TrainingParts


def extension_facts(state: LoopState) -> dict:
    """The record's ``extension``: the timed regions after the last epoch."""
    seconds = [s for region in state.extension_seconds for s in region]
    return {
        "regions": len(state.extension_seconds),
        "steps": len(seconds),
        "seconds": float(sum(seconds)),
        "reason": state.extension_reason,
        "method": "timed training steps after the last epoch (training loader pass "
        "after pass, no evaluation, no learning-rate step) until the window reaches "
        "timing.min_timed_seconds and min_timed_steps (and the energy window "
        "timing.min_energy_seconds) with a 20% margin, and until its stalls take at most "
        "timing.max_stall_share of it with the same margin; a run with no steady state "
        f"gets up to {UNSTEADY_RETRIES} regions of half its steps so far; at most "
        "timing.max_extension_seconds",
    }


def loop_result(
    parts: TrainingParts,
    ctx: RunContext,
    settings: LoopSettings,
    state: LoopState,
    trackers: LoopTrackers,
) -> dict:
    """The run's result for the record (see docs/statistics.md for every part)."""
    window = measured_window(settings, state)
    start = window["start_step"]
    for row, part in zip(
        state.epoch_rows,
        epoch_windows(state.step_seconds, state.step_samples, start),
        strict=True,
    ):
        row.update(part)
    timer = trackers.timer
    timed = state.step_seconds + state.extension_seconds
    in_regions = sum(sum(region) for region in timed) - (state.first_step_seconds or 0)
    region_seconds = sum(timer.region_seconds)
    waits = state.data_wait[start:]
    window["timed"]["region_seconds"] = region_seconds
    window["timed"]["steps_vs_regions"] = in_regions / region_seconds if region_seconds else None
    window["warmup"].update(
        configured_steps=settings.warmup_steps, first_step_seconds=state.first_step_seconds
    )
    return {
        "kind": "training",
        "model": model_facts(parts),
        "settings": settings_facts(parts, settings),
        "epochs": state.epoch_rows,
        "steps": {
            "seconds": state.step_seconds,
            "losses": state.step_losses,
            "samples": state.step_samples,
            "extension_seconds": state.extension_seconds,
            **timer.reading_facts(),
            "method": timer.method + "; step 0 alone, synchronized at both edges; "
            "losses: each step's training loss (float64 copies of the device values, "
            "collected once per epoch)",
        },
        "extension": extension_facts(state),
        **{k: window[k] for k in ("steady_state", "warmup", "timed")},
        "window_phase": settings.phase,
        "step_latency_s": window["step_latency_s"],
        "outliers": window["outliers"],
        "timing_method": timer.method,
        "data_wait": {
            "seconds": float(sum(waits)),
            "per_step_mean_s": float(sum(waits)) / len(waits) if waits else None,
            "method": "host time blocked fetching the next batch (loader, plus enqueueing "
            "its copy to the device), steps of the measurement window",
        },
        "eval": eval_window(state.eval_passes, settings.protocol, state.eval_calibration),
        "quality": trackers.quality.summary(),
        "step_breakdown": state.breakdown,
        "eval_parity": state.eval_parity,
        "host": trackers.host.summary(),
        "memory": trackers.memory.summary(),
        "energy": trackers.energy.summary(samples=sum(state.step_samples[1:])),
        "verification": verification_facts(state.verification, ctx.warnings),
        "task": task_facts(parts, state.epoch_rows),
    }
