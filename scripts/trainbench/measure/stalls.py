"""Stalls: single steps that would set a window's throughput (docs/statistics.md
section 1, "A stall cannot set a throughput").

A stall is a step of the measurement window beyond Tukey's severe fence (Q3 + 3 IQR,
the classification :func:`trainbench.measure.steady.tukey_outliers` makes, as
criterion.rs does). The rule judges each stall alone: one that takes more than
``timing.max_stall_share`` of the window's seconds could move the throughput by more
than the steady-state detector's equivalence margin on its own. Recurring slow steps,
each a small part of the window, are the run's own jitter: they stay in the throughput
(a heavy-tailed CPU series has many steps past the fence, none of which sets it). Above
the share the cell first times more steps (the window's extension, as
``torch.utils.benchmark.Timer.adaptive_autorange`` measures until its spread is small),
until no stall takes more than the share; stalls still above it when no more steps can
be timed are excluded from the published throughput, the throughput of every step kept
beside it. Time to target (wall-clock training time) counts every step and is not read
from here.

Pure functions over the window's recorded steps, after its timed regions: nothing here
runs inside a step.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

RULE = (
    "a stall is a window step beyond Tukey's severe fence (Q3 + 3 IQR); a stall that alone "
    "takes more than timing.max_stall_share of the window's seconds makes the window "
    "extend (within timing.max_extension_seconds) until none does; those still above it "
    "when no more steps can be timed are excluded from samples_per_s (the samples and "
    "seconds of the other steps), samples_per_s_all_steps keeps every step. Time to target "
    "counts every step"
)


def stall_facts(
    seconds: Sequence[float],
    samples: Sequence[int],
    severe_fence: float | None,
    max_share: float,
) -> dict:
    """The window's stalls: count, seconds, samples, share of the window's seconds, the
    limit, whether they are ``excluded`` from the published throughput (share above
    ``max_share``), the fence and the rule in words. ``seconds`` and ``samples``: the
    window's steps; ``severe_fence``: Tukey's high severe fence (None: too few steps to
    classify, no stalls)."""
    x = np.asarray(seconds, dtype=float)
    n = np.asarray(samples, dtype=float)
    stall = x > severe_fence if severe_fence is not None and x.size else np.zeros(x.size, bool)
    total = float(x.sum())
    over = stall & (x > max_share * total) if total > 0 else np.zeros(x.size, bool)

    def samples_of(mask: np.ndarray) -> int:
        return int(n[mask].sum()) if n.size == x.size else round(mask.sum() * n.mean())

    largest = float(x[stall].max()) if stall.any() else 0.0
    return {
        "count": int(stall.sum()),
        "seconds": float(x[stall].sum()),
        "share": float(x[stall].sum()) / total if total > 0 else 0.0,
        "largest_seconds": largest,
        "largest_share": largest / total if total > 0 else 0.0,
        "max_share": float(max_share),
        # the stalls that alone take more than the share: what extension dilutes, else
        # what is left out of the published throughput
        "over_limit": int(over.sum()),
        "over_limit_seconds": float(x[over].sum()),
        "over_limit_samples": samples_of(over),
        "excluded": bool(over.any()),
        "fence_s": severe_fence,
        "rule": RULE,
    }


def published_throughput(samples: int, seconds: float, stalls: dict) -> float | None:
    """The window's samples per second: every step, or with the stalls' samples and
    seconds taken out where they are ``excluded``."""
    if stalls["excluded"]:
        samples -= stalls["over_limit_samples"]
        seconds -= stalls["over_limit_seconds"]
    return samples / seconds if seconds > 0 else None


def stall_steps_needed(
    stalls: dict | None, window_seconds: float, step_seconds: float, margin: float
) -> tuple[int, str] | None:
    """Steps to add so that no stall alone takes more than ``max_share`` of the window
    (window seconds + added seconds, ``margin`` past it), at ``step_seconds`` a step (the
    window's median), and why; None when none does. The caller bounds the steps by the
    extension's budget."""
    if not stalls or not stalls.get("excluded") or stalls["max_share"] <= 0:
        return None
    target = stalls["largest_seconds"] / stalls["max_share"] * margin
    steps = max(math.ceil((target - window_seconds) / step_seconds), 1)
    reason = (
        f"a stall step of {stalls['largest_seconds']:.3g} s takes "
        f"{stalls['largest_share']:.1%} of the window > timing.max_stall_share "
        f"{stalls['max_share']:g}"
    )
    return steps, reason
