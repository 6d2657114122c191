"""Evaluation parity: the cell's final weights evaluated on its device and, on the
same evaluation batches, by the CPU in float64 (docs/statistics.md, "Evaluation
parity").

Why: the training-loss parity (trainbench.analysis.stats.parity) sees only what training
computes. An error that lives only in the evaluation path — an eval-mode kernel,
attention under ``no_grad``, a reduction that differs on one backend (MPS has
shipped such bugs) — leaves training's losses right and the reported metric wrong.

**What is compared.** The device side is the last epoch's evaluation — the one the
cell's final metric came from, run by the workload's own ``evaluate`` on the device
in eval mode under ``no_grad`` and the cell's autocast; its outputs are kept and its
weights copied to the CPU right after that pass's timed region. The reference side,
after every timed region and the diagnostic pass (its own wall-time phase,
``eval_parity``), is the same ``evaluate`` of a copy of the model holding those
weights on the CPU in float64 (torch's default dtype float64, autocast off), over the
same evaluation loader in the same order, each batch copied to the CPU with a blocking
copy first (data staged on the device included) and its floating tensors cast to
float64 there; nothing is allocated on the device. Where an op has no float64 kernel
the reference falls back to CPU float32 and says so (``reference`` in the record).

**Rule.** Every floating output (``evaluate``'s ``outputs``: per-sample logits or
embeddings) is compared with the canary's normwise error ``max|out − ref| /
max(max|ref|, 1e-30)`` (:func:`trainbench.run.canary.relative_error`); integer outputs
(labels, ids) must be equal. The cell passes when the worst error is within the
canary's tolerance for the cell's precision (float32 1e-4, TF32 5e-3, float16 1e-2,
bfloat16 5e-2).

**TF32.** A CUDA float32 cell runs cuDNN's convolutions and RNNs in TF32 under
PyTorch's defaults (``torch.backends.cudnn.allow_tf32``). Measured on an H100
(benchmarks/results/false-alarm-cuda-*.md), whole networks through those kernels came
1e-2 to 7e-2 from float64 (image_cnn, clip, two_tower; text, without cuDNN ops, 6e-5),
varying between runs with the algorithms ``cudnn.benchmark`` picks, and image_cnn's
came 5e-5 with TF32 off. So where a TF32 cell's outputs exceed the TF32 tolerance — or
a float32 cell's exceed float32's while cuDNN's TF32 is allowed (its class says float32:
the matmuls are, the convolutions are not; clip came 1.6e-4 to 2.0e-4 from float64
so) — the device evaluates the same weights once more with TF32 off in cuDNN and cuBLAS
(:func:`tf32_recheck`, after everything timed): within float32's tolerance, the
difference is TF32's and the cell passes with that finding recorded (``tf32``);
otherwise it fails. The primary metric is computed from both
sides' outputs with the workload's ``score`` and its difference recorded (a
thresholded metric may move by one sample's worth from rounding alone, so it is
reported, not judged). An ``evaluate`` that returns metrics only (an own model
without ``score``) is judged on its metrics with the same normwise rule.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import math
import time
import traceback
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from trainbench.run.canary import TOLERANCES, precision_of, relative_error
from trainbench.run.data import to_device
from trainbench.run.parts_contract import CONTRACT, BadInputError, entry_name
from trainbench.run.precision import cast_floats, default_dtype

if TYPE_CHECKING:
    from trainbench.run.training import TrainingLoop

FAULT = "eval_output_error"
REFERENCE = "CPU float64"
FALLBACK_REFERENCE = "CPU float32 (an op of the model has no float64 kernel)"
METHOD = (
    "the final model's evaluate() on the cell's device (eval mode, no_grad, the cell's "
    "autocast) against the same evaluate() of a copy on the CPU in float64 (default "
    "dtype float64, each batch copied to the CPU with a blocking copy, its floating tensors "
    "cast there), the same batches in the same order; "
    "per floating output max|out - ref| / max(max|ref|, 1e-30), integer outputs equal; "
    "pass when the worst is within the canary's tolerance for the cell's precision (float32 "
    "1e-4, TF32 5e-3, float16 1e-2, bfloat16 5e-2); a TF32 cell beyond it is evaluated again "
    "with TF32 off and passes when that is within float32's; the primary metric's difference "
    "is reported, not judged"
)


def tolerance_of(ctx: Any) -> tuple[str, float]:
    """(precision class, tolerance) of the cell's evaluation outputs."""
    precision = precision_of(ctx)
    if precision.autocast_dtype is not None:
        key = str(precision.autocast_dtype).removeprefix("torch.")
    elif precision.input_dtype in (torch.float16, torch.bfloat16):
        key = str(precision.input_dtype).removeprefix("torch.")
    else:
        key = precision.fp32_matmul or "float32"
    return key, TOLERANCES[key]


