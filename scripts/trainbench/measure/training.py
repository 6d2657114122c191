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
from trainbench.measure import eval_parity, quality, step_breakdown, wall_time
from trainbench.measure.context import RunContext, check_autocast_kernels
from trainbench.measure.data import batch_size_of, staged_batches
from trainbench.measure.devices import AmpPolicy
from trainbench.measure.heap import frozen_heap
from trainbench.measure.measurement import (
    TimingProtocol,
    extension_steps_needed,
    measurement_window,
    window_phase,
)
from trainbench.measure.parts import (
    COMPILE_ERROR_NAMES,
    CompileFailedError,
    NonFiniteLossError,
    TrainingParts,
)
from trainbench.measure.parts_contract import check_evaluation, check_full_batch, check_loss_output
from trainbench.measure.trackers import (
    EVAL,
    TRAIN,
    AutocastProbe,
    EnergyTracker,
    HostActivity,
    MemoryTracker,
    StepTimer,
    TimedRegion,
    autocast_facts,
    verify_placement,
)
from trainbench.measure.training_result import loop_result

# At most this many extension regions (each re-measures the window first).
MAX_EXTENSION_REGIONS = 5


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
        settings = ctx.workload_settings
        self.parts, self.ctx = parts, ctx
        self.device, self.dev = ctx.torch_device, ctx.device
        self.protocol = TimingProtocol.from_spec(ctx.spec)
        self.epochs = int(settings["epochs"])
        self.warmup_steps = int(settings["warmup_steps"])
        self.accumulation = int(settings.get("gradient_accumulation", 1))
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
        self.non_blocking = bool(ctx.loader_kwargs.get("pin_memory"))
        self.staged = bool(getattr(parts.train_loader, "on_device", False))
        prefetch = bool(self.dev.settings.get("prefetch_to_device", False))
        self.prefetch = prefetch and self.device.type == "cuda" and not self.staged
        self.compile_mode = ctx.spec.get("compile")
        self.loss_fn = (
            compile_step(parts.loss_fn, self.compile_mode) if self.compile_mode else parts.loss_fn
        )
        self.steps_per_epoch = self._steps_per_epoch(settings.get("max_steps_per_epoch"))
        self.phase = window_phase(parts.epoch_phases, self.steps_per_epoch)
        # The window's earliest step: the warm-up, or the last phase's first step.
        self.window_floor = max(self.warmup_steps, self.phase["first_step"] if self.phase else 0)
        self.timer = StepTimer(self.dev)
        self.host = HostActivity(self.protocol.disturbed_other_cores)
        self.memory = MemoryTracker(self.dev)
        # Only a device without a peak-memory API (MPS) samples memory inside the steps.
        self.sample_memory = self.memory.per_step
        # Energy first: its counters are read before the step timer's first event and
        # after its last, never inside a step. Made last: it samples idle power now.
        self.energy = EnergyTracker(self.dev, self.protocol.min_energy_seconds)
        # The step timer last: it starts right before the region's clock and stops
        # right after it, so the other trackers' bookkeeping (psutil, counters) is in
        # neither the steps' times nor the region's wall time.
        self.trackers = [self.energy, self.host, self.memory, self.timer]
        # Compiled steps keep a copy (a CUDA-graph replay overwrites its outputs).
        self._keep = _detached_copy if self.compile_mode else _detached
        # How often training stops for an evaluation pass (timing.eval_every).
        self.eval_unit, self.eval_every, cadence = quality.eval_cadence(
            ctx.spec, self.steps_per_epoch * self.epochs
        )
        self.quality = quality.QualityCurve(self.eval_unit, self.eval_every, cadence)
        self.step_seconds: list[list[float]] = []  # one list per configured epoch
        self.step_losses: list[list[float]] = []  # the same steps' losses
        # Timed regions after the last epoch that lengthen a window below the minimum
        # (timing.extend_short_windows): no evaluation, no learning-rate steps.
        self.extension_seconds: list[list[float]] = []
        self.extension_reason: str | None = None
        self.step_samples: list[int] = []
        self.data_wait: list[float] = []
        self.eval_passes: list[dict] = []
        self.epoch_rows: list[dict] = []
        self.verification: dict = {}
        self.first_step_seconds: float | None = None
        self.breakdown: dict | None = None  # the diagnostic pass (diagnose_steps)
        self.final_evaluation: eval_parity.FinalEvaluation | None = None
        self.eval_parity: dict | None = None  # trainbench.measure.eval_parity, after it
        self._autocast_flag: bool | None = None
        self.global_step = 0
        self.started_at = time.perf_counter()

    def _steps_per_epoch(self, max_steps) -> int:
        check_full_batch(self.parts, self.ctx)
        steps = len(self.parts.train_loader)  # type: ignore[arg-type]
        return min(steps, int(max_steps)) if max_steps else steps

    # -- one step ------------------------------------------------------------------

    def train_step(self, batch: dict, step_in_epoch: int) -> tuple[torch.Tensor, dict]:
        """Forward, backward and (every ``accumulation`` micro-steps) the optimizer
        step. Never synchronizes."""
        if self.global_step == 1 and self.ctx.fault:
            self.ctx.inject_fault()
        if self.compile_mode is not None and self.device.type == "cuda":
            torch.compiler.cudagraph_mark_step_begin()
        try:
            with torch.autocast(
                device_type=self.device.type, dtype=self.autocast_dtype, enabled=self.amp.enabled
            ):
                output = self.loss_fn(self.parts.model, batch)
                if self.global_step == 0:
                    check_loss_output(output, self.ctx)  # (loss, stats), named if not
                    self._autocast_flag = torch.is_autocast_enabled(self.device.type)
                loss, stats = output
        except Exception as exc:
            if self.compile_mode and is_compile_error(exc):
                raise CompileFailedError(
                    f"torch.compile(mode={self.compile_mode!r}) failed: {type(exc).__name__}: {exc}"
                ) from exc
            raise
        if self.ctx.fault == "nan_loss" and self.global_step >= 1:
            loss = loss * float("nan")
        if self.sample_memory:
            self.memory.sample()
        scaled = loss / self.accumulation if self.accumulation > 1 else loss
        (self.scaler.scale(scaled) if self.scaler is not None else scaled).backward()
        if self.sample_memory:
            self.memory.sample()
        last = step_in_epoch + 1 == self.steps_per_epoch
        if (step_in_epoch + 1) % self.accumulation == 0 or last:
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
        self.first_step_seconds = time.perf_counter() - t0
        probe.remove()
        self.verification = verify_placement(
            self.parts.model, self.parts.optimizer, batch, self.device.type
        )
        self.verification.update(autocast_facts(self.amp, self._autocast_flag, probe))
        if self.ctx.fault == "silent_corruption":
            print("Error: command buffer exited with error status. (injected)", file=sys.stderr)
            sys.stderr.flush()
        return out

    # -- epochs ----------------------------------------------------------------------

    def run_epoch(self, epoch: int) -> None:
        parts = self.parts
        facts = parts.before_epoch(epoch) if parts.before_epoch else {}
        parts.model.train()
        epoch_start = time.perf_counter()
        losses, stats, seconds = self.train_epoch_steps(epoch)
        train_seconds = time.perf_counter() - epoch_start - self.quality.mid_epoch_seconds(epoch)
        self.step_seconds.append(seconds)
        self.step_losses.append(torch.stack(losses).double().tolist())
        mean_loss = math.fsum(self.step_losses[-1]) / self.steps_per_epoch
        if not math.isfinite(mean_loss):
            raise NonFiniteLossError(
                f"training loss is {mean_loss} in epoch {epoch} (device {self.device})"
            )
        sums = {k: float(torch.stack(v).sum().item()) for k, v in stats.items()}
        samples = sum(self.step_samples[-self.steps_per_epoch :])
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
        self.epoch_rows.append(row)

    def evaluates_after(self, epoch: int) -> bool:
        """Whether ``epoch`` ends with an evaluation: every ``eval_every`` epochs, and
        the last one always (parity and the task's metrics read it)."""
        return epoch == self.epochs or (self.eval_unit == "epochs" and epoch % self.eval_every == 0)

    def train_epoch_steps(self, epoch: int) -> tuple[list, dict, list[float]]:
        """One epoch's steps: one timed region, or, with ``eval_every: {steps: N}``,
        one region per stretch between evaluations (:func:`.quality.train_in_stretches`)."""
        if self.eval_unit != "steps":
            return self.train_steps(epoch, self.steps_per_epoch)
        return quality.train_in_stretches(self, epoch)

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
        bar = _progress(self.ctx, steps, f"{self.ctx.label} epoch {epoch}/{self.epochs}")
        if batches is None:
            batches = self.batches()

        def keep(out: tuple[torch.Tensor, dict], n: int) -> None:
            losses.append(out[0])
            for name, value in out[1].items():
                stats.setdefault(name, []).append(value)
            self.step_samples.append(n)
            self.global_step += 1

        first = 0
        if self.global_step == 0:
            batch = next(batches)
            keep(self._first_step(batch), batch_size_of(batch))
            seconds.append(self.first_step_seconds or 0.0)
            self.data_wait.append(0.0)
            bar.update(1)
            first = 1
        self.timer.prepare(steps - first)
        clock, waits, mark = time.perf_counter, self.data_wait, self.timer.mark_step
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
        return staged_batches(
            self.parts.train_loader, self.device, self.non_blocking, self.prefetch
        )

    def endless_batches(self) -> Iterator[dict]:
        """The training loader pass after pass (the extension's batches)."""
        while True:
            yield from self.batches()

    # -- a window long enough ----------------------------------------------------------

    def _window(self) -> dict:
        """The measurement window over every timed step so far (extension included)."""
        return measurement_window(
            self.step_seconds + self.extension_seconds,
            self.step_samples,
            self.window_floor,
            self.protocol,
        )

    def extend_short_window(self) -> None:
        """More timed training steps after the last epoch while the window (or the
        energy window) is below its minimum — as pyperf calibrates its loops and
        criterion extends to a target time, rather than publishing a short window.
        The steps continue training the final model on the training loader, in timed
        regions like an epoch's, with no evaluation and no learning-rate step; the
        task's metrics and losses come from the configured epochs only. At most
        ``timing.max_extension_seconds`` of steps (docs/statistics.md §1). A run with no
        steady state gets one region more, once."""
        if not self.protocol.extend_short_windows or self.reference:
            return
        spent, budget, retried = 0.0, self.protocol.max_extension_seconds, False
        self.scheduler_steps = False
        self.parts.model.train()
        batches = self.endless_batches()
        for _ in range(MAX_EXTENSION_REGIONS):
            need = extension_steps_needed(
                self._window(),
                self.energy.measured_seconds(TRAIN),
                self.protocol,
                budget - spent,
                retry_unsteady=not retried,
            )
            if need is None:
                break
            steps, reason = need
            retried = retried or "no steady state" in reason
            if reason not in (self.extension_reason or ""):
                self.extension_reason = "; ".join(filter(None, [self.extension_reason, reason]))
            label = len(self.step_seconds) + len(self.extension_seconds) + 1
            _, _, seconds = self.train_steps(label, steps, batches)
            self.extension_seconds.append(seconds)
            spent += sum(seconds)

    def _extension(self) -> dict:
        seconds = [s for region in self.extension_seconds for s in region]
        return {
            "regions": len(self.extension_seconds),
            "steps": len(seconds),
            "seconds": float(sum(seconds)),
            "reason": self.extension_reason,
            "method": "timed training steps after the last epoch (training loader pass "
            "after pass, no evaluation, no learning-rate step) until the window reaches "
            "timing.min_timed_seconds and min_timed_steps (and the energy window "
            "timing.min_energy_seconds) with a 20% margin, at most "
            "timing.max_extension_seconds",
        }

    # -- evaluation ------------------------------------------------------------------

    def evaluate(self, epoch: int | None, epoch_end: bool = True) -> dict:
        """One evaluation pass, timed apart with synchronized edges; the first pass
        of the run is the cold one. ``epoch`` None: a calibration pass (metrics unused).
        Every pass during training is a point of the quality curve; ``epoch_end`` False:
        a pass inside the epoch (``eval_every: {steps: N}``)."""
        parts = self.parts
        parts.model.eval()
        with (
            TimedRegion(self.dev, [self.energy, self.host], EVAL) as region,
            torch.no_grad(),
            torch.autocast(
                device_type=self.device.type, dtype=self.autocast_dtype, enabled=self.amp.enabled
            ),
        ):
            evaluation = parts.evaluate(parts.model, parts.eval_loader, self.ctx)
        check_evaluation(evaluation, parts, self.ctx, parts.score)
        evaluation = eval_parity.faulted(evaluation, self.ctx)  # a test fault, else as is
        if epoch == self.epochs and epoch_end and eval_parity.wanted(self):
            self.final_evaluation = eval_parity.FinalEvaluation.take(parts.model, dict(evaluation))
        outputs = evaluation.pop("outputs", None)
        if epoch is not None and parts.score is not None:
            evaluation["metrics"] = parts.score(outputs)
        passed = {
            "epoch": epoch,
            "seconds": region.seconds,
            "samples": int(evaluation["samples"]),
            "cold": not self.eval_passes,
        }
        self.eval_passes.append(passed)
        if epoch is not None:
            self.quality.add(self, epoch, epoch_end, region.seconds, evaluation.get("metrics"))
        return {**passed, "metrics": evaluation.get("metrics")}

    def calibrate_evaluation(self) -> None:
        """More timed passes of the final model until the warm passes add up to the
        minimum window (pyperf calibrates the same way): at most max_eval_passes in
        all, and never fewer than 5 added after the curve's passes where the window is
        short (a dense curve of quick passes would otherwise leave none to add)."""
        limit = max(self.protocol.max_eval_passes, len(self.eval_passes) + 5)
        while len(self.eval_passes) < limit:
            warm = [p for p in self.eval_passes if not p["cold"]]
            if warm and sum(p["seconds"] for p in warm) >= self.protocol.min_timed_seconds:
                break
            self.evaluate(None)

    # -- where a step's time goes (after every timed region) --------------------------

    def diagnose_steps(self) -> None:
        """The diagnostic pass (trainbench.measure.step_breakdown), after the last timed region;
        none for a float64 reference. An error in it is recorded, never the cell's."""
        settings = (self.ctx.spec.get("timing") or {}).get("step_breakdown") or {}
        if self.reference or not settings.get("enabled", True):
            return
        settings = {"min_seconds": 0.5, "max_steps": 200, "max_share": 0.04, "min_steps": 10,
                    **settings}  # fmt: skip
        try:
            self.breakdown = step_breakdown.measure(self, settings)
        except Exception as exc:  # the timed measurement is complete; say what failed
            self.breakdown = {"error": f"{type(exc).__name__}: {exc}"[:500]}

    # -- result ------------------------------------------------------------------------

    def run(self) -> dict:
        self.started_at = time.perf_counter()  # the diagnostic pass's budget counts from here
        with frozen_heap():
            for epoch in range(1, self.epochs + 1):
                self.run_epoch(epoch)
            self.calibrate_evaluation()
            self.extend_short_window()
            self.diagnose_steps()
            self.eval_parity = eval_parity.run(self, self.final_evaluation)
        with wall_time.span("analysis"):
            result = self.result()
        return self.parts.finish(result) if self.parts.finish is not None else result

    def result(self) -> dict:
        """The run's result for the record (:func:`.training_result.loop_result`)."""
        return loop_result(self)


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
