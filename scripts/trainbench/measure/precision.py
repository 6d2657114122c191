"""Numeric precision: what a workload upcasts to, what a cell computed in, and how
fine that arithmetic is.

Workloads compute their losses and similarities "in float32 whatever the autocast"
(a bf16 product rounds near-equal logits together). Written as ``x.float()`` that
would also pull a float64 reference run (:mod:`trainbench.launch.reference`) back to
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
import os
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

from trainbench.common.precision_classes import UNIT_ROUNDOFF, precision_of

if TYPE_CHECKING:
    import torch

# The names the statistics read (re-exported: they live in trainbench.common).
__all__ = ["UNIT_ROUNDOFF", "precision_of", "upcast", "default_dtype", "cast_floats",
           "matmul_facts"]  # fmt: skip


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
    cell): TF32 is PyTorch's default for cuDNN convolutions on NVIDIA GPUs, and
    ``NVIDIA_TF32_OVERRIDE`` (where set) overrides torch's flags in the libraries. What
    the flags allow is not what the model runs: whether TF32 reaches the model is
    decided after training (:mod:`trainbench.measure.tf32_reach`, ``tf32_reach``)."""
    import torch

    facts = {"float32_matmul_precision": torch.get_float32_matmul_precision()}
    if backend == "cuda":
        facts["tf32_matmul"] = bool(torch.backends.cuda.matmul.allow_tf32)
        facts["tf32_cudnn"] = bool(torch.backends.cudnn.allow_tf32)
        # cuBLAS and cuDNN read it at load: "0" switches TF32 off whatever the flags say
        facts["tf32_override"] = os.environ.get("NVIDIA_TF32_OVERRIDE")
    return facts
