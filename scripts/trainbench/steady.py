"""Where a run's steady state begins, and which of its steps are outliers.

Steady state follows Barrett et al., "Virtual machine warmup blows hot and cold"
(OOPSLA 2017): change points of the per-step time series split it into segments;
the last segment is the steady state, and a run whose last segment is too short
never reached one. Change points come from ``ruptures``' PELT on the log step
times, binned to at most ``max_bins`` medians of consecutive steps (robust to
single slow steps, and fast: PELT is quadratic in the worst case). The penalty is
``penalty`` x the robust noise variance x log(bins), a BIC-like choice; segments
whose medians differ by less than ``equivalence`` are merged.

Outliers are classified with Tukey's fences as criterion.rs does (mild: beyond
1.5 IQR from the quartiles, severe: beyond 3 IQR) and counted, never dropped.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

import numpy as np

FLAT = "flat"
WARMUP = "warmup"
SLOWDOWN = "slowdown"
NO_STEADY_STATE = "no steady state"
TOO_FEW_STEPS = "too few steps"
FIXED = "fixed warm-up"

MIN_BINS = 8  # fewer points than this: no detection, the window starts at warmup_steps
# Shortest segment, in steps: a few slow steps (a collection, a page fault) are outliers,
# not a change of level; shorter warm-ups are what warmup_steps is for.
MIN_SEGMENT_STEPS = 10


@dataclass
class SteadyState:
    start_step: int  # first step of the measurement window (0-based, over the whole run)
    detected_step: int | None  # start of the last segment; None when not detected
    classification: str
    segments: list[dict] = field(default_factory=list)  # start, end (exclusive), median_s
    method: str = ""

    def as_dict(self) -> dict:
        return asdict(self)


def _bins(values: np.ndarray, max_bins: int) -> tuple[np.ndarray, int]:
    """Medians of consecutive groups of ``width`` values; the last group may be shorter."""
    width = max(1, math.ceil(len(values) / max_bins))
    starts = range(0, len(values), width)
    return np.array([np.median(values[s : s + width]) for s in starts]), width


def _noise_variance(binned: np.ndarray) -> float:
    """Robust variance of the noise: MAD of first differences (level shifts drop out)."""
    diffs = np.diff(binned)
    if diffs.size == 0:
        return 0.0
    mad = float(np.median(np.abs(diffs - np.median(diffs))))
    sigma = mad / (0.6745 * math.sqrt(2.0))
    return sigma**2


def _change_points(binned: np.ndarray, penalty: float, min_size: int) -> list[int]:
    """Segment ends (exclusive, in bins) from ruptures' PELT; the last is len(binned)."""
    import ruptures
    from ruptures.exceptions import BadSegmentationParameters

    if len(binned) < 2 * min_size:  # no split leaves two segments of min_size
        return [len(binned)]
    variance = _noise_variance(binned)
    # All-equal bins (a perfectly flat series): any change would be spurious.
    if variance <= 0:
        spread = float(np.ptp(binned))
        if spread == 0:
            return [len(binned)]
        variance = (spread / 100.0) ** 2
    pen = penalty * variance * math.log(len(binned))
    algo = ruptures.Pelt(model="l2", min_size=min_size, jump=1).fit(binned.reshape(-1, 1))
    try:
        return [int(b) for b in algo.predict(pen=pen)]
    except BadSegmentationParameters:
        return [len(binned)]


def _merge(segments: list[tuple[int, int]], log_times: np.ndarray, equivalence: float):
    """Merge neighbouring segments whose medians are equivalent, the closest pair
    first, until none are. Equivalent: they differ by less than ``equivalence`` or by
    less than three standard errors of the difference of two medians (1.2533 sigma
    sqrt(1/n + 1/m), sigma the step-to-step noise). The l2 cost splits at single slow
    steps; medians, robust to them, put such pieces back together."""
    floor = math.log1p(equivalence)
    sigma = math.sqrt(_noise_variance(log_times))
    merged = list(segments)
    while len(merged) > 1:
        medians = [float(np.median(log_times[a:b])) for a, b in merged]
        sizes = [b - a for a, b in merged]
        excess = [
            abs(medians[i] - medians[i + 1])
            - max(floor, 3 * 1.2533 * sigma * math.sqrt(1 / sizes[i] + 1 / sizes[i + 1]))
            for i in range(len(merged) - 1)
        ]
        closest = int(np.argmin(excess))
        if excess[closest] >= 0:
            break
        merged[closest : closest + 2] = [(merged[closest][0], merged[closest + 1][1])]
    return merged


