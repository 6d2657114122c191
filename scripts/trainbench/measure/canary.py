"""A numerical canary: a fixed battery of small ops run on the cell's device, in the
cell's dtype and autocast policy, each compared with the same op in CPU float64 on
the same inputs, before the cell's numbers are trusted.

Why: PyTorch's MPS backend has returned silently wrong results — matmul errors of
10–30% that depend on the allocator's state (pytorch issue 193487, torch 2.7–2.13),
wrong ``bmm`` gradients with a non-contiguous operand (197636), ``addcdiv`` on
non-contiguous tensors breaking Adam (118115). Training still runs and its loss may
even fall; only a comparison with a trusted reference shows it.

**Inputs** are drawn on the CPU in float32 from a ``torch.Generator`` with a fixed
seed (the global generators are never touched, so training's random stream is the
one it would have been), then moved to the device. The reference runs on those
inputs cast to float64 on the CPU (in an explicit low-precision mode, on the inputs
already rounded to that dtype, so both sides see the same numbers). Non-contiguous
operands (strided slices, transposes) are made *after* the move, on each side:
``Tensor.to`` would make a strided slice contiguous.

**Error.** Per output, the normwise relative error in the max norm,
``max|out − ref| / max(max|ref|, 1e-30)``; an op's error is the largest over its
outputs (forward and gradients). Why this one: (1) element-wise relative errors
are meaningless where the reference is near zero (cancellation in matmul outputs
and gradients, softmax tails); (2) the rounding error of every op here scales with
the size of its operands, which ``max|ref|`` stands for; (3) a max, not a mean or
Frobenius norm, so a wrong block of a few elements — how the MPS bugs show — is not
diluted by the many right ones. A NaN or infinity in the device's output fails the
op (``max_rel_error`` null, ``finite`` false).

**Tolerances**, by the dtype the op computed in (the dtype of its forward output,
so an op that autocast keeps in float32 is held to float32's tolerance) — unit
roundoff u: float32 2^-24, TF32 and float16 2^-11, bfloat16 2^-8:

* float32 (no TF32): 1e-4. Honest float32 error here is ~sqrt(k)·u ≈ 1e-6 for the
  inner dimensions used (k ≤ 128), at most k·u ≈ 1e-5 in the worst case of the
  classical bound (any summation order, blocking or split-K); 1e-4 leaves 10x over
  that and is 1000x below the 10% errors the canary exists for.
* TF32 (CUDA float32 matmul with TF32 allowed, ``float32_matmul_precision`` "high";
  matmul, linear, bmm and attention only): 5e-3 — inputs rounded to 10 mantissa bits
  (2u ≈ 1e-3 per product) and fp32 accumulation.
* float16 (autocast or a float16 cell): 1e-2 — inputs rounded to float16 (2u ≈
  1e-3 per product; under autocast the reference keeps the float32 inputs), output
  rounded again; ~20u.
* bfloat16: 5e-2 — the same at u = 3.9e-3 (≈13u). This still fails an op wrong by
  10–30% in its larger elements; smaller errors under bfloat16 are rounding noise.
* "medium" float32 matmul precision (bfloat16 passes inside float32 matmul):
  the bfloat16 tolerance for matmul, linear, bmm and attention.

The battery (names are the keys of ``ops``): matmul at square, tall-skinny and odd
shapes, with transposed and with strided (non-contiguous) operands; ``F.linear``
(nn.Linear's addmm with a transposed weight); bmm contiguous,
with a transposed operand, and the gradients of the latter; addcdiv out of place
and in place on non-contiguous views (Adam's update); softmax and log_softmax over
a 32768-wide last dimension; layer_norm and its gradients; the embedding gradient
(a weighted sum over looked-up rows, repeated indices); the cross-entropy gradient;
scaled_dot_product_attention. Measured (benchmarks/canary_cost.py, results/canary-*.json):
every op passes on a CPU and an H100 in float32, TF32, float16 and bfloat16, the
largest error/tolerance ratio 0.09. Cost: 18–40 ms on a 2-core CPU, first call
included; on an H100 0.29–0.41 s for the first call in float32 (cuBLAS handles and
first kernels, which training's first step would otherwise pay) and 0.84–1.14 s
under autocast, 0.5–0.86 s of it the one-time load of the attention kernels; 13–29
ms warm.

The canary runs before training, outside every timed region, and synchronizes the
device at its edges. Its CPU side (the float64 reference; the whole battery in a CPU
cell) runs on one thread, restored afterwards: a CPU cell's multi-threaded kernels
are not what it checks — the CPU is the trusted side. It never calls ``torch.mps``
itself: the device object does (feature-detected in :mod:`trainbench.measure.devices`). An
op that raises is recorded with its message (status ``error`` when no op failed
numerically); an exception outside the ops is recorded as ``{"status": "error",
"message": ...}`` by :func:`run_canary`.
"""

