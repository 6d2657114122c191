"""Precision classes: the vocabulary a record's numerics are judged in, shared by the
cell (which writes it) and the statistics (which read it).

A cell's **precision class** is the coarsest arithmetic it may have computed in: its
autocast dtype if on, else TF32 where a CUDA cell allowed TF32 (cuBLAS matmuls or cuDNN's
convolutions and RNNs) or asked for float32 matmul precision "high" (bfloat16 for
"medium"), else float32. ``NVIDIA_TF32_OVERRIDE=0`` in the cell's environment switches
TF32 off in cuBLAS and cuDNN whatever torch's flags say: a record made with it says so
(``tf32_override``), and its class is float32.

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
    if str(facts.get("tf32_override") or "").strip() == "0":
        return False
    return bool(facts.get("tf32_matmul") or facts.get("tf32_cudnn"))


def precision_of(amp_dtype: str | None, settings_in_force: Mapping | None) -> str:
    """The coarsest arithmetic a cell's training used (see the module docstring): a key
    of :data:`UNIT_ROUNDOFF`."""
    if amp_dtype:
        return str(amp_dtype)
    facts = dict(settings_in_force or {})
    if tf32_in_force(facts):
        return "tf32"
    mode = facts.get("float32_matmul_precision")
    if mode == "medium":
        return "bfloat16"
    if mode == "high" and str(facts.get("tf32_override") or "").strip() != "0":
        return "tf32"
    return "float32"


def coarsest(classes) -> str:
    """The coarsest of several precision classes (float32 when there are none)."""
    found = [c for c in classes if c in UNIT_ROUNDOFF]
    return max(found, key=lambda p: UNIT_ROUNDOFF[p]) if found else "float32"
