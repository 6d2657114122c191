"""Time to a quality target (trainbench.analysis.stats.targets): the first evaluation
that meets the target, censored repeats kept as "more than", verdicts from intervals,
and each device at its best setting across batch sizes."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from stats_helpers import run
from trainbench.analysis.stats.best_setting import best_setting_table
from trainbench.analysis.stats.targets import quality_curve_table, time_to_target_table
from trainbench.config.targets import target_problems

TARGET = {"image_cnn": {"metric": "accuracy", "value": 0.8}}


def _curve(device, batch_size, rep, accuracies, seconds_per_eval, wall_offset=2.0):
    """One record's quality rows: an evaluation every ``seconds_per_eval`` of training."""
    record = f"runs/image_cnn/{device}/bs{batch_size}/rep{rep}/metrics.json"
    return [
        {
            "workload": "image_cnn", "device": device, "batch_size": batch_size, "rep": rep,
            "point": i, "epoch": i + 1, "epoch_end": True, "steps": 10 * (i + 1),
            "samples": 10 * (i + 1) * batch_size, "train_seconds": seconds_per_eval * (i + 1),
            "wall_seconds": wall_offset + 1.5 * seconds_per_eval * (i + 1), "eval_seconds": 0.1,
            "train_joules": None, "energy_window_seconds": seconds_per_eval * (i + 1),
            "energy_min_seconds": 1.0, "eval_every": "epochs 1", "eval_accuracy": acc,
            "record": record,
        }
        for i, acc in enumerate(accuracies)
    ]  # fmt: skip


def _tables(cells):
    """cells: (device, batch_size, [per-repeat accuracies], seconds per evaluation)."""
    quality, runs = [], []
    for device, batch_size, repeats, seconds in cells:
        for rep, accuracies in enumerate(repeats):
            rows = _curve(device, batch_size, rep, accuracies, seconds)
            quality += rows
            runs.append(run("image_cnn", device, batch_size, rep, record=rows[0]["record"]))
    return pd.DataFrame(quality), pd.DataFrame(runs)


REACHES_AT_2 = [[0.5, 0.85, 0.9]] * 3


def test_first_evaluation_meeting_the_target_and_a_sooner_verdict():
    quality, runs = _tables([("cpu", 32, REACHES_AT_2, 10.0), ("cuda", 32, REACHES_AT_2, 2.0)])
    table = time_to_target_table(quality, runs, {"image_cnn": "cpu"}, TARGET, ["image_cnn"])
    cpu = table[table["device"] == "cpu"].iloc[0]
    cuda = table[table["device"] == "cuda"].iloc[0]
    assert cpu["verdict"] == "baseline"
    assert cpu["median_s"] == pytest.approx(20.0)  # the 2nd evaluation, 2 x 10 s
    assert cpu["samples_median"] == 20 * 32 and cpu["steps_median"] == 20
    assert cpu["wall_median_s"] == pytest.approx(2.0 + 30.0)
    assert cuda["median_s"] == pytest.approx(4.0)
    assert cuda["speedup"] == pytest.approx(5.0)
    assert cuda["verdict"] == "sooner" and cuda["reached"] == 3
    assert cuda["direction"] == "≥" and cuda["metric"] == "accuracy"
    assert "range of 3 vs 3" in cuda["speedup_interval"]


def test_a_repeat_that_never_reaches_is_censored_not_dropped():
    never = [0.5, 0.6, 0.7]
    quality, runs = _tables(
        [("cpu", 32, REACHES_AT_2, 10.0), ("cuda", 32, [REACHES_AT_2[0], never, never], 2.0)]
    )
    table = time_to_target_table(quality, runs, {"image_cnn": "cpu"}, TARGET, ["image_cnn"])
    cuda = table[table["device"] == "cuda"].iloc[0]
    assert cuda["repeats"] == 3 and cuda["reached"] == 1
    assert cuda["verdict"] == "not reached"
    assert math.isinf(cuda["median_s"])
    assert cuda["censored_after_s"] == pytest.approx(6.0)
    assert "1 of 3" in cuda["reason"]
    assert np.isnan(cuda["speedup"])