from __future__ import annotations

import contextlib
import math
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from trainbench.measure.data import host_float64

SEED = 20240613
TINY = 1e-30
TOLERANCES = {"float32": 1e-4, "tf32": 5e-3, "float16": 1e-2, "bfloat16": 5e-2}
METHOD = (
    "max|out - ref| / max(max|ref|, 1e-30) per output (normwise, max norm), the largest over "
    "an op's forward output and gradients; tolerance by the dtype the op computed in "
    "(float32 1e-4, TF32 5e-3, float16 1e-2, bfloat16 5e-2)"
)
REFERENCE = "CPU float64"

Tensors = dict[str, torch.Tensor]
Forward = Callable[[Tensors], tuple[torch.Tensor, torch.Tensor | None]]


@dataclass(frozen=True)
class CanaryOp:
    """One check: ``make`` draws the CPU float32 inputs, ``forward`` runs the op on
    them (views made inside) and returns (output, scalar to differentiate or None);
    the gradients of that scalar w.r.t. ``grad`` inputs are compared too."""

    name: str
    make: Callable[[torch.Generator], Tensors]
    forward: Forward
    grad: tuple[str, ...] = ()
    matmul_like: bool = False  # follows the float32 matmul precision (TF32)


@dataclass(frozen=True)
class Precision:
    """What the cell computes in: the inputs' dtype, the autocast dtype (or None),
    and the float32 matmul mode ("tf32", "bfloat16" or None for full float32)."""

    input_dtype: torch.dtype
    autocast_dtype: torch.dtype | None
    fp32_matmul: str | None

    def describe(self) -> str:
        text = f"{str(self.input_dtype).removeprefix('torch.')} inputs"
        if self.autocast_dtype is not None:
            text += f", autocast {str(self.autocast_dtype).removeprefix('torch.')}"
        if self.fp32_matmul:
            text += f", float32 matmul as {self.fp32_matmul}"
        return text


# ----------------------------------------------------------------------------- battery


def _randn(g: torch.Generator, *shape: int, scale: float = 1.0) -> torch.Tensor:
    return torch.randn(*shape, generator=g) * scale


def _pair(m: int, k: int, n: int) -> Callable[[torch.Generator], Tensors]:
    return lambda g: {"a": _randn(g, m, k), "b": _randn(g, k, n)}


def _bmm_grad(t: Tensors) -> tuple[torch.Tensor, torch.Tensor]:
    out = torch.bmm(t["a"], t["b"].transpose(1, 2))
    return out, (out * t["w"]).sum()


def _addcdiv_inplace(t: Tensors) -> tuple[torch.Tensor, None]:
    # Adam's update on non-contiguous views: param.addcdiv_(exp_avg, denom, value=-lr)
    param = t["p"].clone().t()
    param.addcdiv_(t["m"][:, ::2], t["v"].t().sqrt().add(1e-8), value=-0.5)
    return param, None


def _layer_norm(t: Tensors) -> tuple[torch.Tensor, torch.Tensor]:
    out = F.layer_norm(t["x"], (t["x"].shape[-1],), t["weight"], t["bias"], eps=1e-5)
    return out, (out * t["w"]).sum()


def _embedding(t: Tensors) -> tuple[torch.Tensor, torch.Tensor]:
    out = F.embedding(t["index"], t["weight"])
    return out, (out * t["w"]).sum()


