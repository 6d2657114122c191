"""The rule of evaluation parity: a device's evaluation outputs against the network's own
float32 error (docs/statistics.md, "Evaluation parity").

The cell (:mod:`trainbench.measure.eval_parity`) measures, on the same final weights and the
same evaluation batches, three evaluations: the CPU in float64 (the reference), the CPU
in float32 (the network's **float32 floor**: how far correct float32 arithmetic strays
from float64 through this very network) and the device. Per floating output it records
the relative RMSE of each against float64. This module judges them; the cell writes the
judgement into its record, and the benchmarks re-judge the same numbers at other
allowances (never a second rule).

**Error measure**: ``‖out − ref‖₂ / ‖ref‖₂`` over the output's elements (the relative
RMSE; normwise in the Frobenius norm). A maximum over elements grows with the number of
elements (the largest of n roughly normal errors grows like √(2 ln n)): a 512 × 512
output of a correct network lies further out than a 32 × 32 one of the same network. The
RMSE estimates the typical element's error whatever the size, as PyTorch's own accuracy
check does (``torch._dynamo.utils.same(..., fp64_ref=...)``: ``rmse``).

**Envelope** of a correct device of precision class p (:mod:`.precision_classes`) for an
output whose float32 floor is f::

    envelope_p(f) = m_p × (u_p / u_fp32) × f + u_p

* ``u_p / u_fp32`` scales the floor to precision p: to first order a rounding error
  propagates linearly, so the network computed entirely in p strays u_p / u_fp32 times
  further than in float32 (TF32 and float16 2^13, bfloat16 2^16). An autocast device
  rounds only part of the network (matmul and convolution inputs) in p: it strays less.
* ``m_p`` (:data:`ALLOWANCES`) allows for correct kernels doing other arithmetic than the
  CPU's (another reduction order, another algorithm, a part of the network in p and not
  all of it): 3 × the largest ratio of a correct device to its unscaled envelope (m = 1)
  in the calibrating cells (benchmarks/results/eval-floor-calibration-h200.md: float32
  with TF32 off up to 5.7, TF32 up to 0.104, bfloat16 up to 0.35), 3 being PyTorch's
  multiplier for reduced precision; float16 takes bfloat16's (no calibrating cell;
  autocast rounds the same ops in both).
* ``u_p``, the absolute term: one rounding of every value in p, which a device in p makes
  even where the network adds nothing (a floor of 0: outputs exact in float32). Where
  it is larger than the scaled floor, it decides, and the judgement says so.

The anchor is PyTorch's check, ``res_error <= multiplier × ref_error + tol / 10``: the
error allowed is a multiple of a trusted reference's own error against float64, plus a
small absolute term. Its reference runs in the device's precision; here the CPU has no
TF32 (nor, on many CPUs, float16 kernels), so the float32 floor is measured and scaled by
the unit roundoff, as the training rule's drift envelope is.

Nothing here imports torch.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from trainbench.common.precision_classes import UNIT_ROUNDOFF

# m_p: 3 × the largest ratio of a correct device to the unscaled envelope (m = 1) in the
# calibrating cells (docs/statistics.md), float16 taking bfloat16's (both autocast).
ALLOWANCES = {"float32": 17.0, "tf32": 0.31, "float16": 1.1, "bfloat16": 1.1}
FLOOR = "the floor"
ABSOLUTE = "the absolute term"
PASS, FAIL = "pass", "fail"


def allowance_for(precision: str, allowances: Mapping[str, float] | None = None) -> float:
    """m_p of ``precision`` (:data:`ALLOWANCES`, or those given)."""
    return float({**ALLOWANCES, **(allowances or {})}[precision])


def scale_of(precision: str) -> float:
    """u_p / u_fp32."""
    return UNIT_ROUNDOFF[precision] / UNIT_ROUNDOFF["float32"]


def envelope(precision: str, floor: float, allowance: float) -> tuple[float, str]:
    """(envelope_p(floor), which term decides it: :data:`FLOOR` or :data:`ABSOLUTE`)."""
    scaled = allowance * scale_of(precision) * max(float(floor), 0.0)
    absolute = UNIT_ROUNDOFF[precision]
    return scaled + absolute, FLOOR if scaled >= absolute else ABSOLUTE


def judge_output(error: float | None, floor: float | None, precision: str,
                 allowance: float) -> dict:  # fmt: skip
    """One output's judgement: its envelope, the error ÷ envelope (None where the
    error is missing or not finite: beyond any envelope) and which term decided."""
    bound, decided_by = envelope(precision, floor or 0.0, allowance)
    finite = error is not None and math.isfinite(error)
    ratio = error / bound if finite else None
    return {"envelope": bound, "ratio": ratio, "decided_by": decided_by,
            "within": finite and ratio <= 1.0}  # fmt: skip


def judge(outputs: Iterable[Mapping], precision: str, allowances: Mapping | None = None,
          mismatched: Iterable[str] = ()) -> dict:  # fmt: skip
    """The cell's judgement over its floating outputs (each a mapping with ``path``,
    ``error`` and ``floor``): ``pass`` when every one lies within its envelope and no
    integer output differs; the worst output (largest error ÷ envelope) is reported
    (``device_error``, ``floor``, ``envelope``, ``ratio``, ``decided_by``)."""
    allowance = allowance_for(precision, allowances)
    judged = [{**dict(o), **judge_output(o.get("error"), o.get("floor"), precision, allowance)}
              for o in outputs]  # fmt: skip
    mismatched = list(mismatched)
    worst = max(judged, key=_badness, default=None)
    within = all(o["within"] for o in judged) and not mismatched
    return {
        "status": PASS if within else FAIL,
        "precision": precision,
        "allowance": allowance,
        "device_error": worst.get("error") if worst else None,
        "floor": worst.get("floor") if worst else None,
        "envelope": worst["envelope"] if worst else None,
        "ratio": worst["ratio"] if worst else None,
        "decided_by": worst["decided_by"] if worst else None,
        "worst_output": worst.get("path") if worst else None,
        "rule": describe(worst, precision, allowance) if worst else "no floating output",
        "outputs": judged,
        "mismatched": mismatched,
    }


def describe(judged: Mapping, precision: str, allowance: float) -> str:
    """The judgement of one output in words, with its numbers."""
    power = round(math.log2(scale_of(precision)))
    scaled = f"{_g(allowance)} × 2^{power} × " if power else f"{_g(allowance)} × "
    error = judged.get("error")
    shown = _g(error) if error is not None and math.isfinite(error) else "not finite"
    text = (f"{judged.get('path')}: error {shown} (relative RMSE vs CPU float64), float32 "
            f"floor {_g(judged.get('floor') or 0.0)}, {precision} envelope "
            f"{_g(judged['envelope'])} = {scaled}floor + u_{precision} {_g(UNIT_ROUNDOFF[precision])}")  # fmt: skip
    if judged["decided_by"] == ABSOLUTE:
        text += " (the floor is below the absolute term: the absolute term decides)"
    ratio = judged["ratio"]
    return text + f", ratio {_g(ratio) if ratio is not None else 'inf'}"


def _badness(judged: Mapping) -> float:
    return math.inf if judged["ratio"] is None else judged["ratio"]


def _g(value: float) -> str:
    return f"{value:.3g}"