# ----------------------------------------------------------------------------- outputs


def leaves(value: Any, path: str = "outputs") -> Iterator[tuple[str, Any]]:
    """(path, leaf) of every tensor, array or number in nested tuples, lists, dicts."""
    if isinstance(value, torch.Tensor | np.ndarray | int | float | bool):
        yield path, value
    elif isinstance(value, dict):
        for key in value:
            yield from leaves(value[key], f"{path}.{key}")
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            yield from leaves(item, f"{path}[{i}]")


def _tensor(value: Any) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        return value.detach().cpu()
    return torch.as_tensor(np.asarray(value))


def compare_outputs(device: Any, reference: Any) -> dict:
    """The worst normwise error over floating leaves, and any integer leaf that
    differs or any leaf missing on one side."""
    got, want = dict(leaves(device)), dict(leaves(reference))
    worst, worst_at, mismatched = 0.0, None, []
    for path in sorted(set(got) | set(want)):
        if path not in got or path not in want:
            mismatched.append(f"{path} on one side only")
            continue
        a, b = _tensor(got[path]), _tensor(want[path])
        if a.is_floating_point() or b.is_floating_point():
            error = relative_error(a, b)
            if error > worst or worst_at is None:
                worst, worst_at = error, path
        elif a.shape != b.shape or not torch.equal(a, b):
            mismatched.append(f"{path} (integer) differs")
    return {
        "worst": worst,
        "worst_output": worst_at,
        "outputs_compared": len(got),
        "mismatched": mismatched,
    }


def check_same_structure(device: Any, reference: Any, ctx: Any, key: str) -> None:
    """``evaluate`` gave the same structure on the device and in the reference (the same
    output paths, each of the same shape and kind): else its result depends on where it
    ran, and the two cannot be compared."""

    def shapes(value: Any) -> dict[str, tuple]:
        found = {}
        for path, leaf in leaves(value, key):
            tensor = leaf if isinstance(leaf, torch.Tensor) else torch.as_tensor(np.asarray(leaf))
            found[path] = (tuple(tensor.shape), tensor.is_floating_point())
        return found

    got, want = shapes(device), shapes(reference)
    differs = [
        f"{path}: {got.get(path, 'absent')} on the device, {want.get(path, 'absent')} in the reference"
        for path in sorted(set(got) | set(want))
        if got.get(path) != want.get(path)
    ]
    if differs:
        raise BadInputError(
            f"{entry_name(ctx)}: evaluate(model, loader, ctx) returned {key} of another "
            f"structure on the device than in the float64 reference on the CPU "
            f"({'; '.join(differs[:3])}{' ...' if len(differs) > 3 else ''}) (shape, floating). "
            f"Fix: return the same {key} wherever it runs, e.g. no device-dependent keys "
            f"or shapes ({CONTRACT})."
        )