def _cross_entropy(t: Tensors) -> tuple[torch.Tensor, torch.Tensor]:
    loss = F.cross_entropy(t["logits"], t["target"])
    return loss, loss


def _sdpa(t: Tensors) -> tuple[torch.Tensor, None]:
    return F.scaled_dot_product_attention(t["q"], t["k"], t["v"]), None


_MM = {"matmul_like": True}
BATTERY: tuple[CanaryOp, ...] = (
    CanaryOp("matmul_square", _pair(96, 96, 96), lambda t: (t["a"] @ t["b"], None), **_MM),
    CanaryOp("matmul_tall", _pair(512, 32, 24), lambda t: (t["a"] @ t["b"], None), **_MM),
    CanaryOp("matmul_odd", _pair(127, 65, 33), lambda t: (t["a"] @ t["b"], None), **_MM),
    CanaryOp(
        "matmul_transposed",
        lambda g: {"a": _randn(g, 65, 127), "b": _randn(g, 33, 65)},
        lambda t: (torch.matmul(t["a"].t(), t["b"].t()), None), **_MM,
    ),
    CanaryOp(
        "matmul_strided",
        lambda g: {"a": _randn(g, 63, 130), "b": _randn(g, 130, 70)},
        lambda t: (t["a"][:, ::2] @ t["b"][::2, 1::2], None), **_MM,
    ),
    CanaryOp(  # nn.Linear's path: addmm with the transposed weight
        "linear",
        lambda g: {"x": _randn(g, 64, 96), "weight": _randn(g, 48, 96), "bias": _randn(g, 48)},
        lambda t: (F.linear(t["x"], t["weight"], t["bias"]), None), **_MM,
    ),
    CanaryOp(
        "bmm",
        lambda g: {"a": _randn(g, 8, 33, 17), "b": _randn(g, 8, 17, 29)},
        lambda t: (torch.bmm(t["a"], t["b"]), None), **_MM,
    ),
    CanaryOp(
        "bmm_transposed",
        lambda g: {"a": _randn(g, 8, 33, 17), "b": _randn(g, 8, 29, 17)},
        lambda t: (torch.bmm(t["a"], t["b"].transpose(1, 2)), None), **_MM,
    ),
    CanaryOp(
        "bmm_transposed_grad",
        lambda g: {"a": _randn(g, 8, 33, 17), "b": _randn(g, 8, 29, 17),
                   "w": _randn(g, 8, 33, 29)},  # fmt: skip
        _bmm_grad, grad=("a", "b"), **_MM,
    ),
    CanaryOp(
        "addcdiv",
        lambda g: {"p": _randn(g, 64, 48), "m": _randn(g, 64, 48),
                   "v": torch.rand(64, 48, generator=g) + 0.25},  # fmt: skip
        lambda t: (torch.addcdiv(t["p"], t["m"], t["v"].sqrt().add(1e-8), value=-0.5), None),
    ),
    CanaryOp(
        "addcdiv_noncontiguous",
        lambda g: {"p": _randn(g, 48, 64), "m": _randn(g, 64, 96),
                   "v": torch.rand(48, 64, generator=g) + 0.25},  # fmt: skip
        _addcdiv_inplace,
    ),
    CanaryOp(
        "softmax",
        lambda g: {"x": _randn(g, 4, 32768, scale=3.0)},
        lambda t: (F.softmax(t["x"], dim=-1), None),
    ),
    CanaryOp(
        "log_softmax",
        lambda g: {"x": _randn(g, 4, 32768, scale=3.0)},
        lambda t: (F.log_softmax(t["x"], dim=-1), None),
    ),
    CanaryOp(
        "layer_norm_grad",
        lambda g: {"x": _randn(g, 32, 256, scale=2.0), "weight": 1 + _randn(g, 256, scale=0.1),
                   "bias": _randn(g, 256, scale=0.1), "w": _randn(g, 32, 256)},  # fmt: skip
        _layer_norm, grad=("x", "weight", "bias"),
    ),
    CanaryOp(
        "embedding_grad",
        lambda g: {"weight": _randn(g, 64, 32), "w": _randn(g, 512, 32),
                   "index": torch.randint(0, 64, (512,), generator=g)},  # fmt: skip
        _embedding, grad=("weight",),
    ),
    CanaryOp(
        "cross_entropy_grad",
        lambda g: {"logits": _randn(g, 64, 100, scale=2.0),
                   "target": torch.randint(0, 100, (64,), generator=g)},  # fmt: skip
        _cross_entropy, grad=("logits",),
    ),
    CanaryOp(
        "scaled_dot_product_attention",
        lambda g: {name: _randn(g, 2, 4, 64, 32) for name in ("q", "k", "v")},
        _sdpa, **_MM,
    ),
)  # fmt: skip


