"""Numeric precision: what a workload upcasts to, what a cell computed in, and how
fine that arithmetic is.

Workloads compute their losses and similarities "in float32 whatever the autocast"
(a bf16 product rounds near-equal logits together). Written as ``x.float()`` that
would also pull a float64 reference run (:mod:`trainbench.run.reference`) back to
float32, so workloads write :func:`upcast` instead: at least the default floating
dtype, which is float32 in every cell and float64 while a reference runs.

The parity test (``docs/statistics.md``, "Parity") scales what a correct device may
differ by with the unit roundoff of the arithmetic it ran: :func:`precision_of`
reads that from a record's settings in force.

torch is imported by the functions that use it, not by the module: the statistics
layer reads :data:`UNIT_ROUNDOFF` and :func:`precision_of` and never needs torch
(a second of start-up on a small machine).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

# Unit roundoff u = 2^-p of each arithmetic (p = significand bits, the implicit one
# included): the largest relative error of one rounding. TF32 keeps fp32's exponent
# and 10 stored mantissa bits, like fp16.
UNIT_ROUNDOFF = {
    "float64": 2.0**-53,
    "float32": 2.0**-24,
    "tf32": 2.0**-11,
    "float16": 2.0**-11,
    "bfloat16": 2.0**-8,
}


def upcast(x: torch.Tensor) -> torch.Tensor:
    """``x`` in at least the default floating dtype (float32 in a cell, float64 in a
    reference run): what ``x.float()`` means in a workload, without lowering float64."""
    import torch

    return x.to(torch.promote_types(x.dtype, torch.get_default_dtype()))


@contextlib.contextmanager
def default_dtype(dtype: torch.dtype) -> Iterator[None]:
    """Tensors created without a dtype (and :func:`upcast`) use ``dtype`` inside."""
    import torch

    before = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(before)


def cast_floats(batch: Mapping, dtype: torch.dtype) -> dict:
    """A batch with every floating tensor in ``dtype`` (ids, masks and labels of
    integer type untouched)."""
    import torch

    return {
        k: v.to(dtype) if isinstance(v, torch.Tensor) and v.is_floating_point() else v
        for k, v in batch.items()
    }


def matmul_facts(backend: str) -> dict:
    """The float32 matmul/convolution settings in force (settings in force of every
    cell): TF32 is PyTorch's default for cuDNN convolutions on NVIDIA GPUs."""
    import torch

    facts = {"float32_matmul_precision": torch.get_float32_matmul_precision()}
    if backend == "cuda":
        facts["tf32_matmul"] = bool(torch.backends.cuda.matmul.allow_tf32)
        facts["tf32_cudnn"] = bool(torch.backends.cudnn.allow_tf32)
    return facts


def precision_of(amp_dtype: str | None, settings_in_force: Mapping | None) -> str:
    """The coarsest arithmetic a cell's training used: its autocast dtype if on, else
    TF32 where a CUDA cell allowed TF32 (matmul or cuDNN) or asked for float32 matmul
    precision "high" (bfloat16 for "medium"), else float32. A key of :data:`UNIT_ROUNDOFF`."""
    if amp_dtype:
        return str(amp_dtype)
    facts = dict(settings_in_force or {})
    if facts.get("tf32_matmul") or facts.get("tf32_cudnn"):
        return "tf32"
    if facts.get("float32_matmul_precision") == "medium":
        return "bfloat16"
    if facts.get("float32_matmul_precision") == "high":
        return "tf32"
    return "float32"
