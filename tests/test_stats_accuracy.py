"""Parity, per-label, epoch summary, memory, collapse and the training crossover
(ported from the former tests/test_stats.py to the new API)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from stats_helpers import GIB, cell, epochs_for, frame, run
from trainbench.analysis import stats


def one(table: pd.DataFrame, **keys) -> pd.Series:
    mask = np.ones(len(table), dtype=bool)
    for key, value in keys.items():
        mask &= (table[key] == value).to_numpy()
    assert mask.sum() == 1, f"expected one row for {keys}, got {mask.sum()}"
    return table[mask].iloc[0]


# ----------------------------------------------------------------------------- parity
# The parity rule (an equivalence test with per-workload margins) is tested in
# tests/test_parity.py.


# ----------------------------------------------------------------------------- per label


def test_per_label_difference_to_baseline():
    def label(device, rep, name, f1, recall=0.5, accuracy=0.9, support=10):
        return {"workload": "t", "device": device, "batch_size": 8, "rep": rep, "label": name,
                "precision": f1, "recall": recall, "f1": f1, "accuracy": accuracy,
                "support": support}  # fmt: skip

    rows = [
        label("cpu", 0, "x", 0.5), label("cpu", 1, "x", 0.7),
        label("mps", 0, "x", 0.8, 0.8, 0.95), label("mps", 1, "x", 0.9, 0.6, 0.96),
        label("mps", 2, "x", 1.0, 0.7, 0.97), label("mps", 0, "y", 0.1, 0.1, 0.5, 3),
    ]  # fmt: skip
    table = stats.per_label_table(pd.DataFrame(rows), {"t": "cpu"})
    assert list(table.columns) == stats.COLUMNS["per_label"]
    mps_x = one(table, device="mps", label="x")
    assert mps_x["n"] == 3 and mps_x["f1"] == pytest.approx(0.9)
    assert mps_x["recall"] == pytest.approx(0.7) and mps_x["accuracy"] == pytest.approx(0.96)
    assert mps_x["baseline_f1"] == pytest.approx(0.6)
    assert mps_x["f1_minus_baseline"] == pytest.approx(0.3)
    assert one(table, device="cpu", label="x")["f1_minus_baseline"] == pytest.approx(0.0)
    assert math.isnan(one(table, device="mps", label="y")["f1_minus_baseline"])


# ----------------------------------------------------------------------------- epochs


def test_epoch_summary_full_epoch_cold_and_metrics():
    runs = frame(cell("w", "cpu", 8, [100.0, 110.0, 120.0]))
    epochs = epochs_for(runs, n_epochs=3, full_from=2)
    epochs.loc[(epochs["rep"] == 2) & (epochs["epoch"] == 3), "full_epoch"] = False
    epochs["full_epoch"] = epochs["full_epoch"].astype(str)  # as a CSV round trip may leave it
    table = stats.epoch_summary_table(epochs)
    assert list(table.columns) == stats.COLUMNS["epoch_summary"] + [
        "eval_accuracy", "train_accuracy",
    ]  # fmt: skip
    by_epoch = table.set_index("epoch")
    assert by_epoch["full_epoch"].tolist() == [False, True, False]  # full in every repeat only
    assert by_epoch["eval_cold"].tolist() == [True, False, False]
    assert by_epoch.loc[1, "n"] == 3 and by_epoch.loc[2, "train_loss"] == pytest.approx(1.0)
    assert by_epoch.loc[3, "eval_accuracy"] == pytest.approx(0.8)
    assert by_epoch.loc[1, "timed_seconds"] == pytest.approx(1000 / 110)


# ----------------------------------------------------------------------------- memory


def test_memory_medians_and_methods():
    rows = [
        run("w", "mps", 8, 0, memory_initial_bytes=10, memory_peak_bytes=100, memory_method="driver"),
        run("w", "mps", 8, 1, memory_initial_bytes=30, memory_peak_bytes=300, memory_method="driver"),
        run("w", "mps", 8, 2, memory_initial_bytes=20, memory_peak_bytes=200, memory_method="current"),
        run("w", "mps", 8, 3, status="failed", error_class="oom", memory_peak_bytes=10**12),
        run("w", "cpu", 8, 0, memory_initial_bytes=1, memory_peak_bytes=2, memory_method="rss"),
    ]  # fmt: skip
    table = stats.memory_table(frame(rows))
    assert list(table.columns) == stats.COLUMNS["memory"]
    mps = one(table, device="mps")
    assert mps["n"] == 3 and mps["memory_initial_bytes"] == 20 and mps["memory_peak_bytes"] == 200
    assert mps["memory_method"] == "current; driver"
    assert math.isnan(mps["memory_limit_bytes"]) and math.isnan(mps["peak_fraction_of_limit"])
    assert one(table, device="cpu")["memory_method"] == "rss"


# ----------------------------------------------------------------------------- collapse


def _collapse_rows(limit=8 * GIB):
    cases = {
        "swap": [(8, 100.0, 2.0), (16, 60.0, 7.0)],  # drop + near the limit -> flagged
        "dip": [(8, 100.0, 2.0), (16, 60.0, 3.0)],  # drop, memory far from the limit
        "full": [(8, 100.0, 6.9), (16, 120.0, 7.5)],  # near the limit, no drop
    }
    return [
        run(
            "w",
            device,
            bs,
            r,
            samples_per_s=speed * (1 + 0.01 * r),
            memory_peak_bytes=peak * GIB,
            memory_limit_bytes=limit,
        )  # fmt: skip
        for device, points in cases.items()
        for bs, speed, peak in points
        for r in range(2)
    ]


def test_collapse_flagged_only_when_both_conditions_hold():
    table = stats.collapse_table(frame(_collapse_rows()))
    assert list(table.columns) == stats.COLUMNS["collapse"]
    assert table["device"].tolist() == ["swap"]
    row = table.iloc[0]
    assert (row["batch_size"], row["smaller_batch_size"]) == (16, 8)
    assert row["throughput"] == pytest.approx(60.3)
    assert row["smaller_throughput"] == pytest.approx(100.5)
    assert row["drop_fraction"] == pytest.approx(1 - 60.3 / 100.5)
    assert row["peak_memory_bytes"] == 7 * GIB and row["memory_limit_bytes"] == 8 * GIB
    assert "40%" in row["evidence"] and "7.00 GiB" in row["evidence"]
    assert stats.collapse_table(frame(_collapse_rows()), threshold=0.9).empty


def test_collapse_needs_a_known_limit():
    empty = stats.collapse_table(frame(_collapse_rows(limit=float("nan"))))
    assert empty.empty and list(empty.columns) == stats.COLUMNS["collapse"]
    no_column = frame(_collapse_rows()).drop(columns="memory_limit_bytes")
    assert stats.collapse_table(no_column).empty


# ----------------------------------------------------------------------------- crossover


def test_training_crossover_from_interval_verdicts():
    rows = []
    for bs in (8, 16, 32):
        rows += cell("w", "cpu", bs, [100.0, 101.0, 99.0])
    speeds = {
        "late": [50.0, 150.0, 200.0],
        "dip": [150.0, 50.0, 150.0],
        "always": [150.0, 150.0, 150.0],
        "close": [150.0, 150.0, 100.5],  # at 32 the medians differ, the ranges overlap
    }
    for device, values in speeds.items():
        for bs, v in zip((8, 16, 32), values, strict=True):
            rows += cell("w", device, bs, [v, v * 1.005, v * 0.995])
    out = stats.publish({"runs": frame(rows)}, {"w": ["cpu"]})
    table = out["crossover"]
    assert set(table["kind"]) == {"training batch size"} and table["batch_size"].isna().all()
    late = one(table, device="late")
    assert late["crossover"] == 16 and late["device_value"] == 150.0
    assert late["baseline_value"] == 100.0 and late["verdict_at"] == "faster"
    assert one(table, device="dip")["crossover"] == 32
    always = one(table, device="always")
    assert always["crossover"] == 8 and "may lie below" in always["finding"]
    close = one(table, device="close")
    assert pd.isna(close["crossover"]) and close["verdict_at"] == "no clear difference"
    assert close["finding"].startswith(
        "not within the measured range (batch size ≤ 32; at 32: no clear difference"
    )
