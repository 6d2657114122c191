"""The false-alarm sweep's summary and its agreement between two runs
(trainbench.bench.false_alarm); the parity rule itself is tested in test_parity.py."""

from __future__ import annotations

import pandas as pd
import pytest
from trainbench.analysis.stats.speed import windows_cover
from trainbench.bench import false_alarm as fa


def run(column: str, rep: int, speed: float, **extra) -> dict:
    return {"workload": "w", "batch_size": 32, "column": column, "rep": rep, "status": "ok",
            "samples_per_s": speed, **extra}  # fmt: skip


def results(parity: str = "pass", eval_ratio: float = 0.2) -> dict:
    runs = [run("baseline", r, 100.0 + r) for r in range(3)]
    runs += [
        run("cuda-bf16-staged", r, 1000.0 + r, window_phase="epoch 2: mined") for r in range(3)
    ]
    judged = {"parity": parity, "eval_parity": "pass", "precision": "bfloat16",
              "drift_high": 0.5, "eval_error_ratio": eval_ratio, "metric_low": -0.01,
              "metric_high": 0.02, "metric_margin": 0.1, "loss_low": 0.0, "loss_high": 0.05,
              "loss_margin": 0.1, "decided_by": "drift"}  # fmt: skip
    comparison = {"workload": "w", "batch_size": 32, "column": "cuda-bf16-staged", "runs": 3,
                  "ok_runs": 3, "all": judged, "canary": "pass 3", "errors": []}  # fmt: skip
    columns = {"cuda-bf16-staged": {"describe": "cuda, bf16 autocast"}}
    return {"runs": runs, "comparisons": [comparison], "columns": columns}


def test_a_row_reports_its_worst_margin_and_its_speed_verdict():
    summary = fa.summarize(results())
    row = summary["per_row"][0]
    assert summary["rows"] == 1 and summary["false_alarms"] == 0
    assert row["metric_ratio"] == pytest.approx(0.2) and row["loss_ratio"] == pytest.approx(0.5)
    assert row["worst_ratio"] == summary["worst_ratio"] == pytest.approx(0.5)
    assert (
        row["speed_verdict"] == "faster" and 9.7 < row["speedup_low"] < row["speedup_high"] < 10.3
    )
    assert row["window_phase"] == "epoch 2: mined"


def test_anything_but_pass_or_identical_is_a_false_alarm():
    for outcome in ("fail", "insufficient data"):
        assert fa.summarize(results(parity=outcome))["false_alarms"] == 1
    assert fa.summarize(results(parity="identical"))["false_alarms"] == 0


def test_two_runs_agree_when_parity_matches_and_speed_differs_only_across_the_bound():
    first = fa.rows(results())
    second = [dict(first[0])]
    assert fa.agreement(first, second)["agrees"]
    straddling = dict(second[0], speed_verdict="no clear difference", speedup_low=0.9,
                      speedup_high=1.2)  # fmt: skip
    found = fa.agreement(first, [straddling])
    assert found["agrees"] and found["speed_differs_straddling"] == 1
    flipped = dict(second[0], speed_verdict="slower", speedup_low=0.5, speedup_high=0.8)
    assert fa.agreement(first, [flipped])["speed_differs_otherwise"] == ["w/32/cuda-bf16-staged"]
    assert not fa.agreement(first, [dict(second[0], parity="fail")])["agrees"]


def test_a_speedup_row_says_which_phase_its_windows_cover():
    runs = pd.DataFrame([
        {"workload": "t", "batch_size": 64, "device": d, "status": "ok", "window_phase": p}
        for d, p in (("cpu", "epochs 2-3: mined"), ("cuda", "epochs 2-3: mined"),
                     ("mps", None))])  # fmt: skip
    assert windows_cover(runs, ("t", 64, "cuda"), "cpu") == "epochs 2-3: mined"
    assert windows_cover(runs, ("t", 64, "mps"), "cpu").startswith("differs: mps whole run, cpu")
    assert windows_cover(runs, ("t", 64, "cuda"), "mps") == (
        "differs: cuda epochs 2-3: mined, mps whole run"
    )
    assert windows_cover(runs.drop(columns="window_phase"), ("t", 64, "cuda"), "cpu") == ""


def test_a_fault_column_in_the_same_runs_is_no_row_of_the_sweep():
    found = results()
    fault = dict(found["comparisons"][0], column="fault3%", kind="fault")
    found["comparisons"].append(fault)
    found["columns"]["fault3%"] = {"describe": "1 thread, silent_numeric_error size 0.03"}
    assert [r["column"] for r in fa.rows(found)] == ["cuda-bf16-staged"]