def corrupt_outputs(value: Any, size: float) -> Any:
    """The test fault ``eval_output_error``: ``value`` with every floating tensor or
    array multiplied by 1 ± ``size`` on a fraction of its tiles
    (:func:`trainbench.run.numeric_fault.tile_factors`); training is untouched."""
    from trainbench.run.numeric_fault import corrupt_

    if isinstance(value, torch.Tensor) and value.is_floating_point():
        return corrupt_(value.detach().clone(), size)
    if isinstance(value, np.ndarray) and np.issubdtype(value.dtype, np.floating):
        return corrupt_(torch.from_numpy(value.copy()), size).numpy()
    if isinstance(value, float):
        return value * (1 + size)
    if isinstance(value, dict):
        return {k: corrupt_outputs(v, size) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(corrupt_outputs(v, size) for v in value)
    return value


def fault_size(ctx: Any) -> float | None:
    """The size of the active ``eval_output_error`` fault, or None."""
    from trainbench.run.faults import active_fault_entry
    from trainbench.run.numeric_fault import DEFAULT_SIZE

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
    loop: TrainingLoop,
    final: FinalEvaluation,
    dtype: torch.dtype,
    batches: HostBatches | None = None,
) -> dict:
    """The same evaluation on the CPU in ``dtype``, of the final evaluation's weights,
    over ``batches`` (default: the evaluation loader's, on the host)."""
    parts = loop.parts
    cpu = torch.device("cpu")
    ctx = dataclasses.replace(loop.ctx, torch_device=cpu)
    batches = batches if batches is not None else HostBatches(parts.eval_loader, dtype)
    with default_dtype(dtype), torch.no_grad():
        model = reference_model(parts.model, final, dtype)
        return parts.evaluate(model, batches, ctx)


def evaluation_data(loop: TrainingLoop) -> str:
    """Where the device's evaluation read its batches: staged on the device, or from
    the host through a DataLoader (its copies then as the workload makes them)."""
    loader = loop.parts.eval_loader
    if getattr(loader, "on_device", False):
        return f"staged on {getattr(loader, 'device', loop.device)} (gathered there)"
    pinned = bool(getattr(loader, "pin_memory", False))
    return "host DataLoader" + (" (pinned memory)" if pinned else "")


def _metrics(loop: TrainingLoop, evaluation: dict) -> dict:
    if "outputs" in evaluation and loop.parts.score is not None:
        return loop.parts.score(evaluation["outputs"])
    return dict(evaluation.get("metrics") or {})