# ----------------------------------------------------------------------------- running


def precision_of(ctx: Any) -> Precision:
    """The cell's precision: autocast from ``ctx.amp``; a microbenchmark's explicit
    ``dtype`` setting (matmul in float16/bfloat16) as the inputs' dtype; the float32
    matmul mode in force (TF32 on CUDA)."""
    settings = (getattr(ctx, "spec", None) or {}).get("workload_settings") or {}
    explicit = getattr(torch, str(settings.get("dtype", "float32")), torch.float32)
    autocast = getattr(torch, ctx.amp.dtype) if ctx.amp.enabled and ctx.amp.dtype else None
    input_dtype = explicit if explicit.is_floating_point and autocast is None else torch.float32
    fp32_matmul = None
    mode = torch.get_float32_matmul_precision()
    device_type = torch.device(ctx.torch_device).type
    if device_type == "cuda" and (mode != "highest" or torch.backends.cuda.matmul.allow_tf32):
        fp32_matmul = "bfloat16" if mode == "medium" else "tf32"
    elif device_type == "cpu" and mode == "medium":
        fp32_matmul = "bfloat16"  # oneDNN may use bfloat16 passes for float32 matmul
    return Precision(input_dtype, autocast, fp32_matmul)


def relative_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """max|out − ref| / max(max|ref|, 1e-30); infinity when ``out`` is not finite or
    its shape differs."""
    got = host_float64(out)  # never a cast on the device, nor in the copy out (MPS)
    want = host_float64(ref)
    if got.shape != want.shape or not bool(torch.isfinite(got).all()):
        return math.inf
    if got.numel() == 0:
        return 0.0
    scale = max(float(want.abs().max()), TINY)
    return float((got - want).abs().max()) / scale


def tolerance_key(op: CanaryOp, dtype: torch.dtype, precision: Precision) -> str:
    """The tolerance class of an op that computed in ``dtype`` (its forward output's)."""
    if dtype == torch.bfloat16:
        return "bfloat16"
    if dtype == torch.float16:
        return "float16"
    if op.matmul_like and precision.fp32_matmul:
        return precision.fp32_matmul
    return "float32"


def _inputs(op: CanaryOp, cpu: Tensors, device: torch.device, dtype: torch.dtype) -> Tensors:
    """The op's inputs on ``device`` in ``dtype`` (floating tensors only), gradient
    inputs as leaves that require grad."""
    out = {}
    for name, tensor in cpu.items():
        moved = tensor.to(device, dtype) if tensor.is_floating_point() else tensor.to(device)
        out[name] = moved.requires_grad_(True) if name in op.grad else moved
    return out


def _evaluate(op: CanaryOp, inputs: Tensors, autocast: torch.dtype | None) -> list[torch.Tensor]:
    """[forward output, *gradients]: forward under autocast (when given), backward
    outside it, as training does."""
    device_type = next(iter(inputs.values())).device.type
    enabled = autocast is not None
    with torch.autocast(device_type=device_type, dtype=autocast, enabled=enabled):
        out, scalar = op.forward(inputs)
    if not op.grad:
        return [out.detach()]
    grads = torch.autograd.grad(scalar, [inputs[name] for name in op.grad])
    return [out.detach(), *grads]


