"""The published speed, quality, repeat and verdict tables, from small synthetic
record tables (tests/stats_helpers.py)."""

from __future__ import annotations

import io
import logging
import math
import sys

import numpy as np
import pandas as pd
import pytest
from stats_helpers import cell, epochs_for, frame, matmul_rows, run
from trainbench.analysis import stats, tables
from trainbench.analysis.stats import frames, quality, repeats, speed, verdicts

CPU3 = [100.0, 101.0, 99.0]


def one(table: pd.DataFrame, **keys) -> pd.Series:
    mask = np.ones(len(table), dtype=bool)
    for key, value in keys.items():
        mask &= (table[key] == value).to_numpy()
    assert mask.sum() == 1, f"expected one row for {keys}, got {mask.sum()}"
    return table[mask].iloc[0]


def speedup(rows, devices=("cpu", "cuda"), baseline=None, **tables) -> pd.DataFrame:
    runs = frame(rows)
    return stats.publish({"runs": runs, **tables}, {"w": list(devices)}, baseline)


# ----------------------------------------------------------------------------- speedup


def test_complete_separation_at_three_vs_three_is_faster():
    out = speedup(cell("w", "cpu", 8, CPU3) + cell("w", "cuda", 8, [295.0, 310.0, 300.0]))
    row = one(out["speedup"], device="cuda")
    assert row["verdict"] == "faster" and row["baseline"] == "cpu"
    assert (
        row["speedup_interval"] == "range of 3 vs 3 runs" and row["interval"] == "range of 3 runs"
    )
    assert row["speedup_low"] == pytest.approx(295 / 101)
    assert row["speedup_high"] == pytest.approx(310 / 99)
    assert row["reason"] == "every cuda run beat every cpu run: 2.92–3.13x (range of 3 vs 3 runs)"
    assert row["halfwidth"] == pytest.approx((310 / 99 - 295 / 101) / 2 / (300 / 100))
    base = one(out["speedup"], device="cpu")
    assert base["verdict"] == "baseline" and base["speedup"] == 1.0
    assert math.isnan(base["speedup_low"]) and math.isnan(base["halfwidth"])


def test_overlap_slower_and_two_repeats():
    rows = cell("w", "cpu", 8, CPU3) + cell("w", "same", 8, [95.0, 105.0, 100.0])
    rows += cell("w", "slow", 8, [50.0, 51.0, 49.0]) + cell("w", "two", 8, [300.0, 310.0])
    table = speedup(rows, devices=("cpu",))["speedup"]
    assert one(table, device="same")["verdict"] == "no clear difference"
    assert one(table, device="same")["reason"].startswith("same and cpu runs overlap: 0.941–1.06x")
    assert one(table, device="slow")["verdict"] == "slower"
    two = one(table, device="two")
    assert two["verdict"] == "insufficient data"
    assert two["reason"] == "two has 2 ok repeats; a verdict needs 3"


def test_ci_from_five_repeats_and_bimodal_cells():
    rows = cell("w", "cpu", 8, [100, 101, 99, 100.5, 99.5])
    rows += cell("w", "cuda", 8, [300, 303, 297, 301.5, 298.5])
    rows += cell("w", "mps", 8, [100, 102, 150])
    table = speedup(rows, devices=("cpu", "cuda", "mps"))["speedup"]
    cuda = one(table, device="cuda")
    assert cuda["verdict"] == "faster" and cuda["interval"] in {"95% BCa CI", "95% percentile CI"}
    assert cuda["speedup_interval"] in {"95% BCa CI", "95% percentile CI"}
    assert cuda["reason"].startswith("3x, 95% ")
    assert bool(one(table, device="mps")["bimodal"]) and not bool(cuda["bimodal"])


