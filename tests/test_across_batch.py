"""Devices at their own batch sizes (trainbench.analysis.stats.across_batch): training
speed compared across batch sizes, labelled so, with the speed tables' intervals, and
apart from the same-batch verdicts."""

from __future__ import annotations

import pandas as pd
import pytest
from stats_helpers import cell
from trainbench.analysis.stats import COLUMNS, publish
from trainbench.analysis.stats.across_batch import across_batch_table
from trainbench.analysis.stats.speed import speedup_table

DEVICES = {"two_tower": ["cpu", "cuda"]}


def _runs(*cells) -> pd.DataFrame:
    return pd.DataFrame([row for c in cells for row in cell("two_tower", *c)])


def test_no_shared_batch_size_gives_a_labelled_row_with_an_interval():
    runs = _runs(("cpu", 64, [100, 104, 98]), ("cuda", 512, [800, 820, 790]))
    out = publish({"runs": runs}, DEVICES)
    table = out["across_batch_sizes"]
    assert list(table.columns) == COLUMNS["across_batch_sizes"] and len(table) == 1
    row = table.iloc[0]
    assert (row["device"], row["batch_size"], row["baseline"], row["baseline_batch_size"]) == (
        "cuda", 512, "cpu", 64,
    )  # fmt: skip
    assert row["comparison"] == "across batch sizes" and row["same_batch_sizes"] == ""
    assert row["median"] == 800 and (row["low"], row["high"]) == (790, 820)
    assert row["baseline_median"] == 100 and row["interval"] == "range of 3 runs"
    assert row["speedup"] == pytest.approx(8.0)
    assert (row["speedup_low"], row["speedup_high"]) == pytest.approx((790 / 104, 820 / 98))
    assert row["speedup_interval"] == "range of 3 vs 3 runs" and row["verdict"] == "faster"
    assert row["summary"] == (
        "across batch sizes, cuda at bs 512 trains 8x the samples/s of cpu at bs 64 "
        "(7.6–8.37x, range of 3 vs 3 runs): faster; not a same-batch verdict"
    )
    # the same-batch verdict stays insufficient data and points to this table
    verdict = out["verdicts"].set_index("device").loc["cuda"]
    assert verdict["status"] == "insufficient data"
    assert "across_batch_sizes compares their training speed" in verdict["first_failing"]


def test_the_intervals_are_the_speed_tables_from_five_repeats_a_bootstrap():
    cpu, cuda = [100, 104, 98, 101, 99], [800, 820, 790, 805, 812]
    row = across_batch_table(_runs(("cpu", 64, cpu), ("cuda", 512, cuda)), "cpu").iloc[0]
    assert "CI" in row["interval"] and "CI" in row["speedup_interval"]
    # the same numbers the speedup table gives the same values at one batch size
    same = speedup_table(_runs(("cpu", 64, cpu), ("cuda", 64, cuda)), "cpu")
    same = same.set_index("device").loc["cuda"]
    for column in ("median", "low", "high", "speedup", "speedup_low", "speedup_high"):
        assert row[column] == pytest.approx(same[column]), column


def test_a_device_sharing_every_size_gets_no_row():
    runs = _runs(("cpu", 64, [100, 104, 98]), ("cuda", 64, [800, 820, 790]))
    assert across_batch_table(runs, "cpu").empty


def test_own_sizes_beside_a_shared_one_pair_with_the_baselines_own():
    # seed report 001: CPU 16, CUDA 32, beside a shared 64
    runs = _runs(
        ("cpu", 16, [50, 51, 49]), ("cpu", 64, [100, 104, 98]),
        ("cuda", 32, [300, 310, 305]), ("cuda", 64, [800, 820, 790]),
    )  # fmt: skip
    table = across_batch_table(runs, "cpu")
    assert len(table) == 1
    row = table.iloc[0]
    assert (row["batch_size"], row["baseline_batch_size"], row["same_batch_sizes"]) == (
        32,
        16,
        "64",
    )
    # the baseline with no size of its own: the device's own size against each of its
    only_shared_base = runs[~((runs["device"] == "cpu") & (runs["batch_size"] == 16))]
    table = across_batch_table(only_shared_base, "cpu")
    assert list(zip(table["batch_size"], table["baseline_batch_size"], strict=True)) == [(32, 64)]


def test_too_few_repeats_or_a_disturbed_run_give_no_verdict_but_still_a_labelled_row():
    runs = _runs(("cpu", 64, [100, 104]), ("cuda", 512, [800, 820, 790]))
    row = across_batch_table(runs, "cpu").iloc[0]
    assert row["verdict"] == "insufficient data" and "cpu bs 64 has 2 ok repeats" in row["reason"]
    assert row["summary"].startswith("across batch sizes, cuda at bs 512 vs cpu at bs 64: ")
    assert row["summary"].endswith("; not a same-batch verdict")
    runs = _runs(("cpu", 64, [100, 104, 98]), ("cuda", 512, [800, 820, 790]))
    runs.loc[(runs["device"] == "cuda") & (runs["rep"] == 1), "disturbed"] = True
    assert across_batch_table(runs, "cpu").iloc[0]["verdict"] == "disturbed"


def test_windows_of_different_schedule_phases_are_named():
    runs = _runs(("cpu", 64, [100, 104, 98]), ("cuda", 512, [800, 820, 790]))
    runs["window_phase"] = ["epochs 2-4: mined"] * 3 + ["epochs 2-4: mined"] * 3
    assert across_batch_table(runs, "cpu").iloc[0]["window_phase"] == "epochs 2-4: mined"
    runs["window_phase"] = ["epochs 2-4: mined"] * 3 + [None] * 3
    text = across_batch_table(runs, "cpu").iloc[0]["window_phase"]
    assert text == "differs: cuda bs 512 whole run, cpu bs 64 epochs 2-4: mined"
