"""Samples to target as a check beside the time-to-target verdict
(trainbench.analysis.stats.convergence): a device's median samples to target against the
baseline's range at the same batch size, beyond it by more than one evaluation."""

from __future__ import annotations

import math

import pandas as pd
import pytest
from test_time_to_target import TARGET, _tables
from trainbench.analysis.stats import COLUMNS, publish
from trainbench.analysis.stats.convergence import samples_to_target, with_samples_check
from trainbench.analysis.stats.targets import time_to_target_table

# Each list: one repeat's accuracy at evaluations 1, 2, 3, ... (10 steps of bs 32 apart:
# one evaluation = 320 samples). The target is accuracy >= 0.8.
AT_2 = [0.5, 0.85, 0.9, 0.9, 0.9]
AT_3 = [0.5, 0.6, 0.85, 0.9, 0.9]
AT_4 = [0.5, 0.6, 0.7, 0.85, 0.9]
NEVER = [0.5, 0.6, 0.7, 0.7, 0.7]


def _checked(device_repeats, baseline_repeats=(AT_2,) * 3, batch_size=32):
    quality, runs = _tables(
        [
            ("cpu", batch_size, list(baseline_repeats), 10.0),
            ("cuda", batch_size, list(device_repeats), 2.0),
        ]
    )
    times = time_to_target_table(quality, runs, {"image_cnn": "cpu"}, TARGET, ["image_cnn"])
    table = with_samples_check(times, quality, runs, {"image_cnn": "cpu"}, TARGET, ["image_cnn"])
    return table.set_index("device")


def test_a_device_needing_twice_the_samples_is_flagged_beside_its_verdict():
    table = _checked([AT_4] * 3)
    cuda = table.loc["cuda"]
    assert cuda["samples_check"] == "more samples"
    assert cuda["samples_ratio"] == pytest.approx(2.0)
    assert (cuda["baseline_samples_min"], cuda["baseline_samples_max"]) == (640, 640)
    assert cuda["samples_resolution"] == 320
    assert "needs 2x the baseline's median samples" in cuda["samples_note"]
    assert "cpu's range 640–640 at bs 32" in cuda["samples_note"]
    assert "not a failure" in cuda["samples_note"]
    # beside the verdict, not instead of it: it is still 2.5x sooner in training time
    assert cuda["verdict"] == "sooner"


def test_one_evaluation_later_is_within_the_resolution():
    cuda = _checked([AT_3] * 3).loc["cuda"]
    assert cuda["samples_check"] == "as the baseline"
    assert cuda["samples_ratio"] == pytest.approx(1.5)
    assert "within cpu's range 640–640" in cuda["samples_note"]


def test_the_median_not_the_quickest_repeat_decides():
    # one quick repeat does not hide two slow ones
    assert _checked([AT_2, AT_4, AT_4]).loc["cuda", "samples_check"] == "more samples"
    assert _checked([AT_4, AT_2, AT_2]).loc["cuda", "samples_check"] == "as the baseline"


def test_a_censored_device_repeat_counts_as_more_than_every_sample_never_dropped():
    # two censored of three: the median is censored (dropping them would leave 640)
    cuda = _checked([AT_2, NEVER, NEVER]).loc["cuda"]
    assert cuda["samples_check"] == "more samples"
    assert math.isinf(cuda["samples_ratio"])
    assert "does not reach the target within 1600 samples" in cuda["samples_note"]
    assert "1 of 3 repeats reach it" in cuda["samples_note"]
    # one censored of three: the median is the middle repeat, as the baseline
    assert _checked([AT_2, AT_2, NEVER]).loc["cuda", "samples_check"] == "as the baseline"


def test_a_censored_baseline_repeat_opens_its_range():
    cuda = _checked([AT_4] * 3, baseline_repeats=(AT_2, AT_2, NEVER)).loc["cuda"]
    assert math.isinf(cuda["baseline_samples_max"])
    assert cuda["samples_check"] == "as the baseline"
    assert "640–∞ (1 repeat not reaching it)" in cuda["samples_note"]
    # a baseline whose median repeat misses the target anchors nothing
    cuda = _checked([AT_4] * 3, baseline_repeats=(AT_2, NEVER, NEVER)).loc["cuda"]
    assert cuda["samples_check"] == "insufficient data"
    assert "does not reach the target in its median repeat" in cuda["samples_note"]


def test_fewer_samples_than_the_baseline_by_more_than_an_evaluation():
    cuda = _checked([AT_2] * 3, baseline_repeats=(AT_4,) * 3).loc["cuda"]
    assert cuda["samples_check"] == "fewer samples"
    assert cuda["samples_ratio"] == pytest.approx(0.5)


def test_the_baseline_row_gets_no_check_and_too_few_repeats_none_either():
    table = _checked([AT_4] * 3)
    cpu = table.loc["cpu"]
    assert cpu["samples_check"] == "" and cpu["samples_note"] == ""
    assert math.isnan(cpu["samples_ratio"])
    cuda = _checked([AT_4] * 2).loc["cuda"]
    assert cuda["samples_check"] == "insufficient data"
    assert "cuda has 2 ok repeats; the check needs 3" in cuda["samples_note"]


def test_no_baseline_at_this_batch_size_is_insufficient_data():
    quality, runs = _tables([("cpu", 16, [AT_2] * 3, 10.0), ("cuda", 32, [AT_4] * 3, 2.0)])
    times = time_to_target_table(quality, runs, {"image_cnn": "cpu"}, TARGET, ["image_cnn"])
    table = with_samples_check(times, quality, runs, {"image_cnn": "cpu"}, TARGET, ["image_cnn"])
    cuda = table.set_index("device").loc["cuda"]
    assert cuda["samples_check"] == "insufficient data"
    assert "no samples to target of the baseline cpu at bs 32" in cuda["samples_note"]


def test_the_resolution_is_the_evaluation_spacing_in_samples():
    quality, runs = _tables([("cpu", 64, [AT_2] * 3, 10.0)])
    cell = samples_to_target(quality, runs, TARGET, ["image_cnn"])[("image_cnn", "cpu", 64)]
    assert cell.resolution == 640 and cell.budget == 3200
    assert list(cell.samples) == [1280.0] * 3


def test_publish_appends_the_check_to_time_to_target():
    quality, runs = _tables([("cpu", 32, [AT_2] * 3, 10.0), ("cuda", 32, [AT_4] * 3, 2.0)])
    runs["samples_per_s"] = 100.0
    out = publish(
        {"runs": runs, "quality": quality}, {"image_cnn": ["cpu", "cuda"]}, targets=TARGET
    )
    table = out["time_to_target"]
    assert list(table.columns) == COLUMNS["time_to_target"]
    assert table.set_index("device").loc["cuda", "samples_check"] == "more samples"
    empty = publish({"runs": pd.DataFrame()}, {})["time_to_target"]
    assert empty.empty and list(empty.columns) == COLUMNS["time_to_target"]
