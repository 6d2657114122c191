"""The throughput benchmark's three runners, each measuring one variant in this process:

- ``harness``: the workload's own cell through :func:`trainbench.measure.training.run_training`
  (warm-up excluded, per-step timing events, evaluation between epochs timed apart).
- ``bare``: the same ``TrainingParts`` (model, optimizer, loader, loss) in a bare
  best-practice loop: pinned non-blocking copies, autocast, one timed region with
  the device synchronized at its edges and a CUDA event at each edge, nothing else.
  ``bare:compile-<mode>`` wraps the model in ``torch.compile`` first.
- ``hf_trainer`` (text_multilabel only): ``transformers.Trainer`` on the same model
  and data, bf16 and ``adamw_torch_fused`` on CUDA; its steady state is timed by a
  callback that synchronizes the device, and its own reported throughput
  (start-up included) is kept beside it.
"""

from __future__ import annotations

import gc
import json
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch
from trainbench import workloads
from trainbench.measure.context import check_autocast_kernels, make_context
from trainbench.measure.training import TrainingParts, run_training


def release_device(device: torch.device) -> None:
    """Collect garbage and hand cached device memory back before the next variant."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def timed_result(steps: int, samples: int, wall_s: float, warmup_steps: int) -> dict:
    """The fields every runner's measurement starts with: timed steps and samples, their
    synchronized wall seconds and throughput, and the warm-up steps before them."""
    return {
        "steps": steps,
        "samples": samples,
        "wall_s": wall_s,
        "samples_per_s": samples / wall_s,
        "warmup_steps": warmup_steps,
    }


# ----------------------------------------------------------------------------- harness


def measure_harness(spec: dict) -> dict:
    """The workload's own cell through the harness's training loop."""
    ctx = make_context(spec)
    parts = workloads.get(spec["cell"]["workload"]).build_parts(ctx)
    result = run_training(parts, ctx)
    timed, latency = result["timed"], result["step_latency_s"]
    out = {
        "steps": timed["steps"],
        "samples": timed["samples"],
        "wall_s": timed["seconds"],
        # every step, as the bare loop and the Trainer count them (the record's published
        # samples_per_s may leave stalls out: docs/statistics.md §1)
        "samples_per_s": timed["samples_per_s_all_steps"],
        "warmup_steps": result["warmup"]["steps"],
        "first_step_s": result["warmup"]["first_step_seconds"],
        "data_wait_per_step_s": result["data_wait"]["per_step_mean_s"],
        "steps_per_epoch": result["settings"]["steps_per_epoch"],
        "epochs": result["settings"]["epochs"],
        "timing_method": result["timing_method"],
        "eval_s": result["eval"]["warm"]["seconds"],
        "amp": ctx.amp.as_dict(),
        "settings": {
            k: result["settings"][k]
            for k in ("optimizer", "optimizer_options", "data_staging", "compile")
        },
        "settings_in_force": ctx.settings_in_force,
        "dataloader": ctx.loader_kwargs,
        "final_loss": result["task"]["final_loss"],
    }
    if ctx.device.make_event() is not None and latency["n"]:
        # Per-step device-event times summed over every step of the synchronized
        # regions, against the regions' wall clock.
        out["event_vs_wall"] = timed["steps_vs_regions"] - 1.0
        out["event_step_p50_s"] = latency["p50"]
    del parts
    release_device(ctx.torch_device)
    return out


# ----------------------------------------------------------------------------- bare loop


class StepTiming(NamedTuple):
    first_step_s: float  # step 0 alone, synchronized
    samples: int  # samples of the timed steps
    wall_s: float  # synchronized wall seconds of the timed steps
    event_s: float | None  # device-event seconds of the same region (None without events)


def _device_batches(parts: TrainingParts, steps_per_epoch: int, device) -> Iterator[dict]:
    """The training batches, epoch after epoch, copied to the device without blocking."""
    while True:
        for i, batch in enumerate(parts.train_loader):
            if i >= steps_per_epoch:
                break
            yield {
                k: v.to(device, non_blocking=True) if isinstance(v, torch.Tensor) else v
                for k, v in batch.items()
            }


def _bare_step(ctx, parts: TrainingParts, compile_mode: str | None, settings: dict):
    """Prepare the parts for the bare loop; return its step (one batch, one optimizer
    step; returns the batch's sample count)."""
    device = ctx.torch_device
    model, optimizer, loss_fn = parts.model, parts.optimizer, parts.loss_fn
    steps_per_epoch = len(parts.train_loader)  # type: ignore[arg-type]
    if settings.get("max_steps_per_epoch"):
        steps_per_epoch = min(steps_per_epoch, int(settings["max_steps_per_epoch"]))
    amp_dtype = getattr(torch, ctx.amp.dtype) if ctx.amp.enabled else None
    scaler = torch.amp.GradScaler(device.type) if amp_dtype == torch.float16 else None
    if parts.before_epoch is not None:
        parts.before_epoch(1)  # e.g. hard negatives of epoch 1, before any timing
    model.train()
    step_model = torch.compile(model, mode=compile_mode) if compile_mode else model
    stream = _device_batches(parts, steps_per_epoch, device)

    def step() -> int:
        batch = next(stream)
        if compile_mode and device.type == "cuda":
            torch.compiler.cudagraph_mark_step_begin()
        with torch.autocast(device.type, dtype=amp_dtype, enabled=amp_dtype is not None):
            loss, _ = loss_fn(step_model, batch)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if parts.step_scheduler is not None:
            parts.step_scheduler.step()
        return next(iter(batch.values())).shape[0]

    return step


def _time_steps(device, step: Callable[[], int], warmup_steps: int, timed_steps: int) -> StepTiming:
    """Step 0 timed alone, the rest of the warm-up untimed, then ``timed_steps`` in one
    region synchronized at its edges, with a device event at each edge where the device
    has events."""
    device.synchronize()
    t_first = time.perf_counter()
    step()
    device.synchronize()
    first_step_s = time.perf_counter() - t_first
    for _ in range(warmup_steps - 1):
        step()
    start, end = device.make_event(), device.make_event()
    device.synchronize()
    t0 = time.perf_counter()
    if start is not None:
        start.record()
    samples = sum(step() for _ in range(timed_steps))
    if end is not None:
        end.record()
    device.synchronize()
    wall = time.perf_counter() - t0
    event_s = start.elapsed_time(end) / 1000.0 if start is not None else None
    return StepTiming(first_step_s, samples, wall, event_s)


def measure_bare(spec: dict, warmup_steps: int, timed_steps: int, compile_mode: str | None) -> dict:
    """A careful hand-written loop over the workload's own parts."""
    ctx = make_context(spec)
    parts: TrainingParts = workloads.get(spec["cell"]["workload"]).build_parts(ctx)
    # The harness's probe: a kernel this CPU lacks in the autocast dtype is one line.
    check_autocast_kernels(parts.model, ctx)
    step = _bare_step(ctx, parts, compile_mode, spec["workload_settings"])
    timing = _time_steps(ctx.device, step, warmup_steps, timed_steps)
    out = {
        **timed_result(timed_steps, timing.samples, timing.wall_s, warmup_steps),
        "first_step_s": timing.first_step_s,
        "amp": ctx.amp.as_dict(),
        "settings": {
            "optimizer": type(parts.optimizer).__name__,
            "fused": parts.optimizer.defaults.get("fused"),
            "compile": compile_mode,
        },
        "dataloader": ctx.loader_kwargs,
    }
    if timing.event_s is not None:
        out["event_s"] = timing.event_s
    # Drop every reference (the step's closure holds some) before releasing the device memory.
    del step, parts
    release_device(ctx.torch_device)
    return out


# ----------------------------------------------------------------------------- HF Trainer


def steady_state_callback(device, warmup: int, last: int):
    """A TrainerCallback that synchronizes the device and reads the clock after
    step ``warmup`` and after step ``last`` (transformers is imported lazily)."""
    from transformers import TrainerCallback

    class SteadyState(TrainerCallback):
        t0: float | None = None
        t1: float | None = None

        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step in (warmup, last):
                device.synchronize()
                if state.global_step == warmup:
                    self.t0 = time.perf_counter()
                else:
                    self.t1 = time.perf_counter()

    return SteadyState()


class TextTrainSamples(torch.utils.data.Dataset):
    """The text workload's training split as the Trainer reads it: one dict per sample."""

    def __init__(self, arrays):
        self.ids = torch.from_numpy(arrays["train_input_ids"].astype(np.int64))
        self.mask = torch.from_numpy(arrays["train_attention_mask"].astype(np.int64))
        self.labels = torch.from_numpy(arrays["train_labels"].astype(np.float32))

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {
            "input_ids": self.ids[i],
            "attention_mask": self.mask[i],
            "labels": self.labels[i],
        }


def trainer_arguments(ctx, settings: dict, output_dir: str, total_steps: int, seed: int):
    """The Trainer's arguments as users set them: the workload's optimizer settings,
    its AMP dtype, fused AdamW on CUDA, no logging, saving or evaluation."""
    from transformers import TrainingArguments

    cuda = ctx.torch_device.type == "cuda"
    amp = ctx.amp
    opt = settings["optimizer"]
    loader = ctx.loader_kwargs
    return TrainingArguments(
        output_dir=output_dir,
        per_device_train_batch_size=ctx.batch_size,
        max_steps=total_steps,
        learning_rate=opt["lr"],
        weight_decay=opt["weight_decay"],
        warmup_steps=int(round(float(opt["warmup_ratio"]) * total_steps)),
        lr_scheduler_type="linear",
        bf16=amp.enabled and amp.dtype == "bfloat16",
        fp16=amp.enabled and amp.dtype == "float16",
        optim="adamw_torch_fused" if cuda else "adamw_torch",
        dataloader_num_workers=int(loader.get("num_workers", 0)),
        dataloader_pin_memory=bool(loader.get("pin_memory", False)),
        dataloader_drop_last=True,
        logging_strategy="no",
        save_strategy="no",
        eval_strategy="no",
        report_to=[],
        disable_tqdm=True,
        seed=seed,
        use_cpu=not cuda,
    )


def measure_hf_trainer(spec: dict, warmup_steps: int, timed_steps: int) -> dict:
    """transformers.Trainer on the text workload's model and data, as users run it."""
    import transformers
    from trainbench.workloads import text_multilabel
    from transformers import Trainer, set_seed

    ctx = make_context(spec)
    settings = spec["workload_settings"]
    data_dir = Path(spec["data_path"])
    meta = json.loads((data_dir / "meta.json").read_text())
    arrays = np.load(data_dir / text_multilabel.DATA_FILE)
    set_seed(spec["run_seed"])
    torch.manual_seed(spec["run_seed"])
    model = text_multilabel.build_model(settings, len(meta["label_names"]), int(meta["vocab_size"]))
    check_autocast_kernels(model, ctx)
    total = warmup_steps + timed_steps
    with tempfile.TemporaryDirectory() as out_dir:
        args = trainer_arguments(ctx, settings, out_dir, total, spec["run_seed"])
        timer = steady_state_callback(ctx.device, warmup_steps, total)
        trainer = Trainer(
            model=model, args=args, train_dataset=TextTrainSamples(arrays), callbacks=[timer]
        )
        output = trainer.train()
    out = {
        **timed_result(
            timed_steps, timed_steps * ctx.batch_size, timer.t1 - timer.t0, warmup_steps
        ),
        "reported_samples_per_s": output.metrics.get("train_samples_per_second"),
        "reported_runtime_s": output.metrics.get("train_runtime"),
        "amp": {"bf16": args.bf16, "fp16": args.fp16},
        "settings": {
            "optim": str(args.optim),
            "max_grad_norm": args.max_grad_norm,
            "transformers": transformers.__version__,
            "dataloader_num_workers": args.dataloader_num_workers,
            "dataloader_pin_memory": args.dataloader_pin_memory,
        },
    }
    del trainer, model
    release_device(ctx.torch_device)
    return out
