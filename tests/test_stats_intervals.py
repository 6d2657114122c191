"""Intervals honest for n: ranges below 5 runs, bootstrap CIs (BCa, percentile where
BCa is degenerate) from 5, verdicts read from intervals."""

from __future__ import annotations

import math

import numpy as np
import pytest
from trainbench.analysis.stats import intervals as iv
from trainbench.analysis.stats import paired_ratio_interval, ratio_interval, summarize, verdict

CI_KINDS = {"95% BCa CI", "95% percentile CI"}


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_below_five_runs_the_interval_is_the_range_never_a_ci(n):
    values = [100.0 + 3 * i for i in range(n)][::-1]
    result = summarize(values)
    assert result.kind == (f"range of {n} runs" if n > 1 else "range of 1 run")
    assert "CI" not in result.kind and result.is_range
    assert (result.low, result.high) == (min(values), max(values))
    assert result.estimate == pytest.approx(np.median(values))
    assert result.n == n


def test_from_five_runs_a_bootstrap_ci_of_the_median():
    rng = np.random.default_rng(1)
    small, large = rng.normal(100, 10, size=5), rng.normal(100, 10, size=400)
    a, b = summarize(small), summarize(large)
    assert a.kind in CI_KINDS and b.kind == "95% BCa CI"
    assert a.estimate == pytest.approx(np.median(small))
    assert a.low <= a.estimate <= a.high and b.low <= b.estimate <= b.high
    assert (b.high - b.low) < 0.5 * (a.high - a.low)


def test_bootstrap_is_seeded_and_independent_of_row_order():
    values = [9.0, 11.0, 10.0, 12.5, 10.4, 9.7]
    assert summarize(values) == summarize(values[::-1]) == summarize(sorted(values))
    # batched (one scipy call for cells of equal size) == one call per cell
    samples = [[1, 2, 3, 4, 5.5], [2, 2.5, 3, 9, 4], [7, 8, 9]]
    assert iv.summarize_many(samples) == [summarize(s) for s in samples]


def test_degenerate_bca_falls_back_to_percentile():
    result = summarize([3.0] * 6)  # BCa is NaN on constant data
    assert result.kind == "95% percentile CI"
    assert (result.low, result.high) == (3.0, 3.0)
    ratio = ratio_interval([2.0] * 5, [1.0] * 5)
    assert ratio.kind == "95% percentile CI" and ratio.estimate == 2.0


def test_missing_values_are_dropped_and_empty_is_nan():
    result = summarize([1.0, None, float("nan"), "x", 3.0])
    assert result.n == 2 and result.estimate == 2.0
    empty = summarize([])
    assert math.isnan(empty.estimate) and empty.kind == "no runs" and empty.n == 0


def test_ratio_range_below_five_runs_is_the_extreme_pairwise_ratios():
    device, base = [310.0, 300.0, 305.0], [100.0, 102.0, 101.0]
    result = ratio_interval(device, base)
    assert result.kind == "range of 3 vs 3 runs"
    assert result.estimate == pytest.approx(305 / 101)
    assert result.low == pytest.approx(300 / 102) and result.high == pytest.approx(310 / 100)
    assert result.n == (3, 3)
    # 4 vs 12: still a range (both sides need 5 for a bootstrap)
    assert ratio_interval(device + [299.0], list(range(90, 102))).kind == "range of 4 vs 12 runs"


def test_ratio_bootstrap_from_five_runs_each_side():
    rng = np.random.default_rng(2)
    num, den = 200 + rng.normal(0, 6, size=12), 100 + rng.normal(0, 3, size=12)
    result = ratio_interval(num, den)
    assert result.kind in CI_KINDS
    assert result.estimate == pytest.approx(np.median(num) / np.median(den))
    assert 1 < result.low <= 2.0 <= result.high
    assert result.halfwidth == pytest.approx((result.high - result.low) / 2 / result.estimate)


def test_ratio_without_data_or_with_zero_baseline():
    assert math.isnan(ratio_interval([], [1.0]).estimate)
    zero = ratio_interval([1.0, 2.0], [0.0, 0.0])
    assert zero.kind == "no ratio" and math.isnan(zero.halfwidth)
    # a range over one value per side says nothing about precision
    assert math.isnan(ratio_interval([2.0], [1.0]).halfwidth)


def test_paired_ratio_interval():
    short = paired_ratio_interval([2.0, 2.2, 1.9])
    assert short.kind == "range of 3 paired rounds" and short.estimate == 2.0
    assert (short.low, short.high) == (1.9, 2.2)
    long = paired_ratio_interval([2.0, 2.2, 1.9, 2.1, 2.05, 1.95])
    assert long.kind in CI_KINDS and long.low <= long.estimate <= long.high


def test_verdict_from_the_interval():
    assert verdict(1.01, 3.0) == "faster"
    assert verdict(0.2, 0.99) == "slower"
    assert verdict(0.9, 1.1) == "no clear difference"
    assert verdict(1.0, 1.2) == "no clear difference"  # low end must exceed 1
    assert verdict(float("nan"), 2.0) == "insufficient data"
