"""Where a run's steady state begins, and which of its steps are outliers.

Steady state follows Barrett et al., "Virtual machine warmup blows hot and cold"
(OOPSLA 2017): change points split the per-step series into segments, the last
segment is the steady state, and segments equivalent to it are no change. What
is equivalent is where GPU step times differ from Barrett's quiet machines: their
jitter is autocorrelated, heavy-tailed and regime-like, so a noise scale that
assumes independent steps sees changes everywhere. Here:

1. log step times in at most ``max_bins`` blocks of consecutive steps, each
   summarised by its 20% trimmed mean (single slow steps and two alternating modes
   move it little);
2. the noise scale is a long-run variance: batch means of the blocks at batch
   sizes up to an eighth of the run, their spread from the MAD of differences of
   neighbouring batch means (level shifts and a linear drift drop out), the
   largest over batch sizes and its 1/m extrapolation (simulation output
   analysis' batch-means method);
3. ``ruptures``' kernel change-point search (linear kernel: least squares, as
   PELT with the l2 cost) proposes change points, penalty ``penalty`` x block
   noise variance x log(blocks);
4. neighbouring segments are merged unless their levels differ by more than the
   practical threshold log(1 + ``equivalence``) plus three standard errors of the
   difference; a segment too short to be a steady state between two equivalent
   levels is folded back in when it moves their level by less than the threshold
   (less than half of it when it ends the run);
5. the window starts at the later of warmup_steps and the last segment (refined to
   the step); the run never settled when that segment is too short, or when the
   window's first and last thirds differ by more than the same margin.

docs/statistics.md section 1 gives the reasons and sources.

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

MIN_BINS = 8  # fewer steps than this: no detection, the window starts at warmup_steps
# Shortest segment, in steps: a few slow steps (a collection, a page fault) are outliers,
# not a change of level; shorter warm-ups are what warmup_steps is for.
MIN_SEGMENT_STEPS = 20
TRIM = 0.2  # share of each block cut from either end before averaging (a 20% trimmed mean)
Z = 3.0  # standard errors a change must exceed (as well as the equivalence)
MIN_BLOCK_STEPS = 10  # the smallest block a 20% trim takes two steps off either end of
MIN_BATCHES = 8  # the long-run variance uses batch sizes that leave at least this many
# The steady segment must hold at least this share of the run: Barrett et al. ask for a
# steady state over the last 500 of 2,000 in-process iterations.
MIN_STEADY_SHARE = 0.25


@dataclass
class SteadyState:
    start_step: int  # first step of the measurement window (0-based, over the whole run)
    detected_step: int | None  # start of the last segment; None when not detected
    classification: str
    segments: list[dict] = field(default_factory=list)  # start, end (excl.), median_s, level_s
    method: str = ""

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class _Blocks:
    bounds: np.ndarray  # K + 1 step indices
    levels: np.ndarray  # K trimmed means of log step times

    @property
    def sizes(self) -> np.ndarray:
        return np.diff(self.bounds)

    def segments(self, ends: list[int]) -> list[tuple[int, int]]:
        """(first, end) block pairs of the segments that end at ``ends``."""
        return list(zip([0, *ends[:-1]], ends, strict=True))

    def steps(self, first: int, last: int) -> int:
        return int(self.bounds[last] - self.bounds[first])

    def level(self, first: int, last: int) -> float:
        """Level of blocks first..last-1: their trimmed means weighted by size."""
        sizes = self.sizes[first:last]
        return float(np.dot(self.levels[first:last], sizes) / sizes.sum())


def _trimmed_mean(values: np.ndarray) -> float:
    part = np.sort(values)
    cut = int(TRIM * part.size)
    return float(part[cut : part.size - cut].mean())


def _blocks(log_times: np.ndarray, max_bins: int) -> _Blocks:
    """At most ``max_bins`` blocks of consecutive steps (sizes differ by at most one,
    at least MIN_BLOCK_STEPS where the series allows MIN_BINS such blocks), each
    summarised by its trimmed mean."""
    n = log_times.size
    count = min(max_bins, max(MIN_BINS, n // MIN_BLOCK_STEPS), n)
    bounds = np.linspace(0, n, count + 1).round().astype(int)
    pairs = zip(bounds[:-1], bounds[1:], strict=True)
    levels = np.array([_trimmed_mean(log_times[a:b]) for a, b in pairs])
    return _Blocks(bounds, levels)


def long_run_variance(levels: np.ndarray, steps_per_level: float) -> float:
    """Long-run variance (per step) of a series from the means of its blocks: for
    batch sizes m = 1, 2, 4, ... blocks that leave at least MIN_BATCHES batches, the
    variance of the difference of two neighbouring batch means (every offset: the
    overlapping differences; its scale from the MAD about the median difference, so
    level shifts and a linear drift drop out) gives the variance of one batch mean,
    times the steps a batch holds; the largest over m. Var(mean of L steps) is then
    about this / L, whatever the autocorrelation up to the largest batch."""
    scaled, m = [], 1
    csum = np.concatenate([[0.0], np.cumsum(levels)])
    while levels.size >= max(MIN_BATCHES, 3) * m:
        means = (csum[m:] - csum[:-m]) / m  # the mean of every run of m blocks
        diffs = means[m:] - means[:-m]
        mad = float(np.median(np.abs(diffs - np.median(diffs))))
        scaled.append((1.4826 * mad) ** 2 / 2.0 * m * steps_per_level)
        m *= 2
    if not scaled:
        return 0.0
    if len(scaled) >= 2:  # batch means approach the long-run variance like 1/m
        scaled.append(2 * scaled[-1] - scaled[-2])
    return max(scaled)


def _change_points(blocks: _Blocks, noise: float, penalty: float, floor: float) -> list[int]:
    """Segment ends (exclusive, in blocks) from ruptures' kernel change-point search
    with the linear kernel (least squares, as PELT with the l2 cost); the last is K."""
    import ruptures
    from ruptures.exceptions import BadSegmentationParameters

    count = blocks.levels.size
    width = float(np.mean(blocks.sizes))
    min_size = max(2, math.ceil(MIN_SEGMENT_STEPS / width))
    if count < 2 * min_size:
        return [count]
    block_variance = max(noise / width, floor)
    pen = penalty * block_variance * math.log(count)
    algo = ruptures.KernelCPD(kernel="linear", min_size=min_size, jump=1)
    try:
        return [int(b) for b in algo.fit(blocks.levels.reshape(-1, 1)).predict(pen=pen)]
    except BadSegmentationParameters:
        return [count]


def _merge(ends: list[int], blocks: _Blocks, noise: float, threshold: float) -> list[int]:
    """Merge neighbouring segments (``ends``: their ends, in blocks) whose levels are
    equivalent, the closest pair first, until none are. Equivalent: the difference of
    their levels is within the margin."""
    ends = list(ends)
    while len(ends) > 1:
        segs = blocks.segments(ends)
        excess = [
            abs(blocks.level(*right) - blocks.level(*left))
            - _margin(blocks.steps(*left), blocks.steps(*right), noise, threshold)
            for left, right in zip(segs[:-1], segs[1:], strict=True)
        ]
        closest = int(np.argmin(excess))
        if excess[closest] >= 0:
            break
        del ends[closest]
    return ends


def _absorb(ends: list[int], blocks: _Blocks, noise: float, threshold: float, short: int):
    """Fold excursions back into the steady level around them. An excursion: a
    segment of fewer than ``short`` steps (too short to be a steady state itself)
    that lies between two segments equivalent to each other (the run went back to
    its level), folded in when including it moves that level by less than
    ``threshold``; or the last segment, folded into the one before when it moves its
    level by less than half of ``threshold`` (nothing after it shows the run went
    back). Bursts of slow steps, not changes of steady state. The one that moves its
    level least goes first; then neighbours are merged again. The first segment is
    never an excursion: it is a warm-up."""
    ends = _merge(ends, blocks, noise, threshold)
    while len(ends) > 1:
        segs = blocks.segments(ends)
        moves = {}  # excursion -> how much it moves its level, as a share of its allowance
        for i in range(1, len(segs)):
            if blocks.steps(*segs[i]) >= short:
                continue
            if i == len(segs) - 1:
                around, allowance = [segs[i - 1]], threshold / 2
            else:
                left, right = segs[i - 1], segs[i + 1]
                gap = abs(blocks.level(*left) - blocks.level(*right))
                if gap > _margin(blocks.steps(*left), blocks.steps(*right), noise, threshold):
                    continue
                around, allowance = [left, right], threshold
            without = _pooled(blocks, around)
            moves[i] = abs(_pooled(blocks, [*around, segs[i]]) - without) / allowance
        if not moves or min(moves.values()) >= 1:
            return ends
        i = min(moves, key=moves.get)
        del ends[i - 1 : i if i == len(segs) - 1 else i + 1]
        ends = _merge(ends, blocks, noise, threshold)
    return ends


def _pooled(blocks: _Blocks, segs: list[tuple[int, int]]) -> float:
    steps = [blocks.steps(*seg) for seg in segs]
    return float(np.dot([blocks.level(*seg) for seg in segs], steps) / sum(steps))


def _margin(n_left: int, n_right: int, noise: float, threshold: float) -> float:
    """What the difference of two levels (means of n_left and n_right steps) must
    exceed to be a change of steady state: the practical threshold (log of 1 +
    equivalence) plus Z standard errors of the difference, sqrt(noise (1/n + 1/m))
    with noise the long-run variance per step. A change is one that is larger than
    the equivalence with confidence, not merely different from zero."""
    return threshold + Z * math.sqrt(noise * (1 / n_left + 1 / n_right))


def _refine(log_times: np.ndarray, before: int, at: int, after: int, span: int) -> int:
    """The step within ``span`` of ``at`` where the series best changes from the level
    of [before, at) to that of [at, after): the split that minimises the absolute
    deviations from each side's median (least absolute deviations with the two
    levels held, a robust CUSUM; one pass). A compile step or a burst of slow steps
    next to the boundary shifts the cost by at most the gap between the levels, so
    it does not pull the split as it would a least-squares one."""
    lo, hi = max(before, at - span), min(after, at + span)
    if hi - lo < 2:
        return at
    left, right = np.median(log_times[before:at]), np.median(log_times[at:after])
    x = log_times[lo:hi]
    gain = np.abs(x - left) - np.abs(x - right)  # cost of a step on the left, less the right
    prefix = np.cumsum(gain)[:-1]  # split after 1 .. len-1 steps
    return lo + 1 + int(np.argmin(prefix))


def _drifts(blocks: _Blocks, first: int, noise: float, threshold: float) -> bool:
    """Whether blocks ``first``.. (the window) still drift: the levels of their first
    and last thirds differ by more than the margin (so a linear drift of 1.5 x the
    equivalence across the window, or a step of the equivalence, with confidence)."""
    third = (blocks.levels.size - first) // 3
    if third < 1:
        return False
    head, tail = (first, first + third), (blocks.levels.size - third, blocks.levels.size)
    change = blocks.level(*tail) - blocks.level(*head)
    return abs(change) > _margin(blocks.steps(*head), blocks.steps(*tail), noise, threshold)


def detect_steady_state(
    step_seconds: Sequence[float],
    warmup_steps: int,
    min_steps: int,
    penalty: float = 3.0,
    equivalence: float = 0.05,
    max_bins: int = 150,
) -> SteadyState:
    """Where the measurement window of a run starts, from its per-step times.

    The window starts at the later of ``warmup_steps`` and the start of the last
    segment. ``no steady state``: the last segment has fewer than ``min_steps`` steps
    or less than MIN_STEADY_SHARE of the run, or the window drifts; the window then
    starts at ``warmup_steps`` and the run is flagged."""
    times = np.asarray(step_seconds, dtype=float)
    n = int(times.size)
    method = _method(penalty, equivalence, max_bins)
    warmup = min(int(warmup_steps), n)
    if n < MIN_BINS:
        segments = _describe([(0, n)], times, None) if n else []
        return SteadyState(warmup, None, TOO_FEW_STEPS, segments, method)
    log_times = np.log(np.clip(times, 1e-12, None))
    blocks = _blocks(log_times, max_bins)
    width = float(np.mean(blocks.sizes))
    noise = long_run_variance(blocks.levels, width)
    threshold = math.log1p(equivalence)
    floor = (threshold / Z) ** 2
    short = max(min_steps, math.ceil(MIN_STEADY_SHARE * n))
    ends = _absorb(_change_points(blocks, noise, penalty, floor), blocks, noise, threshold, short)
    segs = blocks.segments(ends)
    levels = [blocks.level(*seg) for seg in segs]
    steps = [blocks.steps(*seg) for seg in segs]
    bounds = [int(blocks.bounds[a]) for a, _ in segs] + [n]
    if len(segs) > 1:  # the steady segment's first step, to the step
        span = 2 * max(math.ceil(width), MIN_SEGMENT_STEPS)  # a segment's least, and a block
        bounds[-2] = _refine(log_times, bounds[-3], bounds[-2], n, span)
    described = _describe(list(zip(bounds[:-1], bounds[1:], strict=True)), times, levels)
    detected = bounds[-2]
    start = max(warmup, detected)
    first = int(np.searchsorted(blocks.bounds, start, side="left"))
    if n - start < short or _drifts(blocks, first, noise, threshold):
        return SteadyState(warmup, detected, NO_STEADY_STATE, described, method)
    if detected <= warmup:
        return SteadyState(start, detected, FLAT, described, method)
    earlier = [
        level
        for level, count, end in zip(levels[:-1], steps[:-1], bounds[1:-1], strict=True)
        if end > warmup and abs(level - levels[-1]) > _margin(count, steps[-1], noise, threshold)
    ]
    slower = any(level < levels[-1] for level in earlier)
    return SteadyState(start, detected, SLOWDOWN if slower else WARMUP, described, method)


def _method(penalty: float, equivalence: float, max_bins: int) -> str:
    return (
        f"log step times in <= {max_bins} blocks of consecutive steps, each its "
        f"{100 * TRIM:g}% trimmed mean; noise = long-run variance from batch means of the "
        f"blocks (MAD of neighbouring differences, batches up to 1/{MIN_BATCHES} of the "
        f"run, largest and 1/m-extrapolated); change points: ruptures KernelCPD (linear "
        f"kernel), penalty {penalty:g} x block noise variance x log(blocks); segments "
        f"merged unless levels differ by more than {100 * equivalence:g}% + {Z:g} "
        f"standard errors; excursions shorter than the steady minimum folded back when "
        f"they move the level by < {100 * equivalence:g}% (< {100 * equivalence / 2:g}% at "
        f"the end of the run); window = later of "
        f"warmup_steps and the last segment (to the step); no steady state if that "
        f"segment holds < min_steps or < {100 * MIN_STEADY_SHARE:g}% of the run, or the "
        f"window's first and last thirds differ by more than the same margin"
    )


def fixed_warmup(n_steps: int, warmup_steps: int) -> SteadyState:
    """No detection (``timing.steady_state.detect: false``): the window starts at
    ``warmup_steps``, as in a hand-written loop that discards a fixed warm-up."""
    start = min(int(warmup_steps), int(n_steps))
    return SteadyState(start, None, FIXED, [], "fixed: the window starts at warmup_steps")


def _describe(
    segments: list[tuple[int, int]], times: np.ndarray, levels: list[float] | None
) -> list[dict]:
    out = []
    for i, (a, b) in enumerate(segments):
        row = {"start": int(a), "end": int(b), "median_s": float(np.median(times[a:b]))}
        if levels is not None:
            row["level_s"] = float(math.exp(levels[i]))
        out.append(row)
    return out


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