def test_one_censored_repeat_of_three_keeps_the_median_and_opens_the_interval():
    never = [0.5, 0.6, 0.7]
    quality, runs = _tables(
        [("cpu", 32, REACHES_AT_2, 10.0), ("cuda", 32, [*REACHES_AT_2[:2], never], 2.0)]
    )
    table = time_to_target_table(quality, runs, {"image_cnn": "cpu"}, TARGET, ["image_cnn"])
    cuda = table[table["device"] == "cuda"].iloc[0]
    assert cuda["median_s"] == pytest.approx(4.0)
    assert math.isinf(cuda["high"]) and "1 not reaching" in cuda["interval"]
    # baseline 20 s in every repeat; this side 4, 4 and "more than 6": 0 .. 5x sooner
    assert cuda["speedup_low"] == 0.0 and cuda["speedup_high"] == pytest.approx(5.0)
    assert cuda["verdict"] == "no clear difference"


def test_lower_is_better_metrics_and_too_few_repeats():
    quality, runs = _tables([("cpu", 32, REACHES_AT_2[:2], 10.0), ("cuda", 32, REACHES_AT_2, 2.0)])
    quality["eval_loss"] = 1 - quality["eval_accuracy"]
    target = {"image_cnn": {"metric": "loss", "value": 0.2}}
    table = time_to_target_table(quality, runs, {"image_cnn": "cpu"}, target, ["image_cnn"])
    cuda = table[table["device"] == "cuda"].iloc[0]
    assert cuda["direction"] == "≤" and cuda["median_s"] == pytest.approx(4.0)
    assert cuda["verdict"] == "insufficient data" and "2 ok repeats" in cuda["reason"]


def test_no_target_and_older_records_say_so():
    quality, runs = _tables([("cpu", 32, REACHES_AT_2, 10.0)])
    table = time_to_target_table(quality, runs, {"image_cnn": "cpu"}, {}, ["image_cnn"])
    assert table.iloc[0]["verdict"] == "insufficient data"
    assert "no target" in table.iloc[0]["reason"]
    table = time_to_target_table(None, runs, {"image_cnn": "cpu"}, TARGET, ["image_cnn"])
    assert "no quality curve" in table.iloc[0]["reason"]


def test_best_setting_compares_devices_across_batch_sizes():
    slow_big = [[0.5, 0.6, 0.85]] * 3  # reaches at the 3rd evaluation
    quality, runs = _tables([
        ("cpu", 16, REACHES_AT_2, 10.0), ("cpu", 64, slow_big, 4.0),   # 20 s vs 12 s
        ("cuda", 32, REACHES_AT_2, 1.0), ("cuda", 128, slow_big, 1.0),  # 2 s vs 3 s
    ])  # fmt: skip
    table = best_setting_table(quality, runs, {"image_cnn": "cpu"}, TARGET, ["image_cnn"])
    assert list(table["device"]) == ["cpu", "cuda"]  # one row a device, the baseline first
    cpu = table[table["device"] == "cpu"].iloc[0]
    cuda = table[table["device"] == "cuda"].iloc[0]
    assert (cpu["batch_size"], cpu["median_s"], cpu["verdict"]) == (64, 12.0, "baseline")
    assert (cuda["batch_size"], cuda["median_s"]) == (32, 2.0)
    assert cuda["candidates"] == 2 and cuda["backend"] == "cuda"
    assert cuda["speedup"] == pytest.approx(6.0) and cuda["verdict"] == "sooner"
    assert "cuda reaches accuracy ≥ 0.8 in 2 s of training, 6x sooner than cpu" in cuda["summary"]
    assert "cuda bs 32; cpu bs 64" in cuda["summary"]
    assert cpu["summary"].startswith("cpu (the baseline) reaches accuracy ≥ 0.8 in 12 s")
    # Per-device batch sizes share none: the same-batch table has no baseline to compare.
    same = time_to_target_table(quality, runs, {"image_cnn": "cpu"}, TARGET, ["image_cnn"])
    assert set(same.loc[same["device"] == "cuda", "verdict"]) == {"insufficient data"}


def test_quality_curve_is_the_median_and_range_over_repeats():
    quality, runs = _tables([("cpu", 32, [[0.5, 0.8], [0.7, 0.9], [0.6, 0.85]], 10.0)])
    curve = quality_curve_table(quality, runs, TARGET, ["image_cnn"])
    first = curve[curve["point"] == 0].iloc[0]
    assert (first["value"], first["value_min"], first["value_max"]) == (0.6, 0.5, 0.7)
    assert first["repeats"] == 3 and first["train_seconds"] == 10.0 and first["target"] == 0.8