def detect_steady_state(
    step_seconds: Sequence[float],
    warmup_steps: int,
    min_steps: int,
    penalty: float = 3.0,
    equivalence: float = 0.02,
    max_bins: int = 150,
) -> SteadyState:
    """Where the measurement window of a run starts, from its per-step times.

    The window starts at the later of ``warmup_steps`` and the start of the last
    segment. ``no steady state``: the last segment has fewer than ``min_steps``
    steps or starts in the second half of the run; the window then starts at
    ``warmup_steps`` and the run is flagged."""
    times = np.asarray(step_seconds, dtype=float)
    n = int(times.size)
    method = (
        f"ruptures PELT (l2) on log step times in bins of consecutive steps (<= {max_bins} bins), "
        f"penalty {penalty} x robust noise variance x log(bins); segments within "
        f"{100 * equivalence:g}% merged; window = later of warmup_steps and the last segment"
    )
    warmup = min(int(warmup_steps), n)
    if n == 0:
        return SteadyState(warmup, None, TOO_FEW_STEPS, [], method)
    log_times = np.log(np.clip(times, 1e-12, None))
    binned, width = _bins(log_times, max_bins)
    if binned.size < MIN_BINS:
        return SteadyState(warmup, None, TOO_FEW_STEPS, _describe([(0, n)], times), method)
    ends = _change_points(binned, penalty, max(2, math.ceil(MIN_SEGMENT_STEPS / width)))
    bounds = [0] + [min(e * width, n) for e in ends]
    segments = [(a, b) for a, b in zip(bounds, bounds[1:], strict=False) if b > a]
    segments = _merge(segments, log_times, equivalence)
    described = _describe(segments, times)
    detected = segments[-1][0]
    start = max(warmup, detected)
    if n - start < min_steps or start > n / 2:
        return SteadyState(warmup, detected, NO_STEADY_STATE, described, method)
    if detected <= warmup:
        return SteadyState(start, detected, FLAT, described, method)
    last = float(np.median(times[detected:]))
    earlier = [s["median_s"] for s in described[:-1] if s["end"] > warmup]
    slower = bool(earlier) and min(earlier) < last
    return SteadyState(start, detected, SLOWDOWN if slower else WARMUP, described, method)


def fixed_warmup(n_steps: int, warmup_steps: int) -> SteadyState:
    """No detection (``timing.steady_state.detect: false``): the window starts at
    ``warmup_steps``, as in a hand-written loop that discards a fixed warm-up."""
    start = min(int(warmup_steps), int(n_steps))
    return SteadyState(start, None, FIXED, [], "fixed: the window starts at warmup_steps")


def _describe(segments: list[tuple[int, int]], times: np.ndarray) -> list[dict]:
    return [
        {"start": int(a), "end": int(b), "median_s": float(np.median(times[a:b]))}
        for a, b in segments
    ]


def tukey_outliers(seconds: Sequence[float]) -> dict:
    """Counts of Tukey outliers (criterion's classification) and the share of the
    total time spent in high outliers. Fewer than 4 values: nothing is classified."""
    x = np.asarray(seconds, dtype=float)
    empty = {
        "low_severe": 0,
        "low_mild": 0,
        "high_mild": 0,
        "high_severe": 0,
        "high_seconds_share": 0.0,
        "fences": None,
        "method": "Tukey fences: mild beyond 1.5 IQR of the quartiles, severe beyond 3 IQR",
    }
    if x.size < 4:
        return empty
    q1, q3 = (float(v) for v in np.percentile(x, [25, 75]))
    iqr = q3 - q1
    lo_severe, lo_mild = q1 - 3 * iqr, q1 - 1.5 * iqr
    hi_mild, hi_severe = q3 + 1.5 * iqr, q3 + 3 * iqr
    high = x > hi_mild
    total = float(x.sum())
    return {
        **empty,
        "low_severe": int((x < lo_severe).sum()),
        "low_mild": int(((x < lo_mild) & (x >= lo_severe)).sum()),
        "high_mild": int((high & (x <= hi_severe)).sum()),
        "high_severe": int((x > hi_severe).sum()),
        "high_seconds_share": float(x[high].sum() / total) if total > 0 else 0.0,
        "fences": [lo_severe, lo_mild, hi_mild, hi_severe],
    }


def dispersion(seconds: Sequence[float]) -> dict:
    """n, mean, percentiles, CV (std/mean) and robust CV (1.4826 MAD / median)."""
    x = np.asarray(seconds, dtype=float)
    if x.size == 0:
        keys = ("mean", "p50", "p90", "p99", "min", "max", "cv", "robust_cv")
        return {"n": 0, **{k: None for k in keys}}
    mean, median = float(x.mean()), float(np.median(x))
    mad = float(np.median(np.abs(x - median)))
    return {
        "n": int(x.size),
        "mean": mean,
        "p50": median,
        "p90": float(np.percentile(x, 90)),
        "p99": float(np.percentile(x, 99)),
        "min": float(x.min()),
        "max": float(x.max()),
        "cv": float(x.std(ddof=1) / mean) if x.size > 1 and mean > 0 else 0.0,
        "robust_cv": float(1.4826 * mad / median) if median > 0 else 0.0,
    }