@pytest.mark.parametrize(
    ("flags", "verdict", "reason"),
    [
        ({"disturbed": True, "other_cpu_cores": 1.02}, "disturbed",
         "cpu rep 1 was disturbed (other processes used 1.02 cores)"),
        ({"short_window": True, "window_seconds": 0.066, "window_steps": 12}, "insufficient data",
         "short window: cpu rep 1 measured 0.066 s over 12 steps"),
        ({"steady_state": "no steady state"}, "insufficient data", "no steady state: cpu rep 1"),
    ],
)  # fmt: skip
def test_disturbed_short_window_and_no_steady_state_turn_the_verdict(flags, verdict, reason):
    rows = cell("w", "cpu", 8, CPU3) + cell("w", "cuda", 8, [300.0, 310.0, 305.0])
    rows[1].update(flags)  # cpu rep 1: the baseline side turns the device's verdict
    table = speedup(rows)["speedup"]
    cuda = one(table, device="cuda")
    assert (cuda["verdict"], cuda["reason"]) == (verdict, reason)
    cpu = one(table, device="cpu")
    assert cpu["verdict"] == "baseline"
    counts = (cpu["disturbed_runs"], cpu["short_window_runs"], cpu["no_steady_state_runs"])
    assert sum(counts) == 1


def test_config_without_cpu_uses_the_first_listed_device():
    rows = cell("w", "mps", 8, CPU3) + cell("w", "cuda", 8, [300.0, 310.0, 305.0])
    out = speedup(rows, devices=("mps", "cuda"))
    table = out["speedup"]
    assert set(table["baseline"]) == {"mps"}
    assert one(table, device="cuda")["verdict"] == "faster"
    assert "no baseline" not in " ".join(table["reason"])
    # hardware-suffixed labels match the configured id; a listed id without ok runs is skipped
    rows = cell("w", "cuda@H100", 8, CPU3) + cell("w", "cpu@Xeon", 8, CPU3)
    rows += [run("w", "mps", 8, 0, status="unavailable", reason="no MPS")]
    assert frames.choose_baselines(frame(rows), {"w": ["mps", "cpu", "cuda"]}) == {"w": "cpu@Xeon"}
    assert frames.choose_baselines(frame(rows), {}, "cuda") == {"w": "cuda@H100"}


def test_failed_and_unavailable_devices():
    rows = cell("w", "cpu", 8, CPU3)
    rows += [run("w", "mps", 8, r, status="failed", error_class="oom") for r in range(2)]
    rows += [run("w", "cuda", 8, r, status="unavailable", reason="no CUDA") for r in range(3)]
    table = speedup(rows, devices=("cpu", "mps", "cuda"))["speedup"]
    assert set(table["device"]) == {"cpu", "mps"}  # all-unavailable: no row
    mps = one(table, device="mps")
    assert mps["verdict"] == "insufficient data" and mps["n"] == 0
    assert mps["reason"] == "no ok run of mps (2 failed: oom)"


def test_eval_speed_uses_eval_flags_and_ignores_training_steady_state():
    rows = cell("w", "cpu", 8, CPU3, eval_samples_per_s=1000.0)
    rows += cell("w", "cuda", 8, CPU3, eval_samples_per_s=4000.0, steady_state="no steady state")
    out = speedup(rows)
    assert one(out["eval_speed"], device="cuda")["verdict"] == "faster"
    assert one(out["speedup"], device="cuda")["verdict"] == "insufficient data"
    rows[4]["eval_short_window"] = "True"
    rows[4]["eval_warm_seconds"] = 0.3
    row = one(speedup(rows)["eval_speed"], device="cuda")
    assert row["verdict"] == "insufficient data" and row["reason"].startswith(
        "short window: cuda rep 1"
    )


def test_csv_round_trip_gives_the_same_tables():
    rows = cell("w", "cpu", 8, CPU3) + cell("w", "cuda", 8, [300.0, 310.0, 305.0], disturbed=False)
    rows += [run("w", "cuda", 16, 0, status="failed", error_class="oom")]
    runs = frame(rows)
    back = pd.read_csv(io.StringIO(runs.to_csv(index=False)))
    back = back.astype({"disturbed": str, "short_window": str, "batch_size": float, "rep": float})
    a = stats.publish({"runs": runs}, {"w": ["cpu", "cuda"]})
    b = stats.publish({"runs": back}, {"w": ["cpu", "cuda"]})
    for name in ("speedup", "verdicts", "stability", "attention"):
        pd.testing.assert_frame_equal(a[name], b[name], check_dtype=False)


