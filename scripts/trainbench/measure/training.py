"""The one training loop every training workload runs through.

A workload supplies its model, optimizer, loaders, a loss function and an
evaluation function (:class:`TrainingParts`). The loop owns what makes the numbers
honest and comparable across devices, through small trackers
(:mod:`trainbench.measure.trackers`): every step timed (events or clock) inside regions
synchronized only at their edges, steady state detected from that series
(:mod:`trainbench.measure.steady`), evaluation timed apart with the cold first pass
reported apart, memory per epoch, energy per domain over the timed regions, other
processes' CPU use, placement and autocast checks after the first step, NaN detection.
See docs/statistics.md.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Iterator

import torch
from tqdm import tqdm
from trainbench.measure import eval_calibration, eval_parity, quality, step_breakdown, wall_time
from trainbench.measure.context import RunContext, check_autocast_kernels
from trainbench.measure.data import batch_size_of, host_float64, staged_batches
from trainbench.measure.devices import AmpPolicy
from trainbench.measure.heap import frozen_heap
from trainbench.measure.loop_state import LoopState, LoopTrackers, loop_settings, measured_window
from trainbench.measure.measurement import UNSTEADY_RETRIES, extension_steps_needed
from trainbench.measure.parts import (
    COMPILE_ERROR_NAMES,
    CompileFailedError,
    NonFiniteLossError,
    TrainingParts,
)
from trainbench.measure.parts_contract import check_evaluation, check_loss_output
from trainbench.measure.trackers import (
    EVAL,
    TRAIN,
    AutocastProbe,
    EnergyTracker,
    MemoryTracker,
    StepTimer,
    TimedRegion,
    autocast_facts,
    verify_placement,
)
from trainbench.measure.trackers.host import host_activity
from trainbench.measure.training_result import loop_result

# At most this many extension regions (each re-measures the window first).
MAX_EXTENSION_REGIONS = 8


def is_compile_error(exc: BaseException) -> bool:
    return any(cls.__name__ in COMPILE_ERROR_NAMES for cls in type(exc).__mro__)


def compile_step(loss_fn: Callable, mode: str) -> Callable:
    """The workload's loss function (model forward + loss; backward through
    AOTAutograd) under torch.compile. Errors are raised, never suppressed."""
    import torch._dynamo

    torch._dynamo.config.suppress_errors = False
    return torch.compile(loss_fn, mode=mode)


def _progress(ctx: RunContext, total: int, desc: str):
    mode = ctx.spec["launcher"].get("progress", "auto")
    tty = sys.stderr.isatty()
    return tqdm(
        total=total,
        desc=desc,
        file=sys.stderr,
        disable=mode == "never",
        mininterval=0.5 if (tty or mode == "always") else 15.0,
        ascii=not tty,
        leave=True,
    )


class TrainingLoop:
    """One run of one cell: epochs of timed steps, evaluation, trackers, the result."""

    def __init__(self, parts: TrainingParts, ctx: RunContext):
        self.parts, self.ctx = parts, ctx
        self.device, self.dev = ctx.torch_device, ctx.device
        # A float64 reference run (trainbench.launch.reference) computes without autocast.
        self.reference = ctx.spec.get("reference")
        self.amp = (
            AmpPolicy(False, None, False, "float64 reference: autocast off")
            if self.reference
            else ctx.amp
        )
        self.scheduler_steps = True
        self.autocast_dtype = getattr(torch, self.amp.dtype) if self.amp.enabled else None
        self.scaler = self.dev.make_grad_scaler(self.amp)
        # Fixed for the run (the record's settings), and what it has measured so far:
        # the loop's helpers read these (trainbench.measure.loop_state), never the loop.
        self.settings = settings = loop_settings(parts, ctx, self.scaler is not None)
        self.state = LoopState()
        self.steps_per_epoch = settings.steps_per_epoch
        self.compile_mode = settings.compile_mode
        self.loss_fn = (
            compile_step(parts.loss_fn, self.compile_mode) if self.compile_mode else parts.loss_fn
        )
        self.timer = StepTimer(self.dev)
        self.host = host_activity(ctx.spec, self.dev, torch.get_num_threads())
        self.memory = MemoryTracker(self.dev)
        # Only a device without a peak-memory API (MPS) samples memory inside the steps.
        self.sample_memory = self.memory.per_step
        # Energy first: its counters are read before the step timer's first event and
        # after its last, never inside a step. Made last: it samples idle power now.
        self.energy = EnergyTracker(self.dev, settings.protocol.min_energy_seconds)
        # The step timer last: it starts right before the region's clock and stops
        # right after it, so the other trackers' bookkeeping (psutil, counters) is in
        # neither the steps' times nor the region's wall time.
        self.trackers = [self.energy, self.host, self.memory, self.timer]
        # Compiled steps keep a copy (a CUDA-graph replay overwrites its outputs).
        self._keep = _detached_copy if self.compile_mode else _detached
        cadence = quality.eval_cadence(ctx.spec, self.steps_per_epoch, settings.epochs)
        self.eval_unit, self.eval_every = cadence[:2]
        self.quality = quality.QualityCurve(*cadence)  # evaluation passes: timing.eval_every
        self.final_evaluation: eval_parity.FinalEvaluation | None = None
        self._autocast_flag: bool | None = None
        self.started_at = time.perf_counter()

    # -- one step ------------------------------------------------------------------

    def train_step(self, batch: dict, step_in_epoch: int) -> tuple[torch.Tensor, dict]:
        """Forward, backward and (every ``accumulation`` micro-steps) the optimizer
        step. Never synchronizes."""
        if self.state.global_step == 1 and self.ctx.fault:
            self.ctx.inject_fault()
        if self.compile_mode is not None and self.device.type == "cuda":
            torch.compiler.cudagraph_mark_step_begin()
        try:
            with torch.autocast(
                device_type=self.device.type, dtype=self.autocast_dtype, enabled=self.amp.enabled
            ):
                output = self.loss_fn(self.parts.model, batch)
                if self.state.global_step == 0:
                    check_loss_output(output, self.ctx)  # (loss, stats), named if not
                    self._autocast_flag = torch.is_autocast_enabled(self.device.type)
                loss, stats = output
        except Exception as exc:
            if self.compile_mode and is_compile_error(exc):
                raise CompileFailedError(
                    f"torch.compile(mode={self.compile_mode!r}) failed: {type(exc).__name__}: {exc}"
                ) from exc
            raise
        if self.ctx.fault == "nan_loss" and self.state.global_step >= 1:
            loss = loss * float("nan")
        if self.sample_memory:
            self.memory.sample()
        accumulation = self.settings.accumulation
        scaled = loss / accumulation if accumulation > 1 else loss
        (self.scaler.scale(scaled) if self.scaler is not None else scaled).backward()
        if self.sample_memory:
            self.memory.sample()
        last = step_in_epoch + 1 == self.steps_per_epoch
        if (step_in_epoch + 1) % accumulation == 0 or last:
            self._optimizer_step()
        keep = self._keep
        return keep(loss), {name: keep(value) for name, value in stats.items()}

    def _optimizer_step(self) -> None:
        if self.scaler is not None:
            self.scaler.step(self.parts.optimizer)
            self.scaler.update()
        else:
            self.parts.optimizer.step()
        self.parts.optimizer.zero_grad(set_to_none=True)
        if self.parts.step_scheduler is not None and self.scheduler_steps:
            self.parts.step_scheduler.step()
        if self.sample_memory:
            self.memory.sample()

    def _first_step(self, batch: dict) -> tuple[torch.Tensor, dict]:
        """Step 0, outside every timed region: synchronized at both edges (it holds
        compilation and lazy initialisation), then the placement and autocast checks,
        which synchronize themselves."""
        probe = AutocastProbe(self.parts.model)
        self.dev.synchronize()
        t0 = time.perf_counter()
        out = self.train_step(batch, 0)
        self.dev.synchronize()
        self.state.first_step_seconds = time.perf_counter() - t0
        probe.remove()
        verification = verify_placement(
            self.parts.model, self.parts.optimizer, batch, self.device.type
        )
        verification.update(autocast_facts(self.amp, self._autocast_flag, probe))
        self.state.verification = verification
        if self.ctx.fault == "silent_corruption":
            print("Error: command buffer exited with error status. (injected)", file=sys.stderr)
            sys.stderr.flush()
        return out

    # -- epochs ----------------------------------------------------------------------

    def run_epoch(self, epoch: int) -> None:
        parts, state = self.parts, self.state
        facts = parts.before_epoch(epoch) if parts.before_epoch else {}
        parts.model.train()
        epoch_start = time.perf_counter()
        losses, stats, seconds = self.train_epoch_steps(epoch)
        train_seconds = time.perf_counter() - epoch_start - self.quality.mid_epoch_seconds(epoch)
        state.step_seconds.append(seconds)
        state.step_losses.append(host_float64(torch.stack(losses)).tolist())
        mean_loss = math.fsum(state.step_losses[-1]) / self.steps_per_epoch
        if not math.isfinite(mean_loss):
            raise NonFiniteLossError(
                f"training loss is {mean_loss} in epoch {epoch} (device {self.device})"
            )
        sums = {k: float(torch.stack(v).sum().item()) for k, v in stats.items()}
        samples = sum(state.step_samples[-self.steps_per_epoch :])
        train_metrics = parts.train_metrics(sums, samples) if parts.train_metrics else {}
        if parts.scheduler is not None:
            parts.scheduler.step()
        evaluation = self.evaluate(epoch) if self.evaluates_after(epoch) else quality.NO_EVALUATION
        row = {
            "epoch": epoch,
            "train_loss": mean_loss,
            "train_seconds": train_seconds,
            "steps": self.steps_per_epoch,
            "samples": samples,
            "train_metrics": train_metrics,
            "eval_seconds": evaluation["seconds"],
            "eval_samples": evaluation["samples"],
            "eval_cold": evaluation["cold"],
            "eval_metrics": evaluation["metrics"],
            "lr": float(parts.optimizer.param_groups[0]["lr"]),
            "memory": self.memory.epoch_end(epoch),
        }
        if facts:
            row["extra"] = facts
        state.epoch_rows.append(row)

    def evaluates_after(self, epoch: int) -> bool:
        """Whether ``epoch`` ends with an evaluation: every ``eval_every`` epochs, and
        the last one always (parity and the task's metrics read it)."""
        last = epoch == self.settings.epochs
        every_epoch = self.eval_unit == quality.PER_EPOCH
        return last or every_epoch or (self.eval_unit == "epochs" and epoch % self.eval_every == 0)

    def train_epoch_steps(self, epoch: int) -> tuple[list, dict, list[float]]:
        """One epoch's steps: one timed region, or, with ``eval_every: {steps: N}``,
        one region per stretch between evaluations (:func:`.quality.stretches`), each
        pass outside them and the model back in training mode after it. Returns the
        epoch's losses, stats and step seconds, as one region would."""
        if self.eval_unit == "epochs":
            return self.train_steps(epoch, self.steps_per_epoch)
        losses: list = []
        stats: dict[str, list] = {}
        seconds: list[float] = []
        batches = self.batches()
        plan = (
            quality.epoch_stretches(self.steps_per_epoch, self.eval_every)
            if self.eval_unit == quality.PER_EPOCH
            else quality.stretches(
                self.state.global_step,
                self.steps_per_epoch,
                self.eval_every,
                self.evaluates_after(epoch),
            )
        )
        for start, stop, evaluate in plan:
            part = self.train_steps(epoch, stop - start, batches, start=start)
            losses += part[0]
            for name, values in part[1].items():
                stats.setdefault(name, []).extend(values)
            seconds += part[2]
            if evaluate:
                t0 = time.perf_counter()
                self.evaluate(epoch, epoch_end=False)
                self.parts.model.train()
                self.quality.mid_epoch[epoch] += time.perf_counter() - t0
        return losses, stats, seconds

    def train_steps(
        self, epoch: int, steps: int, batches: Iterator[dict] | None = None, start: int = 0
    ) -> tuple[list, dict, list[float]]:
        """The first ``steps`` steps of one epoch (its data loader started afresh; or the
        next ``steps`` of ``batches``, the epoch's steps ``start`` on) in one timed region. Per-step losses and stats stay
        on the device and are collected once per epoch: no reduction kernel inside the
        timed steps. Inside the region each step adds to the bare training step only what
        the measurement needs (benchmarks/README.md lists it with its cost): the data
        wait's two clock reads, the batch's sample count, the loss and stats kept
        (detached), one timing event (the clock on the CPU), and memory samples on MPS.
        The progress bar advances at the region's edges."""
        losses: list[torch.Tensor] = []
        stats: dict[str, list[torch.Tensor]] = {}
        seconds: list[float] = []
        state = self.state
        bar = _progress(self.ctx, steps, f"{self.ctx.label} epoch {epoch}/{self.settings.epochs}")
        if batches is None:
            batches = self.batches()

        def keep(out: tuple[torch.Tensor, dict], n: int) -> None:
            losses.append(out[0])
            for name, value in out[1].items():
                stats.setdefault(name, []).append(value)
            state.step_samples.append(n)
            state.global_step += 1

        first = 0
        if state.global_step == 0:
            batch = next(batches)
            keep(self._first_step(batch), batch_size_of(batch))
            seconds.append(state.first_step_seconds or 0.0)
            state.data_wait.append(0.0)
            bar.update(1)
            first = 1
        self.timer.prepare(steps - first)
        clock, waits, mark = time.perf_counter, state.data_wait, self.timer.mark_step
        with TimedRegion(self.dev, self.trackers, TRAIN):
            for step_in_epoch in range(start + first, start + steps):
                wait_t0 = clock()
                batch = next(batches)  # host fetch + (pinned, non-blocking) copy to the device
                waits.append(clock() - wait_t0)
                keep(self.train_step(batch, step_in_epoch), batch_size_of(batch))
                mark()
        bar.update(steps - first)
        bar.close()
        seconds.extend(self.timer.regions[-1])
        return losses, stats, seconds

    def batches(self) -> Iterator[dict]:
        """One pass over the training loader, each batch on the device."""
        settings = self.settings
        return staged_batches(
            self.parts.train_loader, self.device, settings.pinned, settings.prefetch
        )

    def endless_batches(self) -> Iterator[dict]:
        """The training loader pass after pass (the extension's batches)."""
        while True:
            yield from self.batches()

    # -- a window long enough ----------------------------------------------------------

    def extend_short_window(self) -> None:
        """More timed training steps after the last epoch while the window (or the
        energy window) is below its minimum — as pyperf calibrates its loops and
        criterion extends to a target time, rather than publishing a short window.
        The steps continue training the final model on the training loader, in timed
        regions like an epoch's, with no evaluation and no learning-rate step; the
        task's metrics and losses come from the configured epochs only. At most
        ``timing.max_extension_seconds`` of steps (docs/statistics.md §1); more regions
        for no steady state (UNSTEADY_RETRIES), for stalls above timing.max_stall_share."""
        protocol, state = self.settings.protocol, self.state
        if not protocol.extend_short_windows or self.reference:
            return
        spent, budget, retries = 0.0, protocol.max_extension_seconds, UNSTEADY_RETRIES
        self.scheduler_steps = False
        self.parts.model.train()
        batches = self.endless_batches()
        for _ in range(MAX_EXTENSION_REGIONS):
            need = extension_steps_needed(
                measured_window(self.settings, state),
                self.energy.measured_seconds(TRAIN),
                protocol,
                budget - spent,
                retry_unsteady=retries > 0,
            )
            if need is None:
                break
            steps, reason = need
            retries -= int("no steady state" in reason)
            if reason not in (state.extension_reason or ""):
                state.extension_reason = "; ".join(filter(None, [state.extension_reason, reason]))
            label = len(state.step_seconds) + len(state.extension_seconds) + 1
            _, _, seconds = self.train_steps(label, steps, batches)
            state.extension_seconds.append(seconds)
            spent += sum(seconds)

    # -- evaluation ------------------------------------------------------------------

    def evaluate(self, epoch: int | None, epoch_end: bool = True, tracked: bool = True) -> dict:
        """One evaluation pass, timed apart with synchronized edges; the first pass
        of the run is the cold one. ``epoch`` None: a calibration pass (metrics unused).
        Every pass during training is a point of the quality curve; ``epoch_end`` False:
        a pass inside the epoch (``eval_every: {steps: N}``). ``tracked`` False: no
        energy or host reading at its edges (calibration reads them around its passes)."""
        parts = self.parts
        parts.model.eval()
        with (
            quality.rng_untouched(self.device),  # the pass draws nothing training sees
            TimedRegion(self.dev, [self.energy, self.host] if tracked else [], EVAL) as region,
            torch.no_grad(),
            torch.autocast(
                device_type=self.device.type, dtype=self.autocast_dtype, enabled=self.amp.enabled
            ),
        ):
            evaluation = parts.evaluate(parts.model, parts.eval_loader, self.ctx)
        check_evaluation(evaluation, parts, self.ctx, parts.score)
        evaluation = eval_parity.faulted(evaluation, self.ctx)  # a test fault, else as is
        if epoch == self.settings.epochs and epoch_end and eval_parity.wanted(self.ctx.spec):
            self.final_evaluation = eval_parity.FinalEvaluation.take(parts.model, dict(evaluation))
        outputs = evaluation.pop("outputs", None)
        if epoch is not None and parts.score is not None:
            evaluation["metrics"] = parts.score(outputs)
        passed = {
            "epoch": epoch,
            "seconds": region.seconds,
            "samples": int(evaluation["samples"]),
            "cold": not self.state.eval_passes,
        }
        self.state.eval_passes.append(passed)
        if epoch is not None:
            self.quality.add(
                epoch,
                epoch_end,
                region.seconds,
                evaluation.get("metrics"),
                steps=self.state.global_step,
                step_samples=self.state.step_samples,
                region_seconds=self.timer.region_seconds,
                energy=self.energy.train_joules(),
            )
        return {**passed, "metrics": evaluation.get("metrics")}

    def calibrate_evaluation(self) -> None:
        """The timed passes of the final model that bring the warm passes to the minimum
        window, counted from their median (as pyperf calibrates its loops), within
        timing.max_eval_seconds and max_eval_passes; the energy and host trackers read
        once around them (trainbench.measure.eval_calibration.calibrate_between)."""
        untracked = lambda: self.evaluate(None, tracked=False)  # noqa: E731
        self.state.eval_calibration = eval_calibration.calibrate_between(
            self.energy, self.host, untracked, self.state.eval_passes, self.settings.protocol
        )

    # -- where a step's time goes (after every timed region) --------------------------

    def diagnose_steps(self) -> None:
        """The diagnostic pass (trainbench.measure.step_breakdown) of the loop's own step,
        after the last timed region, with no learning-rate step; none for a float64
        reference. An error in it is recorded, never the cell's."""
        settings = step_breakdown.settings_in_force(self.ctx.spec)
        if self.reference or settings is None:
            return
        self.scheduler_steps = False
        self.parts.model.train()
        steps = step_breakdown.DiagnosticSteps(
            self.train_step,
            self.endless_batches(),
            self.dev.synchronize,
            self.device.type,
            self.steps_per_epoch,
        )
        self.state.breakdown = step_breakdown.run(steps, settings, self.started_at)

    # -- result ------------------------------------------------------------------------

    def run(self) -> dict:
        self.started_at = time.perf_counter()  # the diagnostic pass's budget counts from here
        with frozen_heap():
            for epoch in range(1, self.settings.epochs + 1):
                self.run_epoch(epoch)
            self.calibrate_evaluation()
            self.extend_short_window()
            self.diagnose_steps()
            final = self.final_evaluation
            self.state.eval_parity = eval_parity.run(self.parts, self.ctx, final)
        with wall_time.span("analysis"):
            result = self.result()
        return self.parts.finish(result) if self.parts.finish is not None else result

    def result(self) -> dict:
        """The run's result for the record (:func:`.training_result.loop_result`)."""
        trackers = LoopTrackers(self.timer, self.host, self.memory, self.energy, self.quality)
        return loop_result(self.parts, self.ctx, self.settings, self.state, trackers)


def _detached(value: torch.Tensor) -> torch.Tensor:
    return value.detach()


def _detached_copy(value: torch.Tensor) -> torch.Tensor:
    return value.detach().clone()


def run_training(parts: TrainingParts, ctx: RunContext) -> dict:
    """Train and evaluate ``parts`` as the cell's spec says; the run's result. A CPU
    that cannot run the model's kernels in the cell's autocast dtype raises
    PrecisionUnavailable first (the cell is then recorded ``unavailable``)."""
    check_autocast_kernels(parts.model, ctx)
    return TrainingLoop(parts, ctx).run()


__all__ = [
    "CompileFailedError",
    "NonFiniteLossError",
    "TrainingLoop",
    "TrainingParts",
    "compile_step",
    "is_compile_error",
    "run_training",
]
