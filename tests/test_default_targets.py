"""The rule that chose the bundled workloads' default targets (benchmarks/default_targets.py):
90% of the way from the median first evaluation to the lowest final one, rounded toward
the start, then checked against the same curves."""

from __future__ import annotations

import importlib.util

import pandas as pd
import pytest
from helpers import REPO

_spec = importlib.util.spec_from_file_location(
    "default_targets", REPO / "benchmarks" / "default_targets.py"
)
default_targets = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(default_targets)


def _curves(runs: list[list[float]]) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {"device": "cpu", "batch_size": 32, "rep": rep, "point": i, "metric": v}
            for rep, values in enumerate(runs)
            for i, v in enumerate(values)
        ]
    )


@pytest.mark.parametrize(
    ("value", "start", "rounded"),
    [(0.6789, 0.1, 0.67), (0.04912, 0.01, 0.049), (0.2345, 0.9, 0.24), (1.0, 0.0, 1.0)],
)
def test_rounding_goes_toward_the_start(value, start, rounded):
    assert default_targets.round_toward(value, start) == pytest.approx(rounded)


def test_target_is_90_percent_of_the_way_to_the_lowest_final_quality():
    runs = [[0.1, 0.3, 0.5, 0.7, 0.8, 0.85, 0.9, 0.92], [0.1, 0.2, 0.4, 0.6, 0.7, 0.8, 0.85, 0.9]]
    choice = default_targets.choose(_curves(runs))
    assert choice["start"] == pytest.approx(0.1) and choice["plateau"] == pytest.approx(0.9)
    assert choice["target"] == pytest.approx(0.82)  # 0.1 + 0.9 * 0.8
    assert choice["every_repeat_reaches"] and choice["holds"]
    assert choice["median_evaluation"] == {"cpu bs 32": 6.5}  # evaluations 6 and 7


def test_a_target_met_at_the_first_evaluations_does_not_hold():
    # A curve already at its plateau after two evaluations: the rule's target is met at
    # the 2nd, which is the throughput ratio again; the check says so.
    runs = [[0.5, 0.95, 0.95, 0.96], [0.5, 0.96, 0.96, 0.96]]
    choice = default_targets.choose(_curves(runs))
    assert not choice["holds"]