def test_tables_computed_side_by_side_are_the_same_tables():
    """publish(workers=2) (the statistics job: speed and memory tables in a forked
    process) gives every table as one process does, bootstraps included."""
    five = [100.0, 104.0, 98.0, 101.0, 103.0]
    rows = cell("w", "cpu", 8, five, memory_peak_bytes=2 * 1024**3)
    rows += cell("w", "cuda", 8, [3 * x for x in five], final_metric=0.9, final_loss=1.0)
    rows += cell("w", "cuda", 16, [300.0, 310.0, 305.0])
    rows += [run("w", "mps", 8, 0, status="failed", error_class="oom")]
    runs = frame(rows)
    one_process = stats.publish({"runs": runs}, {"w": ["cpu", "cuda", "mps"]})
    assert one_process["speedup"]["interval"].str.contains("BCa|percentile").any()
    side_by_side = stats.publish({"runs": runs}, {"w": ["cpu", "cuda", "mps"]}, workers=2)
    assert tuple(side_by_side) == stats.PUBLISHED_TABLES
    for name, table in one_process.items():
        pd.testing.assert_frame_equal(table, side_by_side[name], obj=name)


def test_on_macos_the_tables_are_computed_in_one_process_never_a_forked_one(monkeypatch, caplog):
    """On macOS (patched here) fork is unsafe and a spawned side process would import
    more than it saves: publish(workers=2) computes every table in this process, the
    same tables, bootstraps included."""
    five = [100.0, 104.0, 98.0, 101.0, 103.0]
    rows = cell("w", "cpu", 8, five, memory_peak_bytes=2 * 1024**3)
    rows += cell("w", "cuda", 8, [3 * x for x in five], final_metric=0.9, final_loss=1.0)
    runs = frame(rows)
    one_process = stats.publish({"runs": runs}, {"w": ["cpu", "cuda"]})

    def no_pool(*args, **kwargs):
        raise AssertionError("a worker process was started on macOS")

    monkeypatch.setattr(stats, "ProcessPoolExecutor", no_pool)
    monkeypatch.setattr(sys, "platform", "darwin")
    caplog.set_level(logging.INFO, logger="trainbench.analysis.worker_processes")
    on_macos = stats.publish({"runs": runs}, {"w": ["cpu", "cuda"]}, workers=2)
    assert "statistics: one process (darwin" in caplog.text
    for name, table in one_process.items():
        pd.testing.assert_frame_equal(table, on_macos[name], obj=name)


def test_empty_inputs_give_every_table_with_its_columns():
    for inputs in ({}, {"runs": pd.DataFrame(), "epochs": pd.DataFrame()}):
        out = stats.publish(inputs, {})
        assert tuple(out) == stats.PUBLISHED_TABLES
        for name, table in out.items():
            assert table.empty and list(table.columns) == stats.COLUMNS[name], name


def test_published_tables_render_as_markdown_and_csv(tmp_path):
    rows = cell("w", "cpu", 8, CPU3, memory_peak_bytes=2 * 1024**3)
    rows += [run("w", "mps|x", 8, 0, status="failed", error_class="oom")]
    out = stats.publish({"runs": frame(rows)}, {"w": ["cpu"]})
    md = tables.to_markdown(out["memory"])
    assert md.startswith("| workload") and "2.00 GiB" in md and "—" in md
    assert "mps\\|x" in tables.to_markdown(out["attention"])
    assert "yes" in tables.to_markdown(out["verification"])
    tables.write_table(out["speedup"], tmp_path / "s.csv", tmp_path / "s.md")
    back = tables.read_table(tmp_path / "s.csv")
    assert list(back.columns) == stats.COLUMNS["speedup"]
    assert back["median"].tolist() == pytest.approx(out["speedup"]["median"].tolist(), nan_ok=True)
    assert tables.to_markdown(out["collapse"]).startswith("| workload | device |")


# ----------------------------------------------------------------------------- quality


def test_bimodal_and_noisy_detection():
    assert quality.is_bimodal([100, 102, 150])
    assert not quality.is_bimodal([100, 101, 102]) and not quality.is_bimodal([100, 150])
    assert not quality.is_bimodal([100, 120, 144])  # even steps below 1.25
    assert not quality.is_bimodal([100, 130, 169, 219.7])  # no gap beats the groups' spread
    rows = cell("w", "cpu", 8, [100, 102, 150]) + cell("w", "cuda", 8, [80, 95, 112, 130])
    rows += cell("w", "mps", 8, [100, 101, 102])
    table = stats.stability_table(frame(rows))
    cpu, cuda, mps = (one(table, device=d) for d in ("cpu", "cuda", "mps"))
    assert bool(cpu["bimodal"]) and bool(cpu["noisy"]) and cpu["status"] == "noisy"
    assert "bimodal at bs 8: 100, 102 | 150 samples/s" in cpu["note"]
    assert not bool(cuda["bimodal"]) and bool(cuda["noisy"])
    assert cuda["between_run_cv"] == pytest.approx(np.std([80, 95, 112, 130], ddof=1) / 104.25)
    assert "between-run CV 20.7% at bs 8" in cuda["note"]
    assert not bool(mps["noisy"]) and mps["status"] == "steady"
    assert mps["slowest_to_fastest"] == pytest.approx(1.02)


