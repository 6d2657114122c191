"""What the training loop's helpers read, defined below the loop so that none of them
imports it (MosaicML Composer's ``State``): the loop's settings, fixed when it starts
(:class:`LoopSettings`), what it has measured so far (:class:`LoopState`) and the
trackers whose summaries its record holds (:class:`LoopTrackers`).

The loop (:mod:`trainbench.measure.training`) fills them; the result
(:mod:`.training_result`) and its facts (:mod:`.training_facts`) read them. The other
helpers take plain values: evaluation parity the parts and the context
(:mod:`.eval_parity`), the diagnostic pass the loop's step and batches
(:mod:`.step_breakdown`), the quality curve the counts at each pass (:mod:`.quality`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from trainbench.measure.measurement import TimingProtocol, measurement_window, window_phase
from trainbench.measure.parts_contract import check_full_batch

if TYPE_CHECKING:
    from trainbench.measure.context import RunContext
    from trainbench.measure.parts import TrainingParts
    from trainbench.measure.quality import QualityCurve
    from trainbench.measure.trackers import EnergyTracker, HostActivity, MemoryTracker, StepTimer


@dataclass(frozen=True)
class LoopSettings:
    """How one training loop trains, fixed when it starts (the record's ``settings``)."""

    batch_size: int
    epochs: int
    warmup_steps: int
    accumulation: int  # micro-steps per optimizer step (gradient_accumulation)
    steps_per_epoch: int
    protocol: TimingProtocol
    phase: dict | None  # the schedule phase the window is held to (window_phase)
    window_floor: int  # the window's earliest step: the warm-up, or the phase's first step
    staged: bool  # the training data staged on the device once
    prefetch: bool  # the next batch copied to the device on a side stream (CUDA)
    pinned: bool  # pinned memory: the copies to the device are non-blocking
    compile_mode: str | None  # torch.compile's mode, None: eager
    grad_scaler: bool


def loop_settings(parts: TrainingParts, ctx: RunContext, grad_scaler: bool) -> LoopSettings:
    """The settings the loop over ``parts`` trains with in the cell of ``ctx``."""
    settings = ctx.workload_settings
    check_full_batch(parts, ctx)
    steps = len(parts.train_loader)  # type: ignore[arg-type]
    max_steps = settings.get("max_steps_per_epoch")
    steps_per_epoch = min(steps, int(max_steps)) if max_steps else steps
    phase = window_phase(parts.epoch_phases, steps_per_epoch)
    warmup_steps = int(settings["warmup_steps"])
    staged = bool(getattr(parts.train_loader, "on_device", False))
    prefetch = bool(ctx.device.settings.get("prefetch_to_device", False))
    return LoopSettings(
        batch_size=ctx.batch_size,
        epochs=int(settings["epochs"]),
        warmup_steps=warmup_steps,
        accumulation=int(settings.get("gradient_accumulation", 1)),
        steps_per_epoch=steps_per_epoch,
        protocol=TimingProtocol.from_spec(ctx.spec),
        phase=phase,
        window_floor=max(warmup_steps, phase["first_step"] if phase else 0),
        staged=staged,
        prefetch=prefetch and ctx.torch_device.type == "cuda" and not staged,
        pinned=bool(ctx.loader_kwargs.get("pin_memory")),
        compile_mode=ctx.spec.get("compile"),
        grad_scaler=grad_scaler,
    )


@dataclass
class LoopState:
    """What one run has measured so far: the loop appends, the result reads."""

    global_step: int = 0
    step_seconds: list[list[float]] = field(default_factory=list)  # one list per epoch
    step_losses: list[list[float]] = field(default_factory=list)  # the same steps' losses
    # Timed regions after the last epoch that lengthen a window below the minimum
    # (timing.extend_short_windows): no evaluation, no learning-rate steps.
    extension_seconds: list[list[float]] = field(default_factory=list)
    extension_reason: str | None = None
    step_samples: list[int] = field(default_factory=list)
    data_wait: list[float] = field(default_factory=list)
    eval_passes: list[dict] = field(default_factory=list)
    eval_calibration: dict | None = None  # trainbench.measure.eval_calibration, after training
    epoch_rows: list[dict] = field(default_factory=list)
    verification: dict = field(default_factory=dict)
    first_step_seconds: float | None = None
    breakdown: dict | None = None  # the diagnostic pass (trainbench.measure.step_breakdown)
    eval_parity: dict | None = None  # trainbench.measure.eval_parity, after it


@dataclass(frozen=True)
class LoopTrackers:
    """The loop's trackers and its quality curve, whose summaries the record holds."""

    timer: StepTimer
    host: HostActivity
    memory: MemoryTracker
    energy: EnergyTracker
    quality: QualityCurve


def measured_window(settings: LoopSettings, state: LoopState) -> dict:
    """The measurement window over every timed step so far (extension included)."""
    return measurement_window(
        state.step_seconds + state.extension_seconds,
        state.step_samples,
        settings.window_floor,
        settings.protocol,
    )
