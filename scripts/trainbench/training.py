"""The one training loop every training workload runs through.

A workload supplies its model, optimizer, loaders, a loss function and an
evaluation function (:class:`TrainingParts`); this loop owns everything that
makes the numbers honest and comparable across devices: warm-up excluded and
reported apart, sync only at region edges, loss accumulated on the device,
evaluation timed apart, memory and placement checks, autocast and GradScaler
per the device policy, NaN detection.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import torch
from tqdm import tqdm

from .context import RunContext
from .tracking import StepTimer, latency_summary, verify_placement


class NonFiniteLossError(FloatingPointError):
    """The training loss became NaN or infinite."""


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
    score: Callable[[Any], dict] | None = None
    model_name: str = ""
    extra_settings: dict = field(default_factory=dict)
    # Workload facts added to the loop's result (e.g. best-epoch metrics).
    finish: Callable[[dict], dict] | None = None


class CompileFailedError(RuntimeError):
    """torch.compile could not compile the training step (recorded as compile_failed)."""


# Exception classes torch.compile raises (by name: these live in private modules).
COMPILE_ERROR_NAMES = frozenset(
    {"TorchDynamoException", "BackendCompilerFailed", "InductorError", "Unsupported"}
)


def is_compile_error(exc: BaseException) -> bool:
    return any(cls.__name__ in COMPILE_ERROR_NAMES for cls in type(exc).__mro__)


def compile_step(loss_fn: Callable, mode: str) -> Callable:
    """The workload's loss function (model forward + loss; backward through
    AOTAutograd) under torch.compile. Errors are raised, never suppressed."""
    import torch._dynamo

    torch._dynamo.config.suppress_errors = False
    return torch.compile(loss_fn, mode=mode)


def staged_batches(loader: Iterable, device: torch.device, non_blocking: bool, prefetch: bool):
    """Batches already on the device. With ``prefetch`` on CUDA, the next batch is
    copied on a side stream while the current step computes, so the step never
    waits for its host-to-device copy."""
    if not (prefetch and device.type == "cuda"):
        for batch in loader:
            yield _to_device(batch, device, non_blocking)
        return
    copy_stream = torch.cuda.Stream(device)
    host_batches = iter(loader)

    def copy_next():
        host = next(host_batches, None)
        if host is None:
            return None
        with torch.cuda.stream(copy_stream):
            return _to_device(host, device, non_blocking)

    ahead = copy_next()
    while ahead is not None:
        compute_stream = torch.cuda.current_stream(device)
        compute_stream.wait_stream(copy_stream)
        batch = ahead
        for value in batch.values():
            if isinstance(value, torch.Tensor):
                value.record_stream(compute_stream)  # keep its memory until the step is done
        ahead = copy_next()
        yield batch


def _to_device(batch: dict, device: torch.device, non_blocking: bool) -> dict:
    return {
        k: (v.to(device, non_blocking=non_blocking) if isinstance(v, torch.Tensor) else v)
        for k, v in batch.items()
    }


def _batch_size_of(batch: dict) -> int:
    for value in batch.values():
        if isinstance(value, torch.Tensor):
            return int(value.shape[0])
    raise ValueError("batch holds no tensor")


class _AutocastProbe:
    """Records the output dtype of the first Linear/Conv layer during one step, to
    prove autocast really ran (MPS can disable it silently)."""

    def __init__(self, model: torch.nn.Module):
        self.dtype: torch.dtype | None = None
        self.enabled_flag: bool | None = None
        self._handle = None
        for module in model.modules():
            if isinstance(module, (torch.nn.Linear, torch.nn.Conv2d, torch.nn.Conv1d)):
                self._handle = module.register_forward_hook(self._hook)
                break

    def _hook(self, module, inputs, output):
        if self.dtype is None and isinstance(output, torch.Tensor):
            self.dtype = output.dtype

    def remove(self) -> None:
        if self._handle is not None:
            self._handle.remove()


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


def run_training(parts: TrainingParts, ctx: RunContext) -> dict:
    settings = ctx.workload_settings
    device, dev = ctx.torch_device, ctx.device
    epochs = int(settings["epochs"])
    warmup_steps = int(settings["warmup_steps"])
    accumulation = int(settings.get("gradient_accumulation", 1))
    max_steps = settings.get("max_steps_per_epoch")
    amp = ctx.amp
    autocast_dtype = getattr(torch, amp.dtype) if amp.enabled else None
    scaler = dev.make_grad_scaler(amp)
    non_blocking = bool(ctx.loader_kwargs.get("pin_memory"))
    staged = bool(getattr(parts.train_loader, "on_device", False))
    prefetch = bool(dev.settings.get("prefetch_to_device", False))
    prefetch = prefetch and device.type == "cuda" and not staged
    model, optimizer = parts.model, parts.optimizer
    compile_mode = ctx.spec.get("compile")
    loss_fn = compile_step(parts.loss_fn, compile_mode) if compile_mode else parts.loss_fn
    mark_cudagraph_step = compile_mode is not None and device.type == "cuda"
    first_step_seconds = None

    def keep(value: torch.Tensor) -> torch.Tensor:
        return value.detach().clone() if compile_mode else value.detach()

    steps_per_epoch = len(parts.train_loader)  # type: ignore[arg-type]
    if max_steps:
        steps_per_epoch = min(steps_per_epoch, int(max_steps))
    if steps_per_epoch < 1:
        raise ValueError(
            "the training split yields no full batch at this batch size; lower batch_size or add data"
        )

    n_params = sum(p.numel() for p in model.parameters())
    n_trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)

    dev.reset_peak_memory()
    memory_initial = dev.current_memory_bytes()

    timer = StepTimer(dev)
    global_step = 0
    warmup = {"steps": 0, "samples": 0, "seconds": 0.0}
    all_step_seconds: list[float] = []
    timed_totals = {"steps": 0, "samples": 0, "seconds": 0.0}
    data_wait_total = 0.0
    data_wait_steps = 0
    verification: dict = {}
    probe: _AutocastProbe | None = None
    epochs_out: list[dict] = []
    fault = ctx.fault

    for epoch in range(1, epochs + 1):
        epoch_facts = parts.before_epoch(epoch) if parts.before_epoch else {}
        model.train()
        # Per-step losses and stats stay on the device and are summed once per epoch:
        # no reduction kernel inside the timed steps (compiled steps keep a copy,
        # since a CUDA-graph replay overwrites its outputs).
        step_losses: list[torch.Tensor] = []
        step_stats: dict[str, list[torch.Tensor]] = {}
        epoch_samples = 0
        epoch_timed = {"steps": 0, "samples": 0, "seconds": 0.0}
        epoch_start = time.perf_counter()
        in_timed_region = False
        warmup_t0 = None

        if global_step < warmup_steps:
            dev.synchronize()
            warmup_t0 = time.perf_counter()
        else:
            timer.start(steps_per_epoch)
            in_timed_region = True

        bar = _progress(ctx, steps_per_epoch, f"{ctx.label} epoch {epoch}/{epochs}")
        iterator = staged_batches(parts.train_loader, device, non_blocking, prefetch)
        for step_in_epoch in range(steps_per_epoch):
            if not in_timed_region and global_step == warmup_steps:
                # Warm-up ends here: close its region and open the timed one.
                dev.synchronize()
                warmup["seconds"] += time.perf_counter() - warmup_t0
                timer.start(steps_per_epoch - step_in_epoch)
                in_timed_region = True

            wait_t0 = time.perf_counter()
            batch = next(iterator)  # host fetch + (pinned, non-blocking) copy to the device
            wait = time.perf_counter() - wait_t0
            n = _batch_size_of(batch)

            if global_step == 0:
                probe = _AutocastProbe(model)
                first_t0 = time.perf_counter()
            if global_step == 1 and fault:
                ctx.inject_fault()
            if mark_cudagraph_step:
                torch.compiler.cudagraph_mark_step_begin()

            try:
                with torch.autocast(
                    device_type=device.type, dtype=autocast_dtype, enabled=amp.enabled
                ):
                    loss, stats = loss_fn(model, batch)
                    autocast_flag = (
                        torch.is_autocast_enabled(device.type) if global_step == 0 else None
                    )
            except Exception as exc:
                if compile_mode and is_compile_error(exc):
                    raise CompileFailedError(
                        f"torch.compile(mode={compile_mode!r}) failed: {type(exc).__name__}: {exc}"
                    ) from exc
                raise
            if fault == "nan_loss" and global_step >= 1:
                loss = loss * float("nan")
            dev.sample_memory()
            scaled = loss / accumulation if accumulation > 1 else loss
            if scaler is not None:
                scaler.scale(scaled).backward()
            else:
                scaled.backward()
            dev.sample_memory()
            if (step_in_epoch + 1) % accumulation == 0 or step_in_epoch + 1 == steps_per_epoch:
                if scaler is not None:
                    scaler.step(optimizer)
                    scaler.update()
                else:
                    optimizer.step()
                optimizer.zero_grad(set_to_none=True)
                if parts.step_scheduler is not None:
                    parts.step_scheduler.step()
                dev.sample_memory()

            step_losses.append(keep(loss))
            for name, value in stats.items():
                step_stats.setdefault(name, []).append(keep(value))
            epoch_samples += n

            if global_step == 0:
                # Inside warm-up: these syncing checks never touch a timed region.
                dev.synchronize()
                first_step_seconds = time.perf_counter() - first_t0
                probe.remove()
                verification = verify_placement(model, optimizer, batch, device.type)
                verification["autocast_requested"] = amp.enabled
                verification["autocast_enabled_in_region"] = bool(autocast_flag)
                verification["autocast_output_dtype"] = (
                    str(probe.dtype).replace("torch.", "") if probe.dtype else None
                )
                verification["autocast_active"] = bool(
                    amp.enabled and autocast_flag and probe.dtype == autocast_dtype
                )
                if fault == "silent_corruption":
                    print(
                        "Error: command buffer exited with error status. (injected)",
                        file=sys.stderr,
                        flush=True,
                    )

            if in_timed_region:
                timer.mark_step()
                epoch_timed["steps"] += 1
                epoch_timed["samples"] += n
                data_wait_total += wait
                data_wait_steps += 1
            else:
                warmup["steps"] += 1
                warmup["samples"] += n
            global_step += 1
            bar.update(1)
        bar.close()

        if in_timed_region:
            region = timer.stop()
            epoch_timed["seconds"] = region.wall_seconds
            all_step_seconds.extend(region.step_seconds)
        else:
            dev.synchronize()
            warmup["seconds"] += time.perf_counter() - warmup_t0
        train_seconds = time.perf_counter() - epoch_start

        loss_sum = torch.stack(step_losses).float().sum()
        mean_loss = float(loss_sum.item()) / steps_per_epoch
        if not math.isfinite(mean_loss):
            raise NonFiniteLossError(
                f"training loss is {mean_loss} in epoch {epoch} (device {device})"
            )
        sums = {k: float(torch.stack(v).sum().item()) for k, v in step_stats.items()}
        del step_losses, step_stats
        train_metrics = parts.train_metrics(sums, epoch_samples) if parts.train_metrics else {}

        if parts.scheduler is not None:
            parts.scheduler.step()

        # Evaluation, timed apart with synced edges.
        model.eval()
        dev.synchronize()
        eval_t0 = time.perf_counter()
        with (
            torch.no_grad(),
            torch.autocast(device_type=device.type, dtype=autocast_dtype, enabled=amp.enabled),
        ):
            evaluation = parts.evaluate(model, parts.eval_loader, ctx)
        dev.synchronize()
        eval_seconds = time.perf_counter() - eval_t0
        if parts.score is not None:
            evaluation["metrics"] = parts.score(evaluation.pop("outputs"))

        for key in ("steps", "samples", "seconds"):
            timed_totals[key] += epoch_timed[key]
        epochs_out.append(
            {
                "epoch": epoch,
                "train_loss": mean_loss,
                "train_seconds": train_seconds,
                "timed_steps": epoch_timed["steps"],
                "timed_samples": epoch_timed["samples"],
                "timed_seconds": epoch_timed["seconds"],
                "samples_per_s": (epoch_timed["samples"] / epoch_timed["seconds"])
                if epoch_timed["seconds"]
                else None,
                "steps": steps_per_epoch,
                "samples": epoch_samples,
                "train_metrics": train_metrics,
                "eval_seconds": eval_seconds,
                "eval_samples": evaluation["samples"],
                "eval_samples_per_s": evaluation["samples"] / eval_seconds
                if eval_seconds > 0
                else None,
                "eval_metrics": evaluation["metrics"],
                "lr": float(optimizer.param_groups[0]["lr"]),
                **({"extra": epoch_facts} if epoch_facts else {}),
            }
        )

    memory = dev.memory_reading(memory_initial)
    metric = parts.primary_metric
    values = [e["eval_metrics"].get(metric) for e in epochs_out]
    scored = [(v, e["epoch"]) for v, e in zip(values, epochs_out, strict=True) if v is not None]
    best_value, best_epoch = (
        (max(scored) if parts.higher_is_better else min(scored)) if scored else (None, None)
    )
    timed_seconds = timed_totals["seconds"]
    fallback = ctx.warnings.fallback_ops if ctx.warnings else []
    verification["cpu_fallback_ops"] = sorted(set(fallback))
    if ctx.warnings and ctx.warnings.autocast_disabled:
        verification["autocast_active"] = False
        verification["autocast_disabled_warning"] = ctx.warnings.autocast_disabled[0]

    result = {
        "kind": "training",
        "model": {
            "name": parts.model_name,
            "parameters": n_params,
            "trainable_parameters": n_trainable,
        },
        "settings": {
            "batch_size": ctx.batch_size,
            "gradient_accumulation": accumulation,
            "effective_batch_size": ctx.batch_size * accumulation,
            "epochs": epochs,
            "steps_per_epoch": steps_per_epoch,
            "warmup_steps": warmup_steps,
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
            "grad_scaler": scaler is not None,
            "data_staging": (
                "whole data set staged on the device once; batches gathered there"
                if staged
                else "next batch copied to the device on a side stream during the current step"
                if prefetch
                else "batch copied to the device at the start of its step"
                + (" (pinned memory, non_blocking)" if non_blocking else "")
            ),
            "compile": {
                "mode": compile_mode,
                "compiled": "the workload's loss function (model forward + loss; backward "
                "through AOTAutograd)"
                if compile_mode
                else None,
                "evaluation": "eager module" if compile_mode else None,
                "errors_suppressed": False if compile_mode else None,
            },
            **parts.extra_settings,
        },
        "epochs": epochs_out,
        "warmup": {
            **warmup,
            # Step 0 alone, device synced at both edges: includes compilation when
            # compiled, and cuDNN autotuning/lazy init otherwise.
            "first_step_seconds": first_step_seconds,
        },
        "timed": {
            **timed_totals,
            "samples_per_s": timed_totals["samples"] / timed_seconds if timed_seconds > 0 else None,
        },
        "step_latency_s": latency_summary(all_step_seconds),
        "timing_method": timer.method,
        "data_wait": {
            "seconds": data_wait_total,
            "per_step_mean_s": data_wait_total / data_wait_steps if data_wait_steps else None,
            "method": "host time blocked fetching the next batch (loader, plus enqueueing its "
            "copy to the device) during timed steps",
        },
        "eval": {
            "seconds": sum(e["eval_seconds"] for e in epochs_out),
            "samples": sum(e["eval_samples"] for e in epochs_out),
            "samples_per_s": (
                sum(e["eval_samples"] for e in epochs_out)
                / sum(e["eval_seconds"] for e in epochs_out)
                if sum(e["eval_seconds"] for e in epochs_out) > 0
                else None
            ),
            "method": "wall clock of evaluate(), device synchronized at both edges",
        },
        "memory": {"device": memory.as_dict(), "limit_bytes": dev.memory_limit_bytes()},
        "verification": verification,
        "task": {
            "primary_metric": metric,
            "higher_is_better": parts.higher_is_better,
            "final": values[-1] if values else None,
            "best": best_value,
            "best_epoch": best_epoch,
            "final_loss": epochs_out[-1]["train_loss"] if epochs_out else None,
        },
    }
    return parts.finish(result) if parts.finish is not None else result