def test_stability_counts_failures_retries_unavailable_and_epoch_cv():
    rows = cell("w", "cpu", 8, [100.0, 100.0]) + cell("w", "cpu", 16, [200.0, 200.0])
    rows += [
        run("w", "mps", 8, 0, samples_per_s=50.0, attempts=2, failed_attempts=1),
        run("w", "mps", 8, 1, status="failed", error_class="oom", attempts=2, failed_attempts=2),
        run("w", "mps", 8, 2, status="failed", error_class="signal", failed_attempts=1),
        run("w", "cuda", 8, 0, status="unavailable", reason="no CUDA"),
        run("w", "cuda", 8, 1, status="unavailable", reason="no CUDA"),
    ]
    runs = frame(rows)
    epochs = epochs_for(runs, n_epochs=3, full_from=2)
    epochs.loc[(epochs["device"] == "cpu") & (epochs["batch_size"] == 8), "timed_seconds"] = [
        9.0, 1.0, 1.2, 9.0, 1.1, 1.3,
    ]  # epoch 1 is not full: left out  # fmt: skip
    table = stats.stability_table(runs, epochs)
    assert {"failed_oom", "failed_signal"} <= set(table.columns)
    cpu = one(table, device="cpu")
    assert (cpu["cells"], cpu["ok_cells"], cpu["failed_cells"], cpu["attempts"]) == (4, 4, 0, 4)
    assert not cpu["crashed"] and cpu["status"] == "steady"
    # bs 8: 1.0, 1.2, 1.1, 1.3 -> cv; bs 16: constant -> 0; the median of the two
    assert cpu["epoch_time_cv"] == pytest.approx(math.sqrt(0.05 / 3) / 1.15 / 2)
    mps = one(table, device="mps")
    assert (mps["cells"], mps["attempts"], mps["failed_attempts"]) == (3, 5, 4)
    assert mps["failed_by_class"] == "oom ×1, signal ×1" and mps["failed_oom"] == 1
    assert mps["crashed"] and mps["status"] == "crashed"
    assert mps["note"].startswith("2 of 3 cells failed (oom ×1, signal ×1)")
    assert math.isnan(mps["between_run_cv"]) and mps["epoch_time_cv"] == 0  # one ok repeat
    cuda = one(table, device="cuda")
    assert cuda["status"] == "unavailable" and cuda["unavailable_cells"] == 2
    assert cuda["note"] == "unavailable: no CUDA" and not cuda["crashed"]


def test_warnings_per_record_and_per_device_in_kind_order():
    rows = cell("w", "cpu", 8, [100, 102, 150])
    rows[0].update(disturbed=True, other_cpu_cores=1.5, load_avg_start=2.0, load_avg_end=2.5)
    rows[1].update(steady_state="slowdown", steady_start_step=120)
    rows[2].update(short_window=True, window_seconds=0.5, window_steps=12)
    table = stats.publish({"runs": frame(rows)}, {"w": ["cpu"]})["warnings"]
    assert table["kind"].tolist() == ["disturbed", "short window", "slowdown", "noisy", "bimodal"]
    assert table["detail"][0] == "other processes used 1.5 cores; load average 2 → 2.5"
    assert table["detail"][1] == "window 0.5 s over 12 steps"
    assert pd.isna(table["rep"][3]) and table["rep"][0] == 0


