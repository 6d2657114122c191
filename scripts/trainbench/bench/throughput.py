"""Is the harness as fast as a careful hand-written loop, and faster than the
Hugging Face Trainer? One process, one device, the same model, data and batch size.

Variants of one case (workload x batch size), measured in rounds whose order
rotates so that no variant always runs first or last:

- ``harness``: the workload's own cell through :func:`trainbench.training.run_training`
  (warm-up excluded, per-step timing events, evaluation between epochs timed apart).
  ``harness:compile`` and ``harness:compile-<mode>`` run the torch.compile columns.
- ``bare``: the same ``TrainingParts`` (model, optimizer, loader, loss) in a bare
  best-practice loop: pinned non-blocking copies, autocast, one timed region with
  the device synchronized at its edges and a CUDA event at each edge, nothing else.
  ``bare:compile-<mode>`` wraps the model in ``torch.compile`` first.
- ``hf_trainer`` (text_multilabel only): ``transformers.Trainer`` on the same model
  and data, bf16 and ``adamw_torch_fused`` on CUDA; its steady state is timed by a
  callback that synchronizes the device, and its own reported throughput
  (start-up included) is kept beside it.

Every variant times the same number of steps after the same number of warm-up
steps; throughput = timed samples / synchronized wall seconds.
"""

from __future__ import annotations

import copy
import datetime as dt
import gc
import json
import math
import os
import platform
import socket
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import yaml

from .. import config as tbconfig
from .. import workloads
from ..context import make_context
from ..device_ids import BACKENDS, COMPILE_MODES, DeviceId
from ..devices import cpu_model_name
from ..environment import package_versions
from ..records import atomic_write_json, atomic_write_text
from ..stats.intervals import paired_ratio_interval
from ..training import TrainingParts, run_training

HARNESS_OVER_BARE_TARGET = 0.98
HARNESS_OVER_HF_TARGET = 1.1
HF_TARGET_BATCH_SIZES = (64, 256)
TIMING_AGREEMENT_TARGET = 0.02


class SuiteError(ValueError):
    """A benchmark suite file is wrong; the message names the key."""


@dataclass(frozen=True)
class Variant:
    runner: str  # harness, bare, hf_trainer
    compile: str | None = None  # torch.compile mode
    label: str | None = None  # a name for a variant with device-setting overrides
    device_settings: tuple = ()  # (key, value) pairs over the suite's device settings

    @classmethod
    def parse(cls, entry: str | dict) -> Variant:
        """``"harness"``, ``"bare:compile-reduce-overhead"``, or a mapping
        ``{name: ..., variant: harness, device_settings: {prefetch_to_device: false}}``."""
        if isinstance(entry, dict):
            unknown = set(entry) - {"name", "variant", "device_settings"}
            if unknown or "name" not in entry or "variant" not in entry:
                raise SuiteError(
                    f"variant {entry!r}: a mapping takes name, variant and device_settings"
                )
            base = cls.parse(entry["variant"])
            overrides = tuple(sorted((entry.get("device_settings") or {}).items()))
            return cls(base.runner, base.compile, str(entry["name"]), overrides)
        runner, _, mode = str(entry).partition(":")
        if runner not in ("harness", "bare", "hf_trainer"):
            raise SuiteError(
                f"variant {entry!r}: runner must be harness, bare or hf_trainer "
                "(optionally :compile or :compile-<mode>)"
            )
        if not mode:
            return cls(runner)
        if runner == "hf_trainer" or not mode.startswith("compile"):
            raise SuiteError(f"variant {entry!r}: only harness/bare take :compile[-<mode>]")
        compile_mode = mode.removeprefix("compile").removeprefix("-") or "default"
        if compile_mode not in COMPILE_MODES:
            raise SuiteError(
                f"variant {entry!r}: unknown compile mode; known: {', '.join(COMPILE_MODES)}"
            )
        return cls(runner, compile_mode)

    @property
    def name(self) -> str:
        if self.label:
            return self.label
        # the compile part of a device id: "cuda-compile-reduce-overhead" -> "compile-reduce-overhead"
        suffix = DeviceId("cuda", compile=self.compile).format().removeprefix("cuda-")
        return self.runner + (f":{suffix}" if self.compile else "")


# ----------------------------------------------------------------------------- suite


