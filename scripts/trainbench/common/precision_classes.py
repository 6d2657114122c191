"""Precision classes: the vocabulary a record's numerics are judged in, shared by the
cell (which writes it) and the statistics (which read it).

A cell's **precision class** is the coarsest arithmetic it may have computed in: its
autocast dtype if on, else TF32 where a CUDA cell allowed TF32 (cuBLAS matmuls or cuDNN's
convolutions and RNNs) or asked for float32 matmul precision "high" (bfloat16 for
"medium"), else float32 (:func:`precision_of`, the training rule's class).

**The evaluation's class is the model's** (``honour_reach``). Torch's flags say what TF32
*may* compute, not what it does: under PyTorch's defaults (cuBLAS's
``allow_tf32`` False since 1.12, cuDNN's True) a model of Linear layers runs no TF32 op.
A CUDA float32 cell therefore records ``tf32_reach`` in its settings in force
(:mod:`trainbench.measure.tf32_reach`: a scan of the model's modules under the flags in
force, and a probe that evaluates one batch with the flags in force and with TF32 off
and compares the outputs bit for bit). Where TF32 reaches no op of the model the
evaluation is judged float32; where it reaches one, or where neither could rule it out,
as before. A record without ``tf32_reach`` (made before it, or off CUDA) keeps the
flags' class.

``NVIDIA_TF32_OVERRIDE=0`` in the cell's environment switches TF32 off in cuBLAS and
cuDNN whatever torch's flags say; a record made with it says so (``tf32_override``). The
evaluation's class honours it (``honour_override``: measured on an H200, evaluations
with it come float32-close to float64). **The training rule's class honours neither,
yet**: CUDA float32 training drifts from float64 up to ~1,150× the float32 envelope with
TF32 off (text, which has no TF32 op, drifts as much with it allowed), a difference the
training rule's float32 allowance was never calibrated on; until it is, CUDA float32
training is judged in the TF32 class that PyTorch's default flags give it, whatever ops
its model runs (:func:`training_reason` says so in the parity row).

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
    amp_dtype: str | None,
    settings_in_force: Mapping | None,
    honour_override: bool = False,
    honour_reach: bool = False,
) -> str:
    """The coarsest arithmetic a cell used (see the module docstring): a key of
    :data:`UNIT_ROUNDOFF`. ``honour_override``: ``NVIDIA_TF32_OVERRIDE=0`` rules TF32 out;
    ``honour_reach``: the model's ``tf32_reach`` decides where recorded (False: float32;
    True: at least TF32). Both: the evaluation's class; neither: the training's (torch's
    flags alone decide)."""
    if amp_dtype:
        return str(amp_dtype)
    facts = dict(settings_in_force or {})
    reach = tf32_reaches(facts) if honour_reach else None
    if reach is False:
        return "float32"
    found = _flags_class(facts, honour_override and _overridden(facts))
    return "tf32" if reach is True and found == "float32" else found


def _flags_class(facts: Mapping, overridden: bool) -> str:
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


def tf32_reaches(settings_in_force: Mapping | None) -> bool | None:
    """Whether TF32 reaches the cell's model under its settings in force (the record's
    ``tf32_reach.reaches``, :mod:`trainbench.measure.tf32_reach`); None where it was not
    decided: a record made before it, a cell off CUDA or under autocast."""
    reach = (settings_in_force or {}).get("tf32_reach")
    value = reach.get("reaches") if isinstance(reach, Mapping) else None
    return value if isinstance(value, bool) else None


def tf32_reach_reason(settings_in_force: Mapping | None) -> str | None:
    """Why TF32 does or does not reach the model, in words (``tf32_reach.why``), where
    :func:`tf32_reaches` decided it; else None."""
    if tf32_reaches(settings_in_force) is None:
        return None
    why = (settings_in_force or {})["tf32_reach"].get("why")
    return str(why) if why else None


def tf32_allowed_text(settings_in_force: Mapping | None) -> str | None:
    """Which libraries torch's flags allow TF32 in (``TF32 allowed for cuBLAS matmuls and
    cuDNN convolutions and RNNs``), or None where neither flag is on."""
    facts = settings_in_force or {}
    allowed = [name for key, name in (("tf32_matmul", "cuBLAS matmuls"),
                                      ("tf32_cudnn", "cuDNN convolutions and RNNs"))
               if facts.get(key)]  # fmt: skip
    return f"TF32 allowed for {' and '.join(allowed)}" if allowed else None


TRAINING_TF32 = (
    "CUDA float32 training is judged in the TF32 class whatever ops its model runs "
    "(it drifts from float64 up to ~1,150x the float32 envelope with no TF32 op, a "
    "difference the float32 allowance was never calibrated on)"
)


def training_reason(amp_dtype: str | None, settings_in_force: Mapping | None) -> str:
    """Why the training rule's class (:func:`precision_of` with torch's flags alone) is
    what it is, in words: the parity row's ``precision_reason``."""
    if amp_dtype:
        return f"autocast {amp_dtype}"
    facts = settings_in_force or {}
    found = precision_of(None, facts)
    if found == "bfloat16":
        return "float32 matmul precision 'medium'"
    if found == "float32":
        return "float32: no TF32 flag on" if facts.get("tf32_cudnn") is not None else "float32"
    allowed = tf32_allowed_text(facts) or "float32 matmul precision 'high'"
    text = f"{allowed}; {TRAINING_TF32}"
    if tf32_reaches(facts) is False:
        text += "; TF32 itself reaches no op of this model"
    return text


def coarsest(classes) -> str:
    """The coarsest of several precision classes (float32 when there are none)."""
    found = [c for c in classes if c in UNIT_ROUNDOFF]
    return max(found, key=lambda p: UNIT_ROUNDOFF[p]) if found else "float32"