def test_a_slowdown_names_the_epoch_it_started_in_and_what_can_change_there():
    """A slowdown at an epoch's first step is not blamed on heat: two_tower's mining
    schedule makes its later epochs slower by design (2-4x on the CPU)."""
    rows = cell("w", "cpu", 8, [100, 102, 101])
    where = dict(steady_state="slowdown", steady_start_step=32, window_steps=64, epochs=3)
    rows[0].update(where, wall_extension_seconds=0.0, mining_seconds=0.5)
    rows[1].update(where, wall_extension_seconds=0.0, mining_seconds=0.0)
    rows[2].update(where, wall_extension_seconds=1.2)  # extended: epochs unknown
    table = stats.publish({"runs": frame(rows)}, {"w": ["cpu"]})["warnings"]
    details = table[table["kind"] == "slowdown"]["detail"].tolist()
    assert details[0] == (
        "slower from step 32 on, the first step of epoch 2, where this run's hard-negative "
        "mining schedule can change the work per step: measured from there"
    )
    assert details[1] == (
        "slower from step 32 on, the first step of epoch 2 (a shift in level at an epoch "
        "boundary): measured from there"
    )
    assert "heat, other load or a change in the work per step" in details[2]
    assert "thermal" not in " ".join(details)


@pytest.mark.parametrize(
    ("step", "window", "epochs", "extension", "epoch"),
    [(32, 64, 3, 0.0, 2), (64, 64, 2, 0.0, 2), (40, 56, 3, 0.0, 0), (32, 64, 3, 0.5, 0),
     (32, 64, 3, float("nan"), 0), (32, 64, 1, 0.0, 0), (0, 96, 3, 0.0, 0),
     (float("nan"), 64, 3, 0.0, 0)],
)  # fmt: skip
def test_the_epoch_a_step_starts(step, window, epochs, extension, epoch):
    assert quality.epoch_started_at(step, window, epochs, extension) == epoch


# ----------------------------------------------------------------------------- repeats


def _adaptive_runs():
    rows = cell("w", "cpu", 8, CPU3) + cell("w", "tight", 8, [300.0, 301.0, 302.0])
    rows += cell("w", "wide", 8, [200.0, 300.0, 400.0])
    rows += cell("w", "full", 8, [200.0, 300.0, 400.0, 250.0, 350.0])
    rows += cell("w", "orphan", 16, [200.0, 300.0, 400.0])  # no baseline at bs 16
    return frame(rows)


def test_next_round_asks_only_where_the_halfwidth_exceeds_the_target_below_max():
    settings = {"min": 3, "max": 5, "target_ci_halfwidth": 0.03}
    plan = repeats.next_round(_adaptive_runs(), {"w": ["cpu"]}, None, settings)
    assert plan == {"w": [("cpu", 8), ("wide", 8)]}
    assert repeats.next_round(_adaptive_runs(), {"w": ["cpu"]}, None, {"w": settings}) == plan
    no_target = {"min": 3, "max": 5, "target_ci_halfwidth": None}
    assert repeats.next_round(_adaptive_runs(), {"w": ["cpu"]}, None, no_target) == {"w": []}
    fixed = {"min": 5, "max": 5, "target_ci_halfwidth": 0.03}
    assert repeats.next_round(_adaptive_runs(), {"w": ["cpu"]}, None, fixed) == {"w": []}


def test_repeats_table_notes():
    settings = {"w": {"min": 3, "max": 5, "target_ci_halfwidth": 0.03}}
    out = stats.publish({"runs": _adaptive_runs()}, {"w": ["cpu"]}, repeats=settings)
    table = out["repeats"]
    tight, wide, full = (one(table, device=d) for d in ("tight", "wide", "full"))
    assert bool(tight["converged"]) and tight["note"].startswith("converged after 3 repeats")
    assert tight["halfwidth"] == one(out["speedup"], device="tight")["halfwidth"]
    assert not bool(wide["converged"]) and "> target 3% after 3 repeats" in wide["note"]
    assert full["note"].startswith("stopped at the maximum (5) with half-width")
    assert pd.isna(one(table, device="cpu")["converged"])
    orphan = one(table, device="orphan")
    assert pd.isna(orphan["converged"]) and orphan["note"] == "no ratio: no ok baseline run"


# ----------------------------------------------------------------------------- verdicts


def _verdict_runs(parity_at_16=0.9, cuda16=(300.0, 310.0, 305.0)) -> pd.DataFrame:
    rows = []
    for bs in (8, 16):
        rows += cell("w", "cpu", bs, CPU3, final_metric=0.9, final_loss=1.0)
    rows += cell("w", "cuda", 8, [300.0, 310.0, 305.0], final_metric=0.9, final_loss=1.0)
    rows += cell("w", "cuda", 16, cuda16, final_metric=parity_at_16, final_loss=1.0)
    return frame(rows)