def load_suite(path: str | Path) -> dict:
    """Read and check a suite file (see benchmarks/suites/*.yaml)."""
    suite = yaml.safe_load(Path(path).read_text())
    if not isinstance(suite, dict):
        raise SuiteError(f"{path}: a suite is a mapping with device, rounds and cases")
    for key in ("name", "device", "cases"):
        if key not in suite:
            raise SuiteError(f"{path}: `{key}` is missing")
    if suite["device"] not in BACKENDS:
        raise SuiteError(f"{path}: `device` must be one of {', '.join(BACKENDS)}")
    suite.setdefault("rounds", 3)
    suite.setdefault("device_settings", {})
    for name, case in suite["cases"].items():
        if name not in workloads.WORKLOADS or workloads.info(name).kind != "training":
            raise SuiteError(f"{path}: `cases.{name}` is not a training workload")
        for key in ("batch_sizes", "variants", "settings"):
            if key not in case:
                raise SuiteError(f"{path}: `cases.{name}.{key}` is missing")
        case["variants"] = [Variant.parse(v) for v in case["variants"]]
        if any(v.runner == "hf_trainer" for v in case["variants"]) and name != "text_multilabel":
            raise SuiteError(f"{path}: `cases.{name}`: hf_trainer runs text_multilabel only")
        if case["settings"].get("gradient_accumulation", 1) != 1:
            raise SuiteError(
                f"{path}: `cases.{name}.settings.gradient_accumulation` must be 1 "
                "(the bare loop steps the optimizer every batch)"
            )
    return suite


def trainbench_config(suite: dict, workload: str) -> dict:
    """A validated trainbench config holding this case's settings and every compile
    mode its variants use."""
    case = suite["cases"][workload]
    settings = copy.deepcopy(case["settings"])
    modes = sorted({v.compile for v in case["variants"] if v.compile})
    settings["compile"] = ["eager", *modes]
    settings["batch_sizes"] = list(case["batch_sizes"])
    config = {
        "seed": int(suite.get("seed", 0)),
        "repeats": 1,
        "devices": [suite["device"]],
        "device_settings": {suite["device"]: copy.deepcopy(suite["device_settings"])},
        "launcher": {"progress": "never"},
        "workloads": {workload: settings},
    }
    if workload != "image_cnn":
        config["workloads"]["image_cnn"] = {"enabled": False}
    return tbconfig.validate_config(config)


def cell_spec(config: dict, workload: str, variant: Variant, batch_size: int, data: str) -> dict:
    """The cell a variant runs: the harness's compiled variants use their own device
    column (cuda-compile...); the bare loop and the Trainer use the eager column's
    settings and compile (or not) themselves."""
    mode = variant.compile if variant.runner == "harness" else None
    columns = [v for v in tbconfig.device_variants(config, None, workload) if v.compile == mode]
    if len(columns) != 1:
        raise SuiteError(
            f"cases.{workload}: {len(columns)} device columns for {variant.name}; give the CPU "
            "one thread count (device_settings.threads) in a suite"
        )
    cell = tbconfig.Cell(workload, columns[0].id, batch_size, 0)
    spec = tbconfig.cell_spec(config, cell, data)
    spec["device_settings"].update(dict(variant.device_settings))
    spec["launcher"]["progress"] = "never"
    return spec


# ----------------------------------------------------------------------------- runners


