"""Statistics module: bootstrap CIs, speedup verdicts, stability, parity, memory,
crossovers, collapse detection, Markdown output. Small hand-built tables only."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from trainbench import stats
from trainbench.analysis import RUN_COLUMNS

GIB = 1024**3


def run(workload, device, batch_size, rep, status="ok", **values) -> dict:
    """A runs.csv row with every analysis column (None unless given)."""
    row = dict.fromkeys(RUN_COLUMNS)
    row.update(
        workload=workload,
        device=device,
        backend=device,
        batch_size=batch_size,
        rep=rep,
        status=status,
        attempts=1,
        failed_attempts=0,
    )
    row.update(values)
    return row


def runs_frame(rows) -> pd.DataFrame:
    return pd.DataFrame(rows)


def one(frame: pd.DataFrame, **keys) -> pd.Series:
    mask = np.ones(len(frame), dtype=bool)
    for key, value in keys.items():
        mask &= (frame[key] == value).to_numpy()
    assert mask.sum() == 1, f"expected one row for {keys}, got {mask.sum()}"
    return frame[mask].iloc[0]


# ----------------------------------------------------------------------------- bootstrap


def test_bootstrap_median_ci_contains_median_and_narrows_with_more_data():
    rng = np.random.default_rng(1)
    small = rng.normal(100, 10, size=5)
    large = rng.normal(100, 10, size=400)
    m_small, lo_small, hi_small = stats.bootstrap_median_ci(small)
    m_large, lo_large, hi_large = stats.bootstrap_median_ci(large)
    assert m_small == pytest.approx(np.median(small))
    assert lo_small <= m_small <= hi_small
    assert lo_large <= m_large <= hi_large
    assert lo_small < hi_small
    assert (hi_large - lo_large) < 0.5 * (hi_small - lo_small)
    # percentile bootstrap never leaves the sample's range
    assert small.min() <= lo_small and hi_small <= small.max()


def test_bootstrap_median_ci_degenerate_inputs():
    median, low, high = stats.bootstrap_median_ci([42.0])
    assert median == 42.0 and math.isnan(low) and math.isnan(high)
    median, low, high = stats.bootstrap_median_ci([1.0, None, float("nan")])
    assert median == 1.0 and math.isnan(low)
    assert all(math.isnan(v) for v in stats.bootstrap_median_ci([]))
    assert stats.bootstrap_median_ci([3.0, 3.0, 3.0]) == (3.0, 3.0, 3.0)
    # deterministic for a fixed seed
    assert stats.bootstrap_median_ci([1, 2, 3, 4]) == stats.bootstrap_median_ci([1, 2, 3, 4])


def test_bootstrap_ratio_ci_true_ratio_two():
    rng = np.random.default_rng(2)
    num = 200 + rng.normal(0, 6, size=12)
    den = 100 + rng.normal(0, 3, size=12)
    ratio, low, high = stats.bootstrap_ratio_ci(num, den)
    assert ratio == pytest.approx(np.median(num) / np.median(den))
    assert low <= 2.0 <= high
    assert low > 1.0
    assert low <= ratio <= high


def test_bootstrap_ratio_ci_needs_two_values_each_side():
    ratio, low, high = stats.bootstrap_ratio_ci([10.0], [4.0, 6.0])
    assert ratio == pytest.approx(2.0) and math.isnan(low) and math.isnan(high)


# ----------------------------------------------------------------------------- speedup


def _speedup_runs() -> pd.DataFrame:
    base = [100.0, 101.0, 99.0, 100.5, 99.5]
    rows = [run("w", "cpu", 8, i, samples_per_s=v) for i, v in enumerate(base)]
    rows += [run("w", "fast", 8, i, samples_per_s=3 * v) for i, v in enumerate(base)]
    rows += [run("w", "slow", 8, i, samples_per_s=v / 2) for i, v in enumerate(base)]
    rows += [
        run("w", "same", 8, i, samples_per_s=v)
        for i, v in enumerate([80.0, 120.0, 100.0, 90.0, 110.0])
    ]
    rows += [run("w", "single", 8, 0, samples_per_s=500.0)]
    rows += [run("w", "fast", 16, 0, samples_per_s=500.0)]  # baseline never ran bs 16
    rows += [run("w", "fast", 8, 9, status="failed", error_class="oom", samples_per_s=1e9)]
    rows += [run("matmul", "cpu", 1, 0)]  # no throughput: not a training workload
    return runs_frame(rows)


def test_speedup_verdicts():
    table = stats.speedup_table(_speedup_runs(), "cpu")
    assert list(table.columns) == stats.SPEEDUP_COLUMNS
    assert set(table["workload"]) == {"w"}
    verdict = {(r.device, r.batch_size): r.verdict for r in table.itertuples()}
    assert verdict == {
        ("cpu", 8): "baseline",
        ("fast", 8): "faster",
        ("slow", 8): "slower",
        ("same", 8): "no clear speedup",
        ("single", 8): "too few repeats",
        ("fast", 16): "no baseline",
    }
    fast = one(table, device="fast", batch_size=8)
    assert fast["n"] == 5  # the failed repeat is not counted
    assert fast["speedup"] == pytest.approx(3.0)
    assert fast["speedup_ci_low"] > 1
    assert fast["ci_low"] <= fast["median"] <= fast["ci_high"]
    slow = one(table, device="slow", batch_size=8)
    assert slow["speedup"] == pytest.approx(0.5) and slow["speedup_ci_high"] < 1
    same = one(table, device="same", batch_size=8)
    assert same["speedup_ci_low"] <= 1 <= same["speedup_ci_high"]
    single = one(table, device="single", batch_size=8)
    assert single["speedup"] == pytest.approx(5.0) and math.isnan(single["speedup_ci_low"])
    assert one(table, device="cpu", batch_size=8)["speedup"] == 1.0


def test_speedup_table_eval_value_and_empty():
    rows = [
        run("w", "cpu", 8, i, samples_per_s=1.0, eval_samples_per_s=v)
        for i, v in enumerate([10.0, 11.0, 9.0])
    ]
    rows += [
        run("w", "gpu", 8, i, samples_per_s=1.0, eval_samples_per_s=v)
        for i, v in enumerate([40.0, 41.0, 39.0])
    ]
    table = stats.speedup_table(runs_frame(rows), "cpu", value="eval_samples_per_s")
    gpu = one(table, device="gpu")
    assert gpu["speedup"] == pytest.approx(4.0) and gpu["verdict"] == "faster"
    empty = stats.speedup_table(runs_frame([run("m", "cpu", 1, 0)]), "cpu")
    assert empty.empty and list(empty.columns) == stats.SPEEDUP_COLUMNS


# ----------------------------------------------------------------------------- stability


def _stability_inputs():
    rows = [
        run("w", "cpu", 8, 0),
        run("w", "cpu", 8, 1),
        run("w", "cpu", 16, 0),
        run("w", "cpu", 16, 1),
        run("w", "mps", 8, 0, attempts=2, failed_attempts=1),  # ok after a retry
        run("w", "mps", 8, 1, status="failed", error_class="oom", attempts=2, failed_attempts=2),
        run("w", "mps", 8, 2, status="failed", error_class="signal", failed_attempts=1),
        run("w", "retry", 8, 0, attempts=2, failed_attempts=1),  # only a retried ok cell
        run("w", "cuda", 8, 0, status="unavailable", reason="no CUDA"),
        run("w", "cuda", 8, 1, status="unavailable", reason="no CUDA"),
    ]
    epoch_times = {
        ("cpu", 8, 0): [1.0, 1.2],
        ("cpu", 8, 1): [1.1, 1.3],
        ("cpu", 16, 0): [2.0, 2.0],
        ("cpu", 16, 1): [2.0, 2.0],
        ("mps", 8, 0): [1.0, 3.0],
        ("mps", 8, 1): [100.0, 100.0],  # a failed record's epochs must not count
    }
    epochs = pd.DataFrame(
        [
            {
                "workload": "w",
                "device": d,
                "batch_size": b,
                "rep": r,
                "epoch": e + 1,
                "timed_seconds": t,
            }  # fmt: skip
            for (d, b, r), times in epoch_times.items()
            for e, t in enumerate(times)
        ]
    )
    return runs_frame(rows), epochs


def test_stability_counts_failures_retries_and_unavailable():
    runs, epochs = _stability_inputs()
    table = stats.stability_table(runs, epochs)
    assert {"failed_oom", "failed_signal"} <= set(table.columns)
    cpu = one(table, device="cpu")
    assert (cpu["cells"], cpu["attempts"], cpu["ok_cells"], cpu["failed_cells"]) == (4, 4, 4, 0)
    assert cpu["failed_attempts"] == 0 and not cpu["unstable"]
    assert cpu["failed_by_class"] == "" and cpu["failed_oom"] == 0

    mps = one(table, device="mps")
    assert (mps["cells"], mps["attempts"], mps["ok_cells"], mps["failed_cells"]) == (3, 5, 1, 2)
    assert mps["failed_by_class"] == "oom ×1, signal ×1"
    assert mps["failed_oom"] == 1 and mps["failed_signal"] == 1
    assert mps["failed_attempts"] == 4 and mps["unstable"]

    retry = one(table, device="retry")
    assert retry["failed_cells"] == 0 and retry["failed_attempts"] == 1
    assert bool(retry["unstable"]) is True

    cuda = one(table, device="cuda")
    assert cuda["cells"] == 2 and cuda["unavailable_cells"] == 2
    assert pd.isna(cuda["attempts"]) and pd.isna(cuda["ok_cells"]) and pd.isna(cuda["failed_oom"])
    assert math.isnan(cuda["epoch_time_cv"]) and math.isnan(cuda["slowest_to_fastest"])
    assert bool(cuda["unstable"]) is False and cuda["note"] == "unavailable"


def test_stability_epoch_time_spread():
    runs, epochs = _stability_inputs()
    table = stats.stability_table(runs, epochs)
    cpu = one(table, device="cpu")
    # bs 8: times 1.0, 1.2, 1.1, 1.3 -> mean 1.15, sample std sqrt(0.05 / 3); bs 16: cv 0
    cv8 = math.sqrt(0.05 / 3) / 1.15
    assert cpu["epoch_time_cv"] == pytest.approx(cv8 / 2)
    # bs 8: repeat medians 1.1 and 1.2 -> 1.2 / 1.1; bs 16: 1.0; median of the two
    assert cpu["slowest_to_fastest"] == pytest.approx((1.2 / 1.1 + 1.0) / 2)
    mps = one(table, device="mps")
    # only the ok repeat's epochs (1.0, 3.0): mean 2, std sqrt(2)
    assert mps["epoch_time_cv"] == pytest.approx(math.sqrt(2) / 2)
    assert math.isnan(mps["slowest_to_fastest"])  # one repeat: nothing to compare


# ----------------------------------------------------------------------------- per label


def test_per_label_difference_to_baseline():
    rows = [
        {"workload": "t", "device": "cpu", "batch_size": 8, "rep": 0, "label": "x",
         "precision": 0.5, "recall": 0.5, "f1": 0.5, "accuracy": 0.9, "support": 10},
        {"workload": "t", "device": "cpu", "batch_size": 8, "rep": 1, "label": "x",
         "precision": 0.7, "recall": 0.7, "f1": 0.7, "accuracy": 0.9, "support": 10},
        {"workload": "t", "device": "mps", "batch_size": 8, "rep": 0, "label": "x",
         "precision": 0.8, "recall": 0.8, "f1": 0.8, "accuracy": 0.95, "support": 10},
        {"workload": "t", "device": "mps", "batch_size": 8, "rep": 1, "label": "x",
         "precision": 0.9, "recall": 0.6, "f1": 0.9, "accuracy": 0.96, "support": 10},
        {"workload": "t", "device": "mps", "batch_size": 8, "rep": 2, "label": "x",
         "precision": 1.0, "recall": 0.7, "f1": 1.0, "accuracy": 0.97, "support": 10},
        {"workload": "t", "device": "mps", "batch_size": 8, "rep": 0, "label": "y",
         "precision": 0.1, "recall": 0.1, "f1": 0.1, "accuracy": 0.5, "support": 3},
    ]  # fmt: skip
    table = stats.per_label_table(pd.DataFrame(rows), "cpu")
    assert list(table.columns) == stats.PER_LABEL_COLUMNS
    mps_x = one(table, device="mps", label="x")
    assert mps_x["n"] == 3
    assert mps_x["f1"] == pytest.approx(0.9) and mps_x["recall"] == pytest.approx(0.7)
    assert mps_x["accuracy"] == pytest.approx(0.96)
    assert mps_x["baseline_f1"] == pytest.approx(0.6)
    assert mps_x["f1_minus_baseline"] == pytest.approx(0.3)
    assert one(table, device="cpu", label="x")["f1_minus_baseline"] == pytest.approx(0.0)
    assert math.isnan(one(table, device="mps", label="y")["f1_minus_baseline"])


# ----------------------------------------------------------------------------- parity


def _parity_runs() -> pd.DataFrame:
    rows = []
    for i, metric in enumerate([0.90, 0.91, 0.92]):  # median 0.91, std 0.01
        rows.append(run("w", "cpu", 8, i, primary_metric="accuracy", final_metric=metric,
                        final_loss=1.0))  # fmt: skip
    rows += [
        run("w", "good", 8, 0, primary_metric="accuracy", final_metric=0.925, final_loss=1.01),
        run("w", "bad", 8, 0, primary_metric="accuracy", final_metric=0.94, final_loss=1.01),
        run("w", "bad", 8, 1, primary_metric="accuracy", final_metric=0.94, final_loss=1.01),
        run("w", "lossbad", 8, 0, primary_metric="accuracy", final_metric=0.91, final_loss=1.05),
        # baseline with a single repeat at bs 16
        run("w", "cpu", 16, 0, primary_metric="accuracy", final_metric=0.9, final_loss=1.0),
        run("w", "good", 16, 0, primary_metric="accuracy", final_metric=0.9, final_loss=1.0),
        # a tiny baseline spread: the floor sets the band
        run("v", "cpu", 8, 0, primary_metric="accuracy", final_metric=0.800, final_loss=2.0),
        run("v", "cpu", 8, 1, primary_metric="accuracy", final_metric=0.802, final_loss=2.0),
        run("v", "gpu", 8, 0, primary_metric="accuracy", final_metric=0.808, final_loss=2.03),
        run("v", "gpu", 8, 1, status="failed", error_class="oom"),
    ]
    return runs_frame(rows)


def test_parity_pass_and_fail_with_hand_computed_bands():
    table = stats.parity_table(_parity_runs(), "cpu")
    assert list(table.columns) == stats.PARITY_COLUMNS
    assert "cpu" not in set(table["device"])

    good = one(table, workload="w", device="good", batch_size=8)
    assert good["baseline_metric"] == pytest.approx(0.91)
    assert good["baseline_metric_std"] == pytest.approx(0.01)
    assert good["metric_band"] == pytest.approx(0.02)  # max(2 * 0.01, 0.01)
    assert good["metric_diff"] == pytest.approx(0.015)
    assert good["loss_band"] == pytest.approx(0.02)  # std 0 -> max(0, 0.02 * 1.0)
    assert bool(good["metric_pass"]) and bool(good["loss_pass"])
    assert good["parity"] == "pass"
    assert "|0.925 − 0.91| = 0.015 ≤ max(2σ=0.02, 0.01)" in good["rule"]
    assert "2%·1=0.02" in good["rule"]

    bad = one(table, workload="w", device="bad", batch_size=8)
    assert bad["final_metric"] == pytest.approx(0.94) and bad["n"] == 2
    assert not bool(bad["metric_pass"]) and bool(bad["loss_pass"])
    assert bad["parity"] == "fail"
    assert "= 0.03 > max(2σ=0.02, 0.01)" in bad["rule"]

    lossbad = one(table, workload="w", device="lossbad", batch_size=8)
    assert bool(lossbad["metric_pass"]) and not bool(lossbad["loss_pass"])
    assert lossbad["parity"] == "fail"

    floor = one(table, workload="v", device="gpu", batch_size=8)
    assert floor["n"] == 1  # the failed repeat is not a result
    assert floor["baseline_metric_std"] == pytest.approx(0.002 / math.sqrt(2))
    assert floor["metric_band"] == pytest.approx(0.01)  # 2σ ≈ 0.0028 < floor
    assert floor["metric_diff"] == pytest.approx(0.007) and bool(floor["metric_pass"])
    assert floor["loss_band"] == pytest.approx(0.04)  # 2% of 2.0
    assert floor["parity"] == "pass"


def test_parity_insufficient_baseline_repeats_never_pass():
    table = stats.parity_table(_parity_runs(), "cpu")
    row = one(table, workload="w", device="good", batch_size=16)
    assert row["baseline_n"] == 1
    assert row["parity"] == "insufficient repeats"
    assert pd.isna(row["metric_pass"]) and pd.isna(row["loss_pass"])
    assert "≥ 2" in row["rule"]
    # no baseline at all
    runs = runs_frame([run("w", "gpu", 8, 0, final_metric=0.9, final_loss=1.0)])
    assert stats.parity_table(runs, "cpu")["parity"].tolist() == ["insufficient repeats"]


# ----------------------------------------------------------------------------- memory


def test_memory_medians_and_methods():
    rows = [
        run("w", "mps", 8, 0, memory_initial_bytes=10, memory_peak_bytes=100,
            memory_method="driver"),
        run("w", "mps", 8, 1, memory_initial_bytes=30, memory_peak_bytes=300,
            memory_method="driver"),
        run("w", "mps", 8, 2, memory_initial_bytes=20, memory_peak_bytes=200,
            memory_method="current"),
        run("w", "mps", 8, 3, status="failed", error_class="oom", memory_peak_bytes=10**12),
        run("w", "cpu", 8, 0, memory_initial_bytes=1, memory_peak_bytes=2, memory_method="rss"),
    ]  # fmt: skip
    table = stats.memory_table(runs_frame(rows))
    assert list(table.columns) == stats.MEMORY_COLUMNS
    mps = one(table, device="mps")
    assert mps["n"] == 3
    assert mps["memory_initial_bytes"] == 20 and mps["memory_peak_bytes"] == 200
    assert mps["memory_method"] == "current; driver"
    assert math.isnan(mps["memory_limit_bytes"]) and math.isnan(mps["peak_fraction_of_limit"])
    assert one(table, device="cpu")["memory_method"] == "rss"


# ----------------------------------------------------------------------------- crossover


def _matmul(device, times, reps=1):
    return [
        {
            "workload": "matmul",
            "device": device,
            "batch_size": 1,
            "rep": r,
            "n": n,
            "median_s": t * (1 + 0.01 * r),
        }  # fmt: skip
        for n, t in times.items()
        for r in range(reps)
    ]


def test_crossover_matmul_size():
    ns = [16, 32, 64, 128, 256]
    rows = _matmul("cpu", dict.fromkeys(ns, 1.0), reps=3)
    # faster at 16, slower at 32, faster from 64 on: the crossover is 64, not 16
    rows += _matmul("mps", dict(zip(ns, [0.5, 2.0, 0.9, 0.5, 0.4], strict=True)), reps=3)
    # faster at small n, slower at the largest: no crossover
    rows += _matmul("cuda", dict(zip(ns, [0.5, 0.5, 0.5, 0.5, 1.5], strict=True)))
    table = stats.crossover_table(pd.DataFrame(rows), None, "cpu")
    assert list(table.columns) == stats.CROSSOVER_COLUMNS
    mps = one(table, kind="matmul size", device="mps")
    assert mps["crossover"] == 64
    assert mps["compared_at"] == 64
    assert mps["device_value"] == pytest.approx(0.9 * 1.01)  # median of 3 repeats
    assert mps["baseline_value"] == pytest.approx(1.01)
    assert mps["points_compared"] == 5
    assert mps["finding"].startswith("n ≥ 64")
    cuda = one(table, kind="matmul size", device="cuda")
    assert pd.isna(cuda["crossover"])
    assert cuda["finding"].startswith("not within the measured range (n ≤ 256)")
    assert cuda["device_value"] == pytest.approx(1.5)


def test_crossover_training_batch_size():
    rows = []
    for bs in (8, 16, 32):
        rows += [run("w", "cpu", bs, r, samples_per_s=100.0) for r in range(2)]
    for device, values in {
        "late": [50.0, 150.0, 200.0],
        "dip": [150.0, 50.0, 150.0],
        "never": [50.0, 50.0, 50.0],
        "always": [150.0, 150.0, 150.0],
    }.items():
        rows += [
            run("w", device, bs, 0, samples_per_s=v)
            for bs, v in zip((8, 16, 32), values, strict=True)
        ]
    table = stats.crossover_table(None, runs_frame(rows), "cpu")
    assert set(table["kind"]) == {"training batch size"}
    late = one(table, device="late")
    assert late["crossover"] == 16 and late["device_value"] == 150.0
    assert late["baseline_value"] == 100.0
    assert one(table, device="dip")["crossover"] == 32
    never = one(table, device="never")
    assert pd.isna(never["crossover"])
    assert never["finding"].startswith("not within the measured range")
    always = one(table, device="always")
    assert always["crossover"] == 8 and "may lie below" in always["finding"]


# ----------------------------------------------------------------------------- collapse


def _collapse_rows(limit=8 * GIB):
    rows = []
    cases = {
        # device: [(batch size, throughput, peak GiB)]
        "swap": [(8, 100.0, 2.0), (16, 60.0, 7.0)],  # drop + near limit -> flagged
        "dip": [(8, 100.0, 2.0), (16, 60.0, 3.0)],  # drop, memory far from limit
        "full": [(8, 100.0, 6.9), (16, 120.0, 7.5)],  # near limit, no drop
    }
    for device, points in cases.items():
        for bs, throughput, peak in points:
            rows += [
                run(
                    "w",
                    device,
                    bs,
                    r,
                    samples_per_s=throughput * (1 + 0.01 * r),
                    memory_peak_bytes=peak * GIB,
                    memory_limit_bytes=limit,
                )  # fmt: skip
                for r in range(2)
            ]
    return rows


def test_collapse_flagged_only_when_both_conditions_hold():
    table = stats.collapse_table(runs_frame(_collapse_rows()))
    assert list(table.columns) == stats.COLLAPSE_COLUMNS
    assert table["device"].tolist() == ["swap"]
    row = table.iloc[0]
    assert (row["batch_size"], row["smaller_batch_size"]) == (16, 8)
    assert row["throughput"] == pytest.approx(60.3)
    assert row["smaller_throughput"] == pytest.approx(100.5)
    assert row["drop_fraction"] == pytest.approx(1 - 60.3 / 100.5)
    assert row["peak_memory_bytes"] == 7 * GIB and row["memory_limit_bytes"] == 8 * GIB
    assert "40%" in row["evidence"] and "7.00 GiB" in row["evidence"]
    # a higher threshold than the 87.5% used: nothing flagged
    assert stats.collapse_table(runs_frame(_collapse_rows()), threshold=0.9).empty


def test_collapse_needs_a_known_limit():
    rows = _collapse_rows(limit=float("nan"))
    empty = stats.collapse_table(runs_frame(rows))
    assert empty.empty and list(empty.columns) == stats.COLLAPSE_COLUMNS
    no_column = runs_frame(_collapse_rows()).drop(columns="memory_limit_bytes")
    assert stats.collapse_table(no_column).empty


# ----------------------------------------------------------------------------- output


def test_to_markdown_and_write_table(tmp_path):
    frame = pd.DataFrame(
        {
            "device": ["cpu", "mps|x"],
            "samples_per_s": [1167.294, 0.0071234],
            "memory_peak_bytes": [2 * GIB, 1.5 * 1024**2],
            "n": pd.array([3, None], dtype="Int64"),
            "unstable": [True, False],
        }
    )
    md = stats.to_markdown(frame)
    assert "1170" in md and "0.00712" in md
    assert "2.00 GiB" in md and "1.50 MiB" in md
    assert "mps\\|x" in md and "—" in md and "yes" in md
    csv, mdp = tmp_path / "t.csv", tmp_path / "t.md"
    stats.write_table(frame, csv, mdp)
    back = pd.read_csv(csv)
    assert back["samples_per_s"].tolist() == pytest.approx([1167.294, 0.0071234])
    assert mdp.read_text().startswith("| device")
    empty_md = stats.to_markdown(pd.DataFrame(columns=["a", "b"]))
    assert empty_md.startswith("| a | b |")