def test_working_needs_checks_parity_and_faster_at_every_batch_size():
    out = stats.publish({"runs": _verdict_runs()}, {"w": ["cpu", "cuda"]})
    cuda = one(out["verdicts"], device="cuda")
    assert (cuda["status"], cuda["symbol"], cuda["first_failing"]) == ("working", "✅", "")
    assert cuda["text"] == (
        "every verification check passed in all 6 runs, parity holds at every batch size "
        "(identical results at bs 8, 16), and training is faster at every batch size: 3.05x"
    )
    cpu = one(out["verdicts"], device="cpu")
    assert (cpu["status"], cpu["symbol"], cpu["text"]) == (
        "baseline",
        "✅",
        "the baseline: 6 ok runs",
    )


def test_parity_failing_at_one_batch_size_is_not_working():
    rows = _verdict_runs(parity_at_16=0.7)
    rows.loc[rows["device"] == "cpu", "final_metric"] = [0.9, 0.91, 0.89] * 2
    out = stats.publish({"runs": rows}, {"w": ["cpu", "cuda"]})
    assert one(out["speedup"], device="cuda", batch_size=16)["verdict"] == "faster"
    cuda = one(out["verdicts"], device="cuda")
    assert (cuda["status"], cuda["symbol"]) == ("not working", "❌")
    assert cuda["first_failing"] == "parity fails at bs 16: accuracy 0.7 vs 0.9"


def test_verdict_never_uses_a_median_across_batch_sizes():
    # 3x at bs 8, no clear difference at bs 16: a median over batch sizes would say faster
    rows = _verdict_runs(cuda16=(95.0, 105.0, 100.0))
    cuda = one(stats.publish({"runs": rows}, {"w": ["cpu"]})["verdicts"], device="cuda")
    assert cuda["status"] == "not faster" and cuda["symbol"] == "⚠️"
    assert cuda["first_failing"] == (
        "no clear difference at bs 16: 0.941–1.06x, range of 3 vs 3 runs"
    )


def test_verdict_rules_unavailable_failures_checks_and_insufficient_data():
    rows = list(_verdict_runs().to_dict("records"))
    rows += [run("w", "mps", 8, 0, status="unavailable", reason="no MPS")]
    rows += [run("w", "cpu", 32, 0, status="failed", error_class="oom")]
    rows += cell("w", "gpu", 8, [300.0, 310.0, 305.0], all_on_device=False, final_metric=0.9)
    rows += cell("w", "npu", 8, [300.0, 310.0], final_metric=0.9, final_loss=1.0)
    table = stats.publish({"runs": frame(rows)}, {"w": ["cpu"]})["verdicts"]
    mps = one(table, device="mps")
    assert (mps["status"], mps["symbol"], mps["text"]) == (
        "unavailable",
        "⚪",
        "unavailable: no MPS",
    )
    cpu = one(table, device="cpu")
    assert (cpu["status"], cpu["symbol"]) == ("baseline", "❌")
    assert cpu["text"] == "the baseline: 6 ok runs; 1 of 7 cells failed (oom ×1)"
    gpu = one(table, device="gpu")
    assert gpu["status"] == "not working"
    assert gpu["first_failing"].startswith("verification failed: model, batch tensors")
    assert "(0/3 runs)" in gpu["first_failing"]
    npu = one(table, device="npu")
    assert npu["status"] == "insufficient data"
    assert (
        npu["first_failing"] == "insufficient data at bs 8: npu has 2 ok repeats; a verdict needs 3"
    )


PASS = {"numerics_status": "pass"}
MATMUL_FAIL = {
    "numerics_status": "fail", "numerics_failed_ops": "matmul_transposed;bmm",
    "numerics_first_failed_error": 0.21, "numerics_first_failed_tolerance": 0.01,
}  # fmt: skip


def _with_canary(rows: pd.DataFrame, device: str, *per_run: dict) -> pd.DataFrame:
    """Every run gets a passing canary; the first runs of ``device`` get ``per_run``."""
    rows = rows.assign(**PASS)
    at = rows.index[rows["device"] == device]
    for i, values in zip(at, per_run, strict=False):
        for key, value in values.items():
            rows.loc[i, key] = value
    return rows