def _release(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def measure_harness(spec: dict) -> dict:
    ctx = make_context(spec)
    parts = workloads.get(spec["cell"]["workload"]).build_parts(ctx)
    result = run_training(parts, ctx)
    timed, latency = result["timed"], result["step_latency_s"]
    out = {
        "steps": timed["steps"],
        "samples": timed["samples"],
        "wall_s": timed["seconds"],
        "samples_per_s": timed["samples_per_s"],
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
    _release(ctx.torch_device)
    return out


def measure_bare(spec: dict, warmup_steps: int, timed_steps: int, compile_mode: str | None) -> dict:
    """A careful hand-written loop over the workload's own parts."""
    ctx = make_context(spec)
    device = ctx.torch_device
    parts: TrainingParts = workloads.get(spec["cell"]["workload"]).build_parts(ctx)
    model, optimizer, loss_fn = parts.model, parts.optimizer, parts.loss_fn
    settings = spec["workload_settings"]
    steps_per_epoch = len(parts.train_loader)  # type: ignore[arg-type]
    if settings.get("max_steps_per_epoch"):
        steps_per_epoch = min(steps_per_epoch, int(settings["max_steps_per_epoch"]))
    amp_dtype = getattr(torch, ctx.amp.dtype) if ctx.amp.enabled else None
    scaler = torch.amp.GradScaler(device.type) if amp_dtype == torch.float16 else None
    if parts.before_epoch is not None:
        parts.before_epoch(1)  # e.g. hard negatives of epoch 1, before any timing
    model.train()
    step_model = torch.compile(model, mode=compile_mode) if compile_mode else model

    def batches():
        while True:
            for i, batch in enumerate(parts.train_loader):
                if i >= steps_per_epoch:
                    break
                yield {
                    k: v.to(device, non_blocking=True) if isinstance(v, torch.Tensor) else v
                    for k, v in batch.items()
                }

    stream = batches()

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

    ctx.device.synchronize()
    t_first = time.perf_counter()
    step()
    ctx.device.synchronize()
    first_step_s = time.perf_counter() - t_first
    for _ in range(warmup_steps - 1):
        step()
    start, end = ctx.device.make_event(), ctx.device.make_event()
    ctx.device.synchronize()
    t0 = time.perf_counter()
    if start is not None:
        start.record()
    samples = sum(step() for _ in range(timed_steps))
    if end is not None:
        end.record()
    ctx.device.synchronize()
    wall = time.perf_counter() - t0
    out = {
        "steps": timed_steps,
        "samples": samples,
        "wall_s": wall,
        "samples_per_s": samples / wall,
        "warmup_steps": warmup_steps,
        "first_step_s": first_step_s,
        "amp": ctx.amp.as_dict(),
        "settings": {
            "optimizer": type(optimizer).__name__,
            "fused": optimizer.defaults.get("fused"),
            "compile": compile_mode,
        },
        "dataloader": ctx.loader_kwargs,
    }
    if start is not None:
        out["event_s"] = start.elapsed_time(end) / 1000.0
    # Drop every reference (the closures hold some) before releasing the device memory.
    stream = step = parts = model = optimizer = step_model = None  # noqa: F841
    _release(device)
    return out


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


def measure_hf_trainer(spec: dict, warmup_steps: int, timed_steps: int) -> dict:
    """transformers.Trainer on the text workload's model and data, as users run it."""
    from transformers import Trainer, TrainingArguments, set_seed

    from ..workloads import text_multilabel

    ctx = make_context(spec)
    settings = spec["workload_settings"]
    data_dir = Path(spec["data_path"])
    meta = json.loads((data_dir / "meta.json").read_text())
    arrays = np.load(data_dir / text_multilabel.DATA_FILE)

    class Samples(torch.utils.data.Dataset):
        def __init__(self):
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

    set_seed(spec["run_seed"])
    torch.manual_seed(spec["run_seed"])
    model = text_multilabel.build_model(settings, len(meta["label_names"]), int(meta["vocab_size"]))
    cuda = ctx.torch_device.type == "cuda"
    amp = ctx.amp
    opt = settings["optimizer"]
    total = warmup_steps + timed_steps
    loader = ctx.loader_kwargs
    with tempfile.TemporaryDirectory() as out_dir:
        args = TrainingArguments(
            output_dir=out_dir,
            per_device_train_batch_size=ctx.batch_size,
            max_steps=total,
            learning_rate=opt["lr"],
            weight_decay=opt["weight_decay"],
            warmup_steps=int(round(float(opt["warmup_ratio"]) * total)),
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
            seed=spec["run_seed"],
            use_cpu=not cuda,
        )
        timer = steady_state_callback(ctx.device, warmup_steps, total)
        trainer = Trainer(model=model, args=args, train_dataset=Samples(), callbacks=[timer])
        output = trainer.train()
    wall = timer.t1 - timer.t0
    samples = timed_steps * ctx.batch_size
    import transformers

    out = {
        "steps": timed_steps,
        "samples": samples,
        "wall_s": wall,
        "samples_per_s": samples / wall,
        "warmup_steps": warmup_steps,
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
    _release(ctx.torch_device)
    return out


# ----------------------------------------------------------------------------- suite run


def machine_facts(backend: str) -> dict:
    facts = {
        "host": socket.gethostname(),
        "cpu_model": cpu_model_name(),
        "logical_cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "packages": package_versions(),
    }
    if backend == "cuda" and torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        facts.update(
            {
                "gpu": props.name,
                "gpu_memory_gib": round(props.total_memory / 2**30, 1),
                "cuda": torch.version.cuda,
                "cudnn": torch.backends.cudnn.version(),
            }
        )
    try:
        import transformers

        facts["transformers"] = transformers.__version__
    except ImportError:
        pass
    return facts


def run_suite(
    suite: dict,
    out_json: str | Path,
    only: list[str] | None = None,
    log: Callable[[str], None] = print,
) -> dict:
    """Measure every case of ``suite``; rewrite ``out_json`` after each measurement
    (atomically), so an interrupted run keeps what it measured."""
    backend = suite["device"]
    results = {
        "suite": suite["name"],
        "description": suite.get("description", ""),
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "device": backend,
        "machine": machine_facts(backend),
        "rounds": suite["rounds"],
        "measurements": [],
    }
    with tempfile.TemporaryDirectory(prefix="trainbench-bench-") as scratch:
        for workload, case in suite["cases"].items():
            if only and workload not in only:
                continue
            config = trainbench_config(suite, workload)
            data = str(Path(scratch) / workload)
            module = workloads.get(workload)
            module.prepare_data(config["workloads"][workload], data, config["seed"])
            # The process's first run on a device pays one-time costs (CUDA context,
            # cuBLAS handles, allocator growth, lazy imports): run one, keep it apart.
            t0 = time.perf_counter()
            first = case["batch_sizes"][0]
            try:
                warm = measure_harness(cell_spec(config, workload, Variant("harness"), first, data))
                status, note = "process_warmup", f"{warm['samples_per_s']:.1f} samples/s"
            except Exception as exc:  # recorded; the rounds below record their own failures
                warm = {"error": f"{type(exc).__name__}: {str(exc)[:2000]}"}
                status, note = "failed", warm["error"][:300]
            results["measurements"].append(
                {
                    "workload": workload,
                    "batch_size": first,
                    "variant": "harness",
                    "round": -1,
                    "status": status,
                    "seconds_total": time.perf_counter() - t0,
                    **warm,
                }
            )
            log(f"{workload}: process warm-up run (not used): {note}")
            for batch_size in case["batch_sizes"]:
                variants = case["variants"]
                shape: dict = {}
                for round_index in range(int(case.get("rounds", suite["rounds"]))):
                    # Rotate the order each round: no variant always goes first.
                    shift = round_index % len(variants)
                    for variant in variants[shift:] + variants[:shift]:
                        spec = cell_spec(config, workload, variant, batch_size, data)
                        t0 = time.perf_counter()
                        try:
                            measured = _measure(variant, spec, shape)
                            status = "ok"
                        except Exception as exc:  # a variant that fails is a result
                            measured = {"error": f"{type(exc).__name__}: {str(exc)[:2000]}"}
                            status = "failed"
                        row = {
                            "workload": workload,
                            "batch_size": batch_size,
                            "variant": variant.name,
                            "round": round_index,
                            "status": status,
                            "seconds_total": time.perf_counter() - t0,
                            # Other processes on the machine disturb host-bound steps:
                            # the 1-minute load average after the run says if any ran.
                            "load_average_1min": os.getloadavg()[0],
                            **measured,
                        }
                        results["measurements"].append(row)
                        log(
                            f"{workload} bs{batch_size} {variant.name} round {round_index}: "
                            + (
                                f"{measured['samples_per_s']:.1f} samples/s"
                                if status == "ok"
                                else measured["error"][:300]
                            )
                        )
                        results["summary"] = summarize(results["measurements"])
                        atomic_write_json(out_json, results)
    return results


def _measure(variant: Variant, spec: dict, shape: dict) -> dict:
    """The harness runs first in its shape (warm-up and timed steps); the others copy it."""
    if variant.runner == "harness":
        measured = measure_harness(spec)
        shape.setdefault("warmup", measured["warmup_steps"])
        shape.setdefault("timed", measured["steps"])
        return measured
    if not shape:
        shape.update(harness_shape(spec))
    if variant.runner == "bare":
        return measure_bare(spec, shape["warmup"], shape["timed"], variant.compile)
    return measure_hf_trainer(spec, shape["warmup"], shape["timed"])


def harness_shape(spec: dict) -> dict:
    """Warm-up and timed steps the harness runs for this spec (without running it)."""
    settings = spec["workload_settings"]
    ctx_free_len = _train_batches(spec)
    per_epoch = min(ctx_free_len, int(settings.get("max_steps_per_epoch") or ctx_free_len))
    total = per_epoch * int(settings["epochs"])
    warmup = int(settings["warmup_steps"])
    return {"warmup": warmup, "timed": total - warmup}


def _train_batches(spec: dict) -> int:
    meta = json.loads((Path(spec["data_path"]) / "meta.json").read_text())
    n_train = int(meta.get("n_train") or 0)
    return n_train // int(spec["cell"]["batch_size"])


# ----------------------------------------------------------------------------- summary


def _median(values: list[float]) -> float | None:
    return float(np.median(values)) if values else None


def summarize(measurements: list[dict]) -> list[dict]:
    """Per workload x batch size x variant: median throughput over rounds, ratios
    to the bare loop and the HF Trainer (ratio of medians, with the per-round
    ratios' range), and wall-clock vs CUDA-event agreement."""
    rows = []
    ok = [m for m in measurements if m["status"] == "ok"]
    keys = sorted({(m["workload"], m["batch_size"]) for m in measurements})
    for workload, batch_size in keys:
        case = [m for m in ok if m["workload"] == workload and m["batch_size"] == batch_size]
        by_variant: dict[str, list[dict]] = {}
        for m in case:
            by_variant.setdefault(m["variant"], []).append(m)
        medians = {v: _median([m["samples_per_s"] for m in ms]) for v, ms in by_variant.items()}
        failed = sorted(
            {
                m["variant"]
                for m in measurements
                if m["status"] == "failed"
                and (m["workload"], m["batch_size"]) == (workload, batch_size)
            }
        )
        for variant in sorted(set(by_variant) | set(failed)):
            ms = by_variant.get(variant, [])
            row = {
                "workload": workload,
                "batch_size": batch_size,
                "variant": variant,
                "rounds_ok": len(ms),
                "rounds_failed": sum(
                    1
                    for m in measurements
                    if m["status"] == "failed"
                    and (m["workload"], m["batch_size"], m["variant"])
                    == (workload, batch_size, variant)
                ),
                "median_samples_per_s": medians.get(variant),
            }
            for reference in ("bare", "hf_trainer"):
                if variant != reference and medians.get(reference) and medians.get(variant):
                    # Paired: each round's ratio is taken between runs made minutes apart,
                    # which cancels the machine's drift between rounds; then the median of
                    # the rounds' ratios with the statistics layer's interval (the range
                    # below 5 rounds, a bootstrap CI from 5).
                    per_round = _per_round_ratios(case, variant, reference)
                    if per_round:
                        interval = paired_ratio_interval(per_round)
                        row[f"over_{reference}"] = interval.estimate
                        row[f"over_{reference}_low"] = interval.low
                        row[f"over_{reference}_high"] = interval.high
                        row[f"over_{reference}_interval"] = interval.kind
                    row[f"over_{reference}_of_medians"] = medians[variant] / medians[reference]
            gaps = [
                m["event_vs_wall"] if "event_vs_wall" in m else m["event_s"] / m["wall_s"] - 1.0
                for m in ms
                if "event_vs_wall" in m or m.get("event_s")
            ]
            if gaps:
                row["event_vs_wall_max_abs"] = max(abs(g) for g in gaps)
                row["event_vs_wall_median"] = _median(gaps)
            firsts = [m["first_step_s"] for m in ms if m.get("first_step_s") is not None]
            if firsts:
                row["first_step_s_median"] = _median(firsts)
            waits = [
                m["data_wait_per_step_s"] for m in ms if m.get("data_wait_per_step_s") is not None
            ]
            if waits:
                row["data_wait_per_step_s_median"] = _median(waits)
            reported = [m["reported_samples_per_s"] for m in ms if m.get("reported_samples_per_s")]
            if reported:
                row["reported_samples_per_s_median"] = _median(reported)
            rows.append(row)
    return rows


def _per_round_ratios(case: list[dict], variant: str, reference: str) -> list[float]:
    rounds = {}
    for m in case:
        rounds.setdefault(m["round"], {})[m["variant"]] = m["samples_per_s"]
    return [r[variant] / r[reference] for r in rounds.values() if variant in r and reference in r]


def ratio_interval_of(row: dict, key: str) -> tuple[float, float, float, str]:
    """(estimate, low, high, kind) of a paired ratio in a summary row; results files
    written before the intervals kept the rounds' range instead (the same thing below
    5 rounds)."""
    if f"{key}_low" in row:
        return row[key], row[f"{key}_low"], row[f"{key}_high"], row[f"{key}_interval"]
    if f"{key}_range" in row:
        low, high = row[f"{key}_range"]
        return row[key], low, high, "range of the paired rounds"
    return row[key], math.nan, math.nan, "no interval"


def judge(low: float, high: float, target: float) -> str:
    """A lower bound target is "met" when the whole interval lies at or above it,
    "missed" when the whole interval lies below it, else "not resolved"."""
    if not (math.isfinite(low) and math.isfinite(high)):
        return "not resolved"
    if low >= target:
        return "met"
    if high < target:
        return "missed"
    return "not resolved"


def target_checks(results: dict) -> list[dict]:
    """The issue's targets, each with the measured value, its interval and the
    verdict from the interval ("met", "missed", "not resolved"): never from the
    point estimate alone."""
    checks = []
    for row in results.get("summary", []):
        where = f"{row['workload']} bs {row['batch_size']}"
        if row["variant"] != "harness":
            continue
        targets = [("over_bare", f"harness / bare loop >= {HARNESS_OVER_BARE_TARGET}",
                    HARNESS_OVER_BARE_TARGET)]  # fmt: skip
        if results["device"] == "cuda" and row["batch_size"] in HF_TARGET_BATCH_SIZES:
            targets.append(
                (
                    "over_hf_trainer",
                    f"harness / HF Trainer (steady state) >= {HARNESS_OVER_HF_TARGET}",
                    HARNESS_OVER_HF_TARGET,
                )  # fmt: skip
            )
        for key, text, goal in targets:
            if key not in row:
                continue
            value, low, high, kind = ratio_interval_of(row, key)
            checks.append(
                {
                    "target": text,
                    "where": where,
                    "value": value,
                    "low": low,
                    "high": high,
                    "interval": kind,
                    "met": judge(low, high, goal),
                }  # fmt: skip
            )
        if "event_vs_wall_max_abs" in row:
            # The worst round against the bound: no interval needed for a maximum.
            worst = row["event_vs_wall_max_abs"]
            checks.append(
                {
                    "target": f"harness step times vs CUDA events within {TIMING_AGREEMENT_TARGET:.0%}",
                    "where": where,
                    "value": worst,
                    "low": math.nan,
                    "high": math.nan,
                    "interval": "the worst round",
                    "met": "met" if worst <= TIMING_AGREEMENT_TARGET else "missed",
                }
            )
    return checks


def check_value_text(check: dict) -> str:
    if "CUDA events" in check["target"]:
        return f"{check['value']:.2%} ({check['interval']})"
    value = f"{check['value']:.3f}"
    if math.isfinite(check["low"]) and math.isfinite(check["high"]):
        value += f" ({check['low']:.3f}–{check['high']:.3f}, {check['interval']})"
    return value


def _met_text(check: dict) -> str:
    return check["met"] if check["met"] == "met" else f"**{check['met']}**"


def _ratio_cell(row: dict, key: str) -> str:
    if key not in row:
        return ""
    value, low, high, kind = ratio_interval_of(row, key)
    text = f"{value:.3f}"
    if math.isfinite(low) and math.isfinite(high):
        text += f" ({low:.3f}–{high:.3f})"
    return text


def _load_line(results: dict) -> str:
    loads = [m["load_average_1min"] for m in results["measurements"] if "load_average_1min" in m]
    if not loads:
        return "- machine load during the run: not recorded"
    cores = results["machine"].get("logical_cores") or 1
    return (
        f"- 1-minute load average after each measurement: median {np.median(loads):.2f}, "
        f"max {max(loads):.2f} on {cores} cores (above ~1 on a small machine means other "
        "processes competed for the host)"
    )


def render_markdown(results: dict) -> str:
    """The Markdown summary of one results file; every number comes from it."""
    m = results["machine"]
    lines = [
        f"# Throughput benchmark `{results['suite']}` ({results['date']})",
        "",
        results.get("description", "").strip(),
        "",
        f"- device: **{results['device']}**"
        + (f" ({m['gpu']}, {m['gpu_memory_gib']} GiB, CUDA {m['cuda']})" if m.get("gpu") else ""),
        f"- host CPU: {m['cpu_model']} ({m['logical_cores']} logical cores, "
        f"{m['torch_threads']} torch threads)",
        f"- python {m['python']}, torch {m['torch']}"
        + (f", transformers {m['transformers']}" if m.get("transformers") else ""),
        f"- rounds per variant: {results['rounds']} (order rotated each round); throughput = "
        "timed samples / wall seconds between device synchronizations, warm-up excluded",
        _load_line(results),
        "",
        "## Targets",
        "",
        "A target is met only when the whole interval of the paired ratio lies at or above "
        "it, missed when the whole interval lies below it, and not resolved otherwise.",
        "",
        "| target | where | measured (interval) | verdict |",
        "|---|---|---|---|",
    ]
    checks = target_checks(results)
    for c in checks:
        lines.append(f"| {c['target']} | {c['where']} | {check_value_text(c)} | {_met_text(c)} |")
    if not checks:
        lines.append("| (no target applies to this run) | | | |")
    lines += [
        "",
        "## Throughput (median over rounds)",
        "",
        "| workload | batch | variant | samples/s | ÷ bare (range) | ÷ HF Trainer | "
        "event vs wall | first step s | data wait ms/step |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in results.get("summary", []):
        sps = row["median_samples_per_s"]
        lines.append(
            "| "
            + " | ".join(
                [
                    row["workload"],
                    str(row["batch_size"]),
                    row["variant"]
                    + (f" ({row['rounds_failed']} failed)" if row["rounds_failed"] else ""),
                    f"{sps:,.0f}" if sps else "failed",
                    _ratio_cell(row, "over_bare"),
                    _ratio_cell(row, "over_hf_trainer"),
                    f"{row['event_vs_wall_median']:+.2%}" if "event_vs_wall_median" in row else "",
                    f"{row['first_step_s_median']:.2f}" if "first_step_s_median" in row else "",
                    f"{row['data_wait_per_step_s_median'] * 1e3:.2f}"
                    if "data_wait_per_step_s_median" in row
                    else "",
                ]
            )
            + " |"
        )
    hf = [r for r in results.get("summary", []) if r.get("reported_samples_per_s_median")]
    if hf:
        lines += ["", "HF Trainer's own reported throughput (start-up included): "]
        lines += [
            f"- {r['workload']} bs {r['batch_size']}: {r['reported_samples_per_s_median']:,.0f} samples/s"
            for r in hf
        ]
    failures = [x for x in results["measurements"] if x["status"] == "failed"]
    if failures:
        lines += ["", "## Failed measurements", ""]
        lines += [
            f"- {x['workload']} bs {x['batch_size']} {x['variant']} round {x['round']}: "
            f"`{x['error'][:300]}`"
            for x in failures
        ]
    lines += [
        "",
        "Columns: *÷ bare* = median over rounds of the round's throughput ratio (variant ÷ bare "
        "loop), with its interval in brackets (the rounds' range below 5 rounds, a 95% bootstrap "
        "CI of the median from 5); *event vs wall* = summed CUDA-event step time over the synchronized wall "
        "time of the same steps, minus 1; *first step* = step 0 alone, synchronized (includes "
        "compilation for compiled variants); *data wait* = host time blocked fetching the next "
        "batch, per timed step (harness only).",
        "",
    ]
    return "\n".join(lines)


def write_markdown(results: dict, path: str | Path) -> None:
    atomic_write_text(path, render_markdown(results))


def render_index(result_files: list[Path]) -> str:
    """Every target check of every results file, one table (benchmarks/results/README)."""
    lines = [
        "# Throughput benchmark results",
        "",
        "Generated by `python benchmarks/throughput.py --index` from the JSON files here; "
        "each file's own Markdown has the full tables.",
        "",
        "| results | device | date | target | where | measured (interval) | verdict |",
        "|---|---|---|---|---|---|---|",
    ]
    for path in sorted(result_files):
        results = json.loads(path.read_text())
        machine = results["machine"]
        device = results["device"] + (f" ({machine['gpu']})" if machine.get("gpu") else "")
        if results["device"] == "cpu":
            device += f" ({machine['cpu_model']}, {machine['torch_threads']} threads)"
        md = path.with_suffix(".md").name
        for c in target_checks(results):
            lines.append(
                f"| [{path.stem}]({md}) | {device} | {results['date']} | {c['target']} | "
                f"{c['where']} | {check_value_text(c)} | {_met_text(c)} |"
            )
    return "\n".join(lines) + "\n"
