"""Intervals over repeats some of which are censored: a repeat that never reached a
target has a time of "more than" its whole run, kept as +inf in every order statistic
(docs/statistics.md §4). Without censored repeats every rule is :mod:`.intervals`'s."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from trainbench.analysis.stats.intervals import Interval, ratio_interval, summarize


def time_interval(values: np.ndarray) -> Interval:
    """Median and interval of times with censored repeats as +inf: the range where any
    is censored (or below 5), else :func:`.intervals.summarize`."""
    n = int(values.size)
    if n == 0:
        return Interval(math.nan, math.nan, math.nan, "no runs", 0)
    censored = int(np.isinf(values).sum())
    if not censored:
        return summarize(values)
    kind = f"range of {n} runs, {censored} not reaching the target"
    return Interval(float(np.median(values)), float(values.min()), math.inf, kind, n)


def times_sooner(base: np.ndarray, mine: np.ndarray) -> Interval:
    """baseline time ÷ this time (times sooner) and its interval; the extreme pairwise
    ratios where either side has censored repeats."""
    if np.isfinite(base).all() and np.isfinite(mine).all():
        return ratio_interval(base, mine)
    with np.errstate(divide="ignore", invalid="ignore"):
        estimate = float(np.median(base) / np.median(mine))
        low = float(base.min() / mine.max())
        high = float(base.max() / mine.min())
    kind = f"range of {base.size} vs {mine.size} runs with censored repeats"
    return Interval(estimate, 0.0 if math.isnan(low) else low, high, kind, (base.size, mine.size))


def median_if_reached(outcomes: pd.DataFrame, column: str) -> float:
    """The median with censored repeats as +inf (NaN where it is not reached)."""
    values = outcomes[column].to_numpy(dtype=float)
    if values.size == 0 or np.isnan(values).any():
        return math.nan
    median = float(np.median(values))
    return median if math.isfinite(median) else math.nan