def test_a_failing_canary_makes_the_device_not_working():
    rows = _with_canary(_verdict_runs(), "cuda", MATMUL_FAIL, MATMUL_FAIL)
    out = stats.publish({"runs": rows}, {"w": ["cpu", "cuda"]})
    cuda = one(out["verdicts"], device="cuda")
    assert (cuda["status"], cuda["symbol"]) == ("not working", "❌")
    assert cuda["first_failing"] == (
        "numerics fail: matmul_transposed rel. error 0.21 > 0.01 (2/6 runs)"
    )
    check = one(out["verification"], device="cuda")
    assert not check["numerics_pass"]
    assert check["numerics_detail"] == (
        "fail in 2/6 runs: matmul_transposed rel. error 0.21 > 0.01 (also failed: bmm)"
    )
    cpu = one(out["verification"], device="cpu")
    assert bool(cpu["numerics_pass"]) and cpu["numerics_detail"] == "6/6 runs pass"
    warned = out["warnings"][out["warnings"]["kind"] == "numerics"]
    assert warned["rep"].tolist() == [0, 1] and set(warned["device"]) == {"cuda"}
    assert warned["detail"].iloc[0] == (
        "matmul_transposed rel. error 0.21 > 0.01 (also failed: bmm)"
    )


def test_numerics_fail_comes_right_after_the_verification_checks():
    rows = _with_canary(_verdict_runs(parity_at_16=0.5), "cuda", MATMUL_FAIL)
    rows.loc[rows["device"] == "cpu", "final_metric"] = [0.9, 0.91, 0.89] * 2
    cuda = one(stats.publish({"runs": rows}, {"w": ["cpu"]})["verdicts"], device="cuda")
    assert cuda["first_failing"].startswith("numerics fail: matmul_transposed")  # not parity
    rows.loc[rows["device"] == "cuda", "all_on_device"] = False
    cuda = one(stats.publish({"runs": rows}, {"w": ["cpu"]})["verdicts"], device="cuda")
    assert cuda["first_failing"].startswith("verification failed: model, batch tensors")


def test_canary_error_is_insufficient_data_and_missing_canary_is_not_judged():
    error = {"numerics_status": "error", "numerics_message": "sdpa: NotImplementedError: x"}
    rows = _with_canary(_verdict_runs(), "cuda", error)
    out = stats.publish({"runs": rows}, {"w": ["cpu"]})
    cuda = one(out["verdicts"], device="cuda")
    assert (cuda["status"], cuda["symbol"]) == ("insufficient data", "⚠️")
    assert cuda["first_failing"] == (
        "numerics not verified: canary error in 1/6 runs: sdpa: NotImplementedError: x"
    )
    assert one(out["warnings"], kind="numerics")["detail"] == (
        "canary error: sdpa: NotImplementedError: x"
    )
    # records from before the canary: not judged on it, and the detail says so
    out = stats.publish({"runs": _verdict_runs()}, {"w": ["cpu"]})
    assert one(out["verdicts"], device="cuda")["status"] == "working"
    check = one(out["verification"], device="cuda")
    assert pd.isna(check["numerics_pass"]) and check["numerics_detail"] == "no canary in 6/6 runs"
    assert "numerics" not in set(out["warnings"]["kind"])


def test_numerics_failure_on_the_baseline_is_named_and_survives_csv():
    nan_output = {**MATMUL_FAIL, "numerics_failed_ops": "softmax",
                  "numerics_first_failed_error": float("inf")}  # fmt: skip
    rows = _with_canary(_verdict_runs(), "cpu", nan_output)
    back = pd.read_csv(io.StringIO(rows.to_csv(index=False)))
    for runs in (rows, back):
        out = stats.publish({"runs": runs}, {"w": ["cpu"]})
        cpu = one(out["verdicts"], device="cpu")
        assert (cpu["status"], cpu["symbol"]) == ("baseline", "❌")
        assert cpu["first_failing"] == (
            "numerics fail: softmax non-finite output (tolerance 0.01) (1/6 runs)"
        )
        assert one(out["verdicts"], device="cuda")["status"] == "working"


