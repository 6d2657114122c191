"""Precision classes: the vocabulary a record's numerics are judged in, shared by the
cell (which writes it) and the statistics (which read it).

A cell's **precision class** is the coarsest arithmetic it may have computed in: its
autocast dtype if on, else TF32 where a CUDA cell allowed TF32 (cuBLAS matmuls or cuDNN's
convolutions and RNNs) or asked for float32 matmul precision "high" (bfloat16 for
"medium"), else float32 (:func:`precision_of`, the training rule's class).

``NVIDIA_TF32_OVERRIDE=0`` in the cell's environment switches TF32 off in cuBLAS and
cuDNN whatever torch's flags say; a record made with it says so (``tf32_override``). The
evaluation's class honours it (:func:`tf32_in_force`: measured on an H200, evaluations
with it come float32-close to float64). The training rule's class does not, yet: CUDA
float32 training drifts from float64 up to ~1,150× the float32 envelope with TF32 off
(text, which has no TF32 op, drifts as much with it allowed), a difference the training
rule's float32 allowance was never calibrated on; until it is, CUDA float32 training is
judged in the TF32 class that PyTorch's default flags give it.

Nothing here imports torch: the statistics layer reads these names without it.
"""

from __future__ import annotations

from collections.abc import Mapping

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


def tf32_in_force(settings_in_force: Mapping | None) -> bool:
    """Whether TF32 may have computed a CUDA cell's float32 work: allowed for cuBLAS
    matmuls or cuDNN, and not switched off by ``NVIDIA_TF32_OVERRIDE=0``."""
    facts = dict(settings_in_force or {})
    return bool(facts.get("tf32_matmul") or facts.get("tf32_cudnn")) and not _overridden(facts)


def precision_of(
    amp_dtype: str | None, settings_in_force: Mapping | None, honour_override: bool = False
) -> str:
    """The coarsest arithmetic a cell used (see the module docstring): a key of
    :data:`UNIT_ROUNDOFF`. ``honour_override``: ``NVIDIA_TF32_OVERRIDE=0`` rules TF32 out
    (the evaluation's class); without it, torch's flags alone decide (the training's)."""
    if amp_dtype:
        return str(amp_dtype)
    facts = dict(settings_in_force or {})
    overridden = honour_override and _overridden(facts)
    if bool(facts.get("tf32_matmul") or facts.get("tf32_cudnn")) and not overridden:
        return "tf32"
    mode = facts.get("float32_matmul_precision")
    if mode == "medium":
        return "bfloat16"
    if mode == "high" and not overridden:
        return "tf32"
    return "float32"


def _overridden(facts: Mapping) -> bool:
    return str(facts.get("tf32_override") or "").strip() == "0"


def coarsest(classes) -> str:
    """The coarsest of several precision classes (float32 when there are none)."""
    found = [c for c in classes if c in UNIT_ROUNDOFF]
    return max(found, key=lambda p: UNIT_ROUNDOFF[p]) if found else "float32"