def check_op(
    op: CanaryOp, device: torch.device, precision: Precision, generator: torch.Generator
) -> dict:
    """One op on ``device`` against CPU float64: error, tolerance, dtype, passed."""
    started = time.perf_counter()
    drawn = op.make(generator)
    if precision.input_dtype != torch.float32:  # both sides see the rounded inputs
        drawn = {k: v.to(precision.input_dtype) if v.is_floating_point() else v
                 for k, v in drawn.items()}  # fmt: skip
    reference = _evaluate(op, _inputs(op, drawn, torch.device("cpu"), torch.float64), None)
    got = _evaluate(op, _inputs(op, drawn, device, precision.input_dtype), precision.autocast_dtype)
    error = max(relative_error(o, r) for o, r in zip(got, reference, strict=True))
    key = tolerance_key(op, got[0].dtype, precision)
    tolerance = TOLERANCES[key]
    return {
        "max_rel_error": error if math.isfinite(error) else None,
        "finite": math.isfinite(error),
        "tolerance": tolerance,
        "tolerance_class": key,
        "dtype": str(got[0].dtype).removeprefix("torch."),
        "passed": math.isfinite(error) and error <= tolerance,
        "seconds": time.perf_counter() - started,
    }


def _summary(ops: dict[str, dict]) -> dict:
    failed = [name for name, r in ops.items() if not r["passed"] and "error" not in r]
    errored = [name for name, r in ops.items() if "error" in r]
    status = "fail" if failed else ("error" if errored else "pass")
    out: dict = {"status": status, "failed_ops": failed, "errored_ops": errored}
    if status == "error":
        out["message"] = "; ".join(f"{name}: {ops[name]['error']}" for name in errored)
    return out


def run_battery(ctx: Any, battery: tuple[CanaryOp, ...] = BATTERY) -> dict:
    """Every op of ``battery`` on the cell's device; an op that raises is recorded
    with its message and the others still run."""
    from trainbench.measure.trackers import capture_warnings

    precision = precision_of(ctx)
    device = torch.device(ctx.torch_device)
    generator = torch.Generator().manual_seed(SEED)
    ops: dict[str, dict] = {}
    ctx.device.synchronize()
    started = time.perf_counter()
    with capture_warnings() as log:
        for op in battery:
            try:
                ops[op.name] = check_op(op, device, precision, generator)
            except Exception as exc:  # recorded: one op must not hide the others
                ops[op.name] = {"error": f"{type(exc).__name__}: {str(exc)[:300]}",
                                "max_rel_error": None, "tolerance": None, "dtype": None,
                                "passed": False}  # fmt: skip
    ctx.device.synchronize()
    return {
        **_summary(ops),
        "ops": ops,
        "seconds": time.perf_counter() - started,
        "method": METHOD,
        "reference": REFERENCE,
        "precision": precision.describe(),
        "device": str(device),
        "cpu_fallback_ops": sorted(set(log.fallback_ops)),
    }


@contextlib.contextmanager
def single_threaded() -> Iterator[None]:
    """torch's intra-op threads set to 1, then restored. The canary's ops are tiny:
    threads gain nothing, and on a busy machine every OpenMP parallel region waits for
    a time slice (on 2 cores with one kept busy: 0.5–0.9 s for the battery with 2
    threads, 0.06–0.09 s with 1)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def run_canary(ctx: Any) -> dict:
    """The canary's record for the cell in ``ctx`` (a :class:`trainbench.measure.context.
    RunContext`); never raises: an exception becomes ``{"status": "error", ...}``.
    Runs :func:`single_threaded` on the CPU side, and frees the device's cached memory
    afterwards, so training starts with its own thread count and a clean allocator
    cache."""
    started = time.perf_counter()
    try:
        with single_threaded():
            result = run_battery(ctx)
    except Exception as exc:  # recorded, never raised: the cell still runs
        result = {
            "status": "error",
            "message": f"{type(exc).__name__}: {str(exc)[:1000]}",
            "traceback": "".join(traceback.format_exception(exc))[-4000:],
            "seconds": time.perf_counter() - started,
            "method": METHOD,
            "reference": REFERENCE,
        }
    with contextlib.suppress(Exception):
        ctx.device.empty_cache()
    return result