@pytest.mark.parametrize(
    ("target", "words"),
    [
        ({"metric": "f1", "value": 0.5}, "does not report"),
        ({"metric": "accuracy", "value": 1.5}, "outside accuracy's range [0, 1]"),
        ({"value": -0.1}, "outside accuracy's range"),
        ({"metric": "loss", "value": -1}, "outside loss's range [0, ∞]"),
    ],
)
def test_a_bad_target_is_refused_with_the_key_and_the_fix(target, words):
    config = {"workloads": {"image_cnn": {"target": target}}}
    (problem,) = target_problems(config)
    assert "`workloads.image_cnn.target" in problem and words in problem and "Fix:" in problem


def test_good_targets_pass():
    config = {"workloads": {
        "image_cnn": {"target": {"value": 0.6}},
        "two_tower": {"target": {"metric": "recall@10", "value": 0.2}},
        "mine": {"entry": "m:b", "target": {"metric": "anything", "value": 3}},
    }}  # fmt: skip
    assert target_problems(config) == []


def test_per_device_batch_sizes_expand_and_fall_back_to_the_device_default():
    from trainbench.config.matrix import DeviceVariant, all_batch_sizes, batch_sizes_for

    config = {
        "workloads": {"image_cnn": {"batch_sizes": {"cpu": [16], "cuda": [32, 256]}}},
        "device_settings": {"mps": {"default_batch_size": 64}},
    }
    sizes = {
        b: batch_sizes_for(config, "image_cnn", DeviceVariant(b, b)) for b in ("cpu", "cuda", "mps")
    }
    assert sizes == {"cpu": [16], "cuda": [32, 256], "mps": [64]}
    assert all_batch_sizes(config["workloads"]["image_cnn"]) == [16, 32, 256]


def test_a_device_is_judged_only_at_batch_sizes_its_baseline_ran():
    from stats_helpers import cell
    from trainbench.analysis.stats import publish

    runs = pd.DataFrame(
        cell("image_cnn", "cpu", 16, [100, 101, 102])
        + cell("image_cnn", "cpu", 64, [300, 301, 302])
        + cell("image_cnn", "cuda", 32, [900, 901, 902])
        + cell("image_cnn", "cuda", 64, [2000, 2010, 2020])
    )
    verdicts = publish({"runs": runs}, {"image_cnn": ["cpu", "cuda"]})["verdicts"]
    cuda = verdicts[verdicts["device"] == "cuda"].iloc[0]
    # bs 64 is shared and decides; bs 32 (cuda's own) does not block the verdict.
    assert "no run of cpu at bs 32" not in cuda["first_failing"]
    assert "32 ran on cuda alone" in cuda["text"]
    only_own = runs[runs["batch_size"] != 64]
    verdicts = publish({"runs": only_own}, {"image_cnn": ["cpu", "cuda"]})["verdicts"]
    cuda = verdicts[verdicts["device"] == "cuda"].iloc[0]
    assert cuda["status"] == "insufficient data"
    assert "no batch size shared with the baseline cpu" in cuda["first_failing"]


def test_a_disturbed_repeat_makes_the_best_setting_comparison_disturbed():
    quality, runs = _tables([("cpu", 32, REACHES_AT_2, 10.0), ("cuda", 32, REACHES_AT_2, 2.0)])
    runs.loc[(runs["device"] == "cuda") & (runs["rep"] == 1), "disturbed"] = True
    best = best_setting_table(quality, runs, {"image_cnn": "cpu"}, TARGET, ["image_cnn"])
    cuda = best[best["device"] == "cuda"].iloc[0]
    assert cuda["verdict"] == "disturbed" and "cuda rep 1" in cuda["reason"]
    same = time_to_target_table(quality, runs, {"image_cnn": "cpu"}, TARGET, ["image_cnn"])
    assert same.loc[same["device"] == "cuda", "verdict"].item() == "disturbed"


def test_each_cell_states_its_own_cadence():
    # {passes: 8} resolves to a step cadence per batch size: each row states its own.
    quality, runs = _tables([("cpu", 32, REACHES_AT_2, 10.0), ("cpu", 128, REACHES_AT_2, 4.0)])
    quality.loc[quality["batch_size"] == 32, "eval_every"] = "steps 16"
    quality.loc[quality["batch_size"] == 128, "eval_every"] = "steps 4"
    table = time_to_target_table(quality, runs, {"image_cnn": "cpu"}, TARGET, ["image_cnn"])
    assert dict(zip(table["batch_size"], table["eval_every"], strict=True)) == {
        32: "steps 16",
        128: "steps 4",
    }
