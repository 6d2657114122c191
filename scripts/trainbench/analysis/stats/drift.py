"""Loss drift: how far a device's training strays from the same training in float64,
against how far a correct device of its precision would (the parity test's
sensitive check; docs/statistics.md, "Parity").

Repeat k of the device and of the baseline start from the same weights and see the
same batches (they share ``run_seed``), and so does repeat k's float64 reference
(:mod:`trainbench.launch.reference`). For each of the reference's steps t:

* the device's error  e_D(t) = |L_D(t) − L_R(t)| / |L_R(t)|,
* the baseline's error e_B(t) = max(|L_B(t) − L_R(t)| / |L_R(t)|, u_fp32) — how far the
  baseline's float32 arithmetic strays on this workload at this step (never below
  float32's own rounding of the loss, u_fp32 = 2⁻²⁴);
* the envelope of a correct device of precision p: m_p × (u_p / u_fp32) × e_B(t), where
  u_p is p's unit roundoff (:data:`trainbench.common.precision_classes.UNIT_ROUNDOFF`: bf16 2⁻⁸, TF32
  and fp16 2⁻¹¹) — to first order a rounding error propagates linearly, so an
  arithmetic k times coarser strays k times further — and m_p the allowance for
  correct kernels of that precision doing other arithmetic than the baseline's
  (another algorithm, another reduction order).

This is how PyTorch's own accuracy checks judge a compiled result against an eager one
(``torch._dynamo.utils.same(..., fp64_ref=...)``: the result's error against a float64
reference may be at most a multiple of the eager result's), with the precision's
scale added because a device may run coarser arithmetic than the baseline.

A pair's **drift ratio** is the median of e_D(t) / envelope(t) over the steps
**before the baseline diverges**: ≤ 1 is within what correct arithmetic of the
device's precision would do. The median keeps a single step where the baseline happens
to land on the reference's value from deciding.

*Before the baseline diverges*: the steps up to the first where e_B(t) exceeds
:data:`DIVERGENCE` × u_fp32 (about 1e-6), at least :data:`MIN_STEPS`. Training
amplifies any difference (a rounding, a wrong tile) step by step; once the float32
baseline's own trajectory has left float64's by more than rounding, a correct device
and a wrong one both drift at the pace of that amplification, and their late steps
compare the chaos, not the arithmetic. Measured (benchmarks/parity_power.py): over all
32 steps image_cnn's 3% fault was within the float32 envelope in most pairs, because
the baseline's error reached 1e-4 by step 12 in some repeats; before divergence every
3% fault pair was 6-446x beyond it and every correct kernel's at most 0.7x.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from trainbench.common.precision_classes import UNIT_ROUNDOFF

FLOOR = UNIT_ROUNDOFF["float32"]
MIN_STEPS = 4  # fewer common steps: no drift ratio; never fewer compared
# The baseline has diverged once its error against float64 exceeds DIVERGENCE x u_fp32:
# 16 rounding units (~1e-6); measured with benchmarks/parity_power.py, 64 let a correct
# AVX2 kernel's clip pair reach 1.2x its envelope, 16 kept every one below 0.7x.
DIVERGENCE = 16.0
# m_p defaults (report.parity.drift_multiplier): measured by benchmarks/parity_power.py
# (docs/statistics.md, "Parity"), over the steps before divergence: correct float32
# kernels other than the baseline's (two threads; oneDNN's AVX2 kernels against its
# AVX-512 ones) strayed up to 68x the baseline's error (a pair's median; ratio 0.68 at
# m = 100), a 3% error on a quarter of the matmul tiles 621x to 44,600x, a 1% error
# 39x to 11,400x; bf16 autocast on the CPU stayed below 0.06x its scaled envelope
# (m = 4). Per-pair extremes: benchmarks/results/parity-power-*.md, "Per-pair drift
# ratios". The reduced-precision m was 4 from CPU bf16 alone; CUDA's correct fp16, TF32
# and bf16 kernels (cuDNN picks other convolution algorithms; fp16 trains under a
# GradScaler) strayed up to 17.4x the scaled envelope's unit (fp16, image_cnn batch 32,
# an H100: benchmarks/results/false-alarm-cuda-*.md), a false alarm at 4; 32 leaves
# them below 0.55 (calibrated on image_cnn and clip, checked on every row of the sweep).
DEFAULT_MULTIPLIERS = {"float32": 100.0, "reduced": 32.0}


def multiplier_for(precision: str, multipliers: dict[str, float] | None = None) -> float:
    found = {**DEFAULT_MULTIPLIERS, **(multipliers or {})}
    return float(found["float32" if precision in ("float32", "float64") else "reduced"])


@dataclass(frozen=True)
class PairDrift:
    steps: int  # steps with a loss on every side
    ratio: float  # median over the compared steps of e_D / envelope (m_p in the envelope)
    device_error: float  # median over the compared steps of e_D
    baseline_error: float  # median over the compared steps of e_B (floored)
    bit_identical: bool  # the device's losses equal the baseline's at every step
    compared: int  # the first steps, before the baseline diverges (see the module doc)


def pair_drift(
    device: Sequence[float],
    baseline: Sequence[float],
    reference: Sequence[float],
    precision: str,
    multiplier: float,
) -> PairDrift | None:
    """The drift of one pair (see the module docstring); None with fewer than
    :data:`MIN_STEPS` common steps or a reference loss of zero."""
    n = min(len(device), len(baseline), len(reference))
    if n < MIN_STEPS:
        return None
    d, b, r = (np.asarray(x[:n], dtype=float) for x in (device, baseline, reference))
    if not np.all(np.isfinite(r)) or np.any(r == 0):
        return None
    e_d = np.abs(d - r) / np.abs(r)
    e_b = np.maximum(np.abs(b - r) / np.abs(r), FLOOR)
    k = compared_steps(e_b)
    scale = UNIT_ROUNDOFF.get(precision, UNIT_ROUNDOFF["float32"]) / FLOOR
    envelope = multiplier * max(scale, 1.0) * e_b[:k]
    ratios = np.where(np.isfinite(e_d[:k]), e_d[:k] / envelope, np.inf)
    return PairDrift(
        steps=int(n),
        ratio=float(np.median(ratios)),
        device_error=float(np.median(e_d[:k])),
        baseline_error=float(np.median(e_b[:k])),
        bit_identical=bool(np.array_equal(d, b)),
        compared=k,
    )


def compared_steps(baseline_error: np.ndarray) -> int:
    """How many of the first steps a drift ratio compares: those before the baseline's
    error first exceeds :data:`DIVERGENCE` rounding units, at least :data:`MIN_STEPS`
    (all of them when it never does)."""
    diverged = np.flatnonzero(baseline_error > DIVERGENCE * FLOOR)
    onset = int(diverged[0]) if diverged.size else len(baseline_error)
    return min(max(onset, MIN_STEPS), len(baseline_error))


def identical_pair(steps: int, precision: str, multiplier: float) -> PairDrift:
    """A pair whose losses are bit-identical: e_D = e_B at every step, so its ratio is
    1 / (m x scale) whatever the reference (none is made for it)."""
    scale = max(UNIT_ROUNDOFF.get(precision, FLOOR) / FLOOR, 1.0)
    return PairDrift(int(steps), 1.0 / (multiplier * scale), np.nan, np.nan, True, int(steps))