def _finite(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def measure(loop: TrainingLoop, final: FinalEvaluation) -> dict:
    """The record's ``eval_parity`` (see the module docstring)."""
    started = time.perf_counter()
    precision, tolerance = tolerance_of(loop.ctx)
    device_side = final.evaluation
    reference = REFERENCE
    batches = HostBatches(loop.parts.eval_loader, torch.float64)
    try:
        reference_side = reference_evaluation(loop, final, torch.float64, batches)
    except (RuntimeError, NotImplementedError, TypeError) as exc:
        if "Double" not in str(exc) and "float64" not in str(exc):
            raise
        reference = FALLBACK_REFERENCE
        batches = HostBatches(loop.parts.eval_loader, torch.float32)
        reference_side = reference_evaluation(loop, final, torch.float32, batches)
    has_outputs = "outputs" in device_side
    key = "outputs" if has_outputs else "metrics"
    check_same_structure(device_side.get(key), reference_side.get(key), loop.ctx, key)
    compared = compare_outputs(device_side.get(key), reference_side.get(key))
    metric = loop.parts.primary_metric
    got = _finite(_metrics(loop, device_side).get(metric))
    want = _finite(_metrics(loop, reference_side).get(metric))
    worst = compared["worst"]
    ok = math.isfinite(worst) and worst <= tolerance and not compared["mismatched"]
    recheck = None
    if (
        not ok
        and tf32_possible(loop, precision)
        and not compared["mismatched"]
        and math.isfinite(worst)
    ):
        recheck = tf32_recheck(loop, final, reference_side.get(key), key)
        ok = recheck["status"] == "pass"
    return {
        "status": "pass" if ok else "fail",
        "tf32": recheck,
        "compared": key,
        **compared,
        "worst": worst if math.isfinite(worst) else None,
        "finite": math.isfinite(worst),
        "precision": precision,
        "tolerance": tolerance,
        "error_over_tolerance": worst / tolerance if math.isfinite(worst) else None,
        "metric": metric,
        "device_metric": got,
        "reference_metric": want,
        "metric_difference": got - want if got is not None and want is not None else None,
        "samples": int(device_side.get("samples") or 0),
        "reference": reference,
        "reference_batches": batches.describe(),
        "device_evaluation_data": evaluation_data(loop),
        "seconds": time.perf_counter() - started,
        "method": METHOD,
    }


def tf32_possible(loop: TrainingLoop, precision: str) -> bool:
    """Whether TF32 kernels may have computed a CUDA cell's float32 evaluation: its class
    is tf32 (cuBLAS matmuls), or it is float32 while cuDNN's TF32 is allowed (PyTorch's
    default: convolutions and RNNs in TF32, which the float32 class does not show)."""
    if precision == "tf32":
        return True
    cuda = getattr(loop.device, "type", None) == "cuda"
    return cuda and precision == "float32" and bool(torch.backends.cudnn.allow_tf32)


TF32_OFF = (
    "torch.backends.cudnn.allow_tf32 and torch.backends.cuda.matmul.allow_tf32 False, "
    "float32 matmul precision highest"
)


@contextlib.contextmanager
def tf32_off() -> Iterator[None]:
    """cuDNN and cuBLAS in full float32 inside the block; the settings restored after."""
    cudnn, matmul = torch.backends.cudnn, torch.backends.cuda.matmul
    saved = (cudnn.allow_tf32, matmul.allow_tf32, torch.get_float32_matmul_precision())
    cudnn.allow_tf32, matmul.allow_tf32 = False, False
    torch.set_float32_matmul_precision("highest")
    try:
        yield
    finally:
        cudnn.allow_tf32, matmul.allow_tf32 = saved[0], saved[1]
        torch.set_float32_matmul_precision(saved[2])


def tf32_recheck(loop: TrainingLoop, final: FinalEvaluation, reference: Any, key: str) -> dict:
    """The final weights evaluated on the device again with TF32 off (:func:`tf32_off`),
    compared with the same float64 reference at float32's tolerance: ``pass`` says the
    TF32 cell's difference from float64 is TF32's own rounding (a finding about the
    kernels, not a fault), ``fail`` that it is not. The device model is given the final
    evaluation's weights first (steps after it, the extension and the diagnostic pass,
    moved them); the test fault ``eval_output_error`` applies here too."""
    model = loop.parts.model
    with torch.no_grad():
        for tensor in [*model.parameters(), *model.buffers()]:
            tensor.copy_(final.weights[id(tensor)])
    model.eval()
    with tf32_off(), torch.no_grad():
        evaluation = faulted(loop.parts.evaluate(model, loop.parts.eval_loader, loop.ctx), loop.ctx)
    loop.dev.synchronize()
    compared = compare_outputs(evaluation.get(key), reference)
    tolerance = TOLERANCES["float32"]
    worst = compared["worst"]
    ok = math.isfinite(worst) and worst <= tolerance and not compared["mismatched"]
    return {
        "status": "pass" if ok else "fail",
        "worst": worst if math.isfinite(worst) else None,
        "tolerance": tolerance,
        "settings": TF32_OFF,
        "finding": (
            f"the difference from float64 is TF32's: {worst:.2g} with TF32 off "
            "(cuDNN's convolutions and RNNs run in TF32 under PyTorch's defaults)"
            if ok
            else f"not TF32's: {worst:.2g} from float64 with TF32 off as well"
        ),
    }


def wanted(loop: TrainingLoop) -> bool:
    """Whether the cell asks for evaluation parity (``spec["eval_parity"]``: every
    device but the baseline); never in a float64 reference run."""
    return bool(loop.ctx.spec.get("eval_parity")) and not loop.reference


def run(loop: TrainingLoop, final: FinalEvaluation | None) -> dict | None:
    """:func:`measure` where :func:`wanted`; an error is recorded (status ``error``),
    never the cell's."""
    if not wanted(loop):
        return None
    if final is None:
        return {"status": "error", "error": "no final evaluation was kept", "method": METHOD}
    try:
        return measure(loop, final)
    except BadInputError:  # the workload's evaluate broke its contract: the cell's error
        raise
    except Exception as exc:  # the cell's measurement is complete; say what failed
        return {
            "status": "error",
            "error": f"{type(exc).__name__}: {exc}"[:500],
            "traceback": "".join(traceback.format_exception(exc))[-2000:],
            "method": METHOD,
        }
