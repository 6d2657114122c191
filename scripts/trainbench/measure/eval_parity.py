"""Evaluation parity: the cell's final weights evaluated on its device and, on the
same evaluation batches, by the CPU in float64 and in float32 (docs/statistics.md,
"Evaluation parity").

Why: the training-loss parity (trainbench.analysis.stats.parity) sees only what training
computes. An error that lives only in the evaluation path — an eval-mode kernel,
attention under ``no_grad``, a reduction that differs on one backend (MPS has
shipped such bugs) — leaves training's losses right and the reported metric wrong.

**What is compared.** The device side is the last epoch's evaluation — the one the
cell's final metric came from, run by the workload's own ``evaluate`` on the device
in eval mode under ``no_grad`` and the cell's autocast; its outputs are kept and its
weights copied to the CPU right after that pass's timed region. After every timed
region and the diagnostic pass (its own wall-time phase, ``eval_parity``), the same
``evaluate`` runs twice on the CPU on a copy of the model holding those weights, over
the same evaluation loader in the same order, each batch copied to the CPU with a
blocking copy first (data staged on the device included) and its floating tensors cast
there; nothing is allocated on the device:

* in **float64** (torch's default dtype float64, autocast off): the reference. Where an
  op has no float64 kernel it falls back to CPU float32 and says so (``reference``);
* in **float32** (autocast off): the network's **float32 floor**, how far correct
  float32 arithmetic strays from float64 through this very network and these weights.

**Rule** (:mod:`trainbench.common.eval_envelope`). Per floating output (``evaluate``'s
``outputs``: per-sample logits or embeddings, each leaf apart) the relative RMSE against
float64 of the device (``error``) and of the CPU float32 pass (``floor``); integer
outputs (labels, ids) must be equal. An output passes when its error is within the
envelope of the cell's precision class, ``m_p × (u_p / u_fp32) × floor + u_p``; the cell
passes when every output does. The **precision class** (:func:`evaluation_precision`)
names what may have computed the evaluation: the autocast dtype, TF32 where a CUDA cell
allowed it and it reaches the model (:mod:`trainbench.measure.tf32_reach`: a module scan
and a probe with TF32 off; float32 where it reaches no op, e.g. a model of Linear layers
under PyTorch's defaults), TF32 too where
``nn.MultiheadAttention``'s eval-mode fast path ran on CUDA (measured at about TF32's
precision), else float32; each reason is recorded. The primary metric is computed from
every side's outputs with the workload's ``score`` and the device's difference from
float64 recorded (a thresholded metric may move by one sample's worth from rounding
alone, so it is reported, not judged). An ``evaluate`` that returns metrics only (an
own model without ``score``) is judged on its metrics with the same rule.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import time
import traceback
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

import torch
from trainbench.common.eval_envelope import ALLOWANCES, judge
from trainbench.common.precision_classes import (
    coarsest,
    precision_of,
    tf32_allowed_text,
    tf32_reach_reason,
)
from trainbench.measure import tf32_reach
from trainbench.measure.data import to_device
from trainbench.measure.eval_outputs import check_same_structure, compare_outputs, corrupt_outputs
from trainbench.measure.parts_contract import BadInputError
from trainbench.measure.precision import cast_floats, default_dtype

if TYPE_CHECKING:
    from trainbench.measure.context import RunContext
    from trainbench.measure.parts import TrainingParts

FAULT = "eval_output_error"
REFERENCE = "CPU float64"
FLOOR = "CPU float32"
FALLBACK_REFERENCE = "CPU float32 (an op of the model has no float64 kernel)"
METHOD = (
    "the final model's evaluate() on the cell's device (eval mode, no_grad, the cell's "
    "autocast) against the same evaluate() of a copy on the CPU in float64 (default dtype "
    "float64) and in float32 (the network's float32 floor), each batch copied to the CPU "
    "with a blocking copy and its floating tensors cast there, the same batches in the same "
    "order; per floating output the relative RMSE ||out - ref|| / ||ref|| of the device "
    "(error) and of CPU float32 (floor) against float64, integer outputs equal; pass when "
    "every error is within m_p * (u_p / u_fp32) * floor + u_p for the cell's precision class "
    f"p (m: {', '.join(f'{k} {v:g}' for k, v in ALLOWANCES.items())}); the primary "
    "metric's difference is reported, not judged"
)
FAST_PATH = (
    "nn.MultiheadAttention's eval-mode fast path (torch.backends.mha) ran on CUDA: it "
    "computes at about TF32's precision (measured on an H200 with TF32 off in cuDNN and "
    "cuBLAS: clip's text embeddings, through it, 191-297x their float32 floor; its image "
    "embeddings, through convolutions, 1.0-1.3x; benchmarks/results/false-alarm-cuda-2026-11-28)"
)


# ----------------------------------------------------------------------------- precision


def fast_path_on(model: torch.nn.Module, device_type: str) -> bool:
    """Whether ``nn.MultiheadAttention``'s fast path (``torch.backends.mha``; also that
    of ``nn.TransformerEncoderLayer``, which holds one) may have computed the model's
    evaluation on CUDA: the model holds such a module and the fast path is enabled
    (torch builds without the switch always take it in eval mode under no_grad)."""
    if device_type != "cuda":
        return False
    mha = getattr(torch.backends, "mha", None)
    getter = getattr(mha, "get_fastpath_enabled", None)
    if getter is not None and not getter():
        return False
    return any(isinstance(m, torch.nn.MultiheadAttention) for m in model.modules())


def evaluation_precision(model: torch.nn.Module, ctx: RunContext) -> tuple[str, list[str]]:
    """(precision class, the reasons for it) of the cell's evaluation of ``model``: the
    coarsest of its training class (autocast dtype, else TF32 where allowed, not
    overridden and reaching the model (the record's ``tf32_reach``), see
    :func:`trainbench.common.precision_classes.precision_of`), the
    model's own floating dtype (a model cast to float16 or bfloat16) and, on CUDA, TF32
    where :func:`fast_path_on`."""
    amp = ctx.amp.dtype if ctx.amp is not None and ctx.amp.enabled else None
    facts = ctx.settings_in_force or {}
    found = {precision_of(amp, facts, honour_override=True, honour_reach=True):
             _class_reason(amp, facts)}  # fmt: skip
    dtypes = {str(p.dtype).removeprefix("torch.") for p in model.parameters()
              if p.is_floating_point()}  # fmt: skip
    for dtype in dtypes & {"float16", "bfloat16"}:
        found.setdefault(dtype, f"the model's parameters are {dtype}")
    if fast_path_on(model, getattr(ctx.torch_device, "type", "")):
        found.setdefault("tf32", FAST_PATH)
    chosen = coarsest(found)
    return chosen, [found[chosen], *(why for p, why in found.items() if p != chosen and why)]


def _class_reason(amp: str | None, facts: dict) -> str:
    if amp:
        return f"autocast {amp}"
    reach = tf32_reach_reason(facts)  # the model's (tf32_reach); absent in older records
    if reach:
        return reach
    if str(facts.get("tf32_override") or "").strip() == "0":
        return "float32: NVIDIA_TF32_OVERRIDE=0 switches TF32 off in cuBLAS and cuDNN"
    allowed = tf32_allowed_text(facts)
    if allowed:
        return allowed
    mode = facts.get("float32_matmul_precision")
    if mode in ("high", "medium"):
        return f"float32 matmul precision {mode!r}"
    return "float32"


# ----------------------------------------------------------------------------- faults


def fault_size(ctx: Any) -> float | None:
    """The size of the active ``eval_output_error`` fault, or None."""
    from trainbench.measure.faults import active_fault_entry
    from trainbench.measure.numeric_fault import DEFAULT_SIZE

    entry = active_fault_entry(ctx.spec, ctx.attempt)
    if not entry or entry.get("fault") != FAULT:
        return None
    return float(DEFAULT_SIZE if entry.get("size") is None else entry["size"])


# ----------------------------------------------------------------------------- passes


@dataclasses.dataclass
class FinalEvaluation:
    """The last epoch's evaluation on the device (what the cell's metric came from) and
    the weights it saw, copied to the CPU right after its timed region."""

    evaluation: dict
    weights: dict[int, torch.Tensor]  # id(parameter or buffer) -> CPU copy

    @classmethod
    def take(cls, model: torch.nn.Module, evaluation: dict) -> FinalEvaluation:
        tensors = [*model.parameters(), *model.buffers()]
        return cls(evaluation, {id(t): t.detach().to("cpu", copy=True) for t in tensors})


def faulted(evaluation: dict, ctx: Any) -> dict:
    """``evaluation`` with its outputs (or, without outputs, its metrics) corrupted
    when the test fault ``eval_output_error`` is active; else unchanged."""
    size = fault_size(ctx)
    if size is None:
        return evaluation
    key = "outputs" if "outputs" in evaluation else "metrics"
    return {**evaluation, key: corrupt_outputs(evaluation.get(key), size)}


def reference_model(model: torch.nn.Module, final: FinalEvaluation, dtype: torch.dtype):
    """A copy of ``model`` on the CPU with the final evaluation's weights, floating ones
    in ``dtype``: the deep copy finds every parameter and buffer already copied (its
    memo), so nothing is allocated on the device."""
    memo: dict[int, Any] = {}
    for p in model.parameters():
        memo[id(p)] = torch.nn.Parameter(_in(final.weights[id(p)], dtype), p.requires_grad)
    for b in model.buffers():
        memo[id(b)] = _in(final.weights[id(b)], dtype)
    return copy.deepcopy(model, memo).eval()


def _in(tensor: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return tensor.to(dtype) if tensor.is_floating_point() else tensor


class HostBatches:
    """The evaluation loader's batches on the host, floating tensors in ``dtype``.

    Synchronized by construction: a batch the loader holds on the device (data staged
    there) is copied to the CPU with a *blocking* copy before anything reads it, and
    cast there, so the reference never reads device memory and allocates none. (It
    used to cast on the device and leave the copy to the workload, whose non-blocking
    device-to-host copy returned before the data had arrived: the reference read
    another batch's bytes.) ``sources`` names the devices the batches came from."""

    def __init__(self, loader: Iterable, dtype: torch.dtype):
        self.loader, self.dtype = loader, dtype
        self.sources: set[str] = set()

    def __iter__(self) -> Iterator:
        for batch in self.loader:
            if not isinstance(batch, dict):
                yield batch
                continue
            for value in batch.values():
                if isinstance(value, torch.Tensor):
                    self.sources.add(value.device.type)
            yield cast_floats(to_device(batch, "cpu", non_blocking=False), self.dtype)

    def describe(self) -> str:
        away = sorted(self.sources - {"cpu"})
        if not away:
            return "host batches (the evaluation loader's own)"
        return (f"batches staged on {', '.join(away)}, copied to the CPU with blocking copies "
                "before the reference read them")  # fmt: skip


def reference_evaluation(
    parts: TrainingParts,
    ctx: RunContext,
    final: FinalEvaluation,
    dtype: torch.dtype,
    batches: HostBatches | None = None,
) -> dict:
    """The same evaluation on the CPU in ``dtype``, of the final evaluation's weights,
    over ``batches`` (default: the evaluation loader's, on the host)."""
    cpu = torch.device("cpu")
    ctx = dataclasses.replace(ctx, torch_device=cpu)
    batches = batches if batches is not None else HostBatches(parts.eval_loader, dtype)
    with default_dtype(dtype), torch.no_grad():
        model = reference_model(parts.model, final, dtype)
        return parts.evaluate(model, batches, ctx)


def evaluation_data(loader: Iterable, device: torch.device) -> str:
    """Where the device's evaluation read its batches (``loader``, the cell's evaluation
    loader): staged on the device, or from the host through a DataLoader (its copies
    then as the workload makes them)."""
    if getattr(loader, "on_device", False):
        return f"staged on {getattr(loader, 'device', device)} (gathered there)"
    pinned = bool(getattr(loader, "pin_memory", False))
    return "host DataLoader" + (" (pinned memory)" if pinned else "")


def _metrics(parts: TrainingParts, evaluation: dict) -> dict:
    if "outputs" in evaluation and parts.score is not None:
        return parts.score(evaluation["outputs"])
    return dict(evaluation.get("metrics") or {})


def _finite(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def evaluate_on_cpu(
    parts: TrainingParts, ctx: RunContext, final: FinalEvaluation
) -> tuple[dict, dict, dict]:
    """(the float64 reference, the float32 floor, facts: which reference, from which
    batches) of the final weights on the CPU. Where an op of the model has no float64
    kernel, both are CPU float32: the floor is then 0 and the absolute term decides."""
    batches = HostBatches(parts.eval_loader, torch.float64)
    reference = REFERENCE
    try:
        reference_side = reference_evaluation(parts, ctx, final, torch.float64, batches)
    except (RuntimeError, NotImplementedError, TypeError) as exc:
        if "Double" not in str(exc) and "float64" not in str(exc):
            raise
        reference = FALLBACK_REFERENCE
        batches = HostBatches(parts.eval_loader, torch.float32)
        reference_side = reference_evaluation(parts, ctx, final, torch.float32, batches)
    started = time.perf_counter()
    floor_side = reference_evaluation(parts, ctx, final, torch.float32)
    facts = {"reference": reference, "floor_reference": FLOOR,
             "floor_seconds": time.perf_counter() - started,
             "reference_batches": batches.describe()}  # fmt: skip
    return reference_side, floor_side, facts


def measure(parts: TrainingParts, ctx: RunContext, final: FinalEvaluation) -> dict:
    """The record's ``eval_parity`` (see the module docstring)."""
    started = time.perf_counter()
    precision, reasons = evaluation_precision(parts.model, ctx)
    device_side = final.evaluation
    reference_side, floor_side, facts = evaluate_on_cpu(parts, ctx, final)
    key = "outputs" if "outputs" in device_side else "metrics"
    check_same_structure(device_side.get(key), reference_side.get(key), ctx, key)
    compared = compare_outputs(device_side.get(key), reference_side.get(key), floor_side.get(key))
    judged = judge(compared["outputs"], precision, mismatched=compared["mismatched"])
    metric = parts.primary_metric
    got, want, low = (_finite(_metrics(parts, side).get(metric))
                      for side in (device_side, reference_side, floor_side))  # fmt: skip
    return {
        **judged,
        "precision_reasons": reasons,
        "compared": key,
        "outputs_compared": compared["outputs_compared"],
        "finite": judged["ratio"] is not None,
        "metric": metric,
        "device_metric": got,
        "reference_metric": want,
        "floor_metric": low,
        "metric_difference": got - want if got is not None and want is not None else None,
        "samples": int(device_side.get("samples") or 0),
        **facts,
        "device_evaluation_data": evaluation_data(parts.eval_loader, ctx.torch_device),
        "fault_sweep": fault_sweep(
            ctx.spec, device_side.get(key), reference_side.get(key), floor_side.get(key), precision
        ),  # fmt: skip
        "seconds": time.perf_counter() - started,
        "method": METHOD,
    }


def fault_sweep(spec: dict, device: Any, reference: Any, floor: Any,
                precision: str) -> list[dict] | None:  # fmt: skip
    """For ``benchmarks/parity_power.py`` only (``spec["eval_fault_sizes"]``, refused
    unless faults are allowed): the test fault ``eval_output_error`` at each size,
    applied apart to copies of the device's outputs after the clean comparison, and
    judged by the same rule. The fault acts on the outputs alone, after the pass, so one
    run's outputs serve every size; nothing the cell reports is changed."""
    sizes = spec.get("eval_fault_sizes") or []
    if not sizes or not spec.get("faults_allowed"):
        return None
    found = []
    for size in sizes:
        compared = compare_outputs(corrupt_outputs(device, float(size)), reference, floor)
        judged = judge(compared["outputs"], precision, mismatched=compared["mismatched"])
        found.append({"size": float(size), "status": judged["status"], "ratio": judged["ratio"],
                      "outputs": judged["outputs"]})  # fmt: skip
    return found


def wanted(spec: dict) -> bool:
    """Whether the cell asks for evaluation parity (``spec["eval_parity"]``: every
    device but the baseline); never in a float64 reference run."""
    return bool(spec.get("eval_parity")) and not spec.get("reference")


def run(parts: TrainingParts, ctx: RunContext, final: FinalEvaluation | None) -> dict | None:
    """:func:`measure` where :func:`wanted`; an error is recorded (status ``error``),
    never the cell's. First, in every cell, whether TF32 reaches the model
    (:func:`trainbench.measure.tf32_reach.record`, into the settings in force): the
    evaluation's class reads it."""
    tf32_reach.record(parts, ctx)
    if not wanted(ctx.spec):
        return None
    if final is None:
        return {"status": "error", "error": "no final evaluation was kept", "method": METHOD}
    try:
        return measure(parts, ctx, final)
    except BadInputError:  # the workload's evaluate broke its contract: the cell's error
        raise
    except Exception as exc:  # the cell's measurement is complete; say what failed
        return {
            "status": "error",
            "error": f"{type(exc).__name__}: {exc}"[:500],
            "traceback": "".join(traceback.format_exception(exc))[-2000:],
            "method": METHOD,
        }