def test_verification_memory_is_never_a_median_across_batch_sizes():
    rows = cell("w", "cpu", 8, CPU3, memory_peak_bytes=100.0, memory_initial_bytes=10.0)
    rows += cell("w", "cpu", 64, CPU3, memory_peak_bytes=900.0, memory_initial_bytes=12.0)
    rows[0]["cpu_fallback_ops"] = "aten::foo;aten::bar"
    table = verdicts.verification_table(frame(rows))
    row = one(table, device="cpu")
    assert row["memory_peak_bytes"] == 900.0 and row["memory_peak_batch_size"] == 64
    assert row["memory_initial_bytes"] == 12.0 and row["batch_sizes"] == "8, 64"
    assert not row["fallback_pass"] and row["fallback_detail"] == "aten::bar, aten::foo"
    assert row["placement_detail"] == "6/6 runs"


# ----------------------------------------------------------------------------- overview


def test_overview_and_attention_grouping():
    rows = cell("a", "cpu", 8, CPU3, git_commit="c2") + cell("b", "cpu", 8, CPU3[:2])
    rows += [run(w, "cuda", bs, 0, status="unavailable", reason="no CUDA")
             for w in ("a", "b") for bs in (8, 16)]  # fmt: skip
    rows += [run("a", "mps", bs, 0, status="failed", error_class="oom", error_message="OOM")
             for bs in (16, 8)]  # fmt: skip
    mm = matmul_rows("cpu", {16: 1.0})
    rows += [run("matmul", "cpu", 1, r) for r in range(3)]
    out = stats.publish({"runs": frame(rows), "matmul": frame(mm)}, {"a": ["mps", "cpu", "cuda"]})
    att = out["attention"]
    assert att["status"].tolist() == ["failed", "unavailable"]
    failed, unavailable = att.iloc[0], att.iloc[1]
    assert (failed["workload"], failed["device"], failed["error_class"]) == ("a", "mps", "oom")
    assert (failed["detail"], failed["cells"], failed["batch_sizes"]) == ("OOM", 2, "8, 16")
    assert (unavailable["workload"], unavailable["device"]) == ("a;b", "cuda")
    assert (unavailable["detail"], unavailable["cells"]) == ("no CUDA", 4)
    ov = out["overview"].set_index("workload")
    assert ov.loc["a", "devices"] == "mps;cpu;cuda" and ov.loc["a", "baseline"] == "cpu"
    assert ov.loc["a", ["records", "ok", "failed", "unavailable"]].tolist() == [7, 3, 2, 2]
    assert (ov.loc["b", "repeats_min"], ov.loc["b", "repeats_max"]) == (2, 2)
    assert ov.loc["matmul", "kind"] == "microbenchmark" and ov.loc["a", "kind"] == "training"
    assert ov.loc["(all)", "records"] == 14 and ov.loc["(all)", "code"] == "abc123;c2"


def test_matmul_summary_and_crossover_by_verdicts():
    ns = [16, 32, 64, 128]
    rows = matmul_rows("cpu", dict.fromkeys(ns, 1.0))
    # faster at 16, no verdict-worthy win at 32 (overlap), faster from 64 on
    rows += matmul_rows("mps", dict(zip(ns, [0.5, 1.0, 0.5, 0.4], strict=True)))
    rows += matmul_rows("cuda", dict(zip(ns, [0.5, 0.5, 0.5, 0.5], strict=True)), reps=2)
    summary = speed.matmul_summary(frame(rows), {"matmul": "cpu"})
    mps64 = one(summary, device="mps", n=64)
    assert mps64["verdict"] == "faster" and mps64["speedup"] == pytest.approx(2.0)
    assert one(summary, device="mps", n=32)["verdict"] == "no clear difference"
    assert one(summary, device="cuda", n=64)["verdict"] == "insufficient data"
    table = stats.crossover_table(None, summary)
    mps = one(table, device="mps")
    assert mps["crossover"] == 64 and mps["verdict_at"] == "faster" and mps["points_compared"] == 4
    assert mps["finding"] == "n ≥ 64 (mps 2x cpu, 1.96–2.04x, range of 3 vs 3 runs)"
    assert mps["baseline_value"] == pytest.approx(1.01)
    cuda = one(table, device="cuda")
    assert pd.isna(cuda["crossover"])
    assert cuda["finding"] == "no verdict at n 128: cuda has 2 ok repeats; a verdict needs 3"
