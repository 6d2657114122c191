"""benchmarks/host_stability.py's window comparison (trainbench.bench.host_stability),
from constructed process results: the plan alternates the two window lengths, and each
group's spread is computed from its processes' whole-window throughputs."""

from __future__ import annotations

import math

import pytest
from trainbench.bench import host_stability as hs


def test_the_window_plan_alternates_1_s_and_5_s_processes():
    plan = hs.window_plan(cuda=True)
    assert [row[3] for row in plan[:4]] == [1.0, 5.0, 1.0, 5.0]
    assert len(plan) == 2 * hs.WINDOW_PAIRS
    assert {row[0] for row in plan} == {"cuda-window-1s", "cuda-window-5s"}
    assert all(row[1] == "cuda" and row[2] == 1 and row[5] == 1 for row in plan)


def test_each_group_spread_from_its_processes():
    def row(rate: float, started: float) -> dict:
        return {"steps_per_s": [rate], "started_unix": started}

    result = {
        "made_at": "now",
        "command": "python benchmarks/host_stability.py --windows",
        "code": "git x",
        "groups": {
            "cuda-window-1s": {"rows": [row(400.0, 100.0), row(500.0, 120.0)]},
            "cuda-window-5s": {"rows": [row(450.0, 110.0), row(460.0, 130.0)]},
            "cpu-all-long": {"rows": [row(1.0, 0.0)]},  # not a window group: left out
        },
    }
    groups = {g["group"]: g for g in hs.window_comparison(result)}
    assert set(groups) == {"cuda-window-1s", "cuda-window-5s"}
    short = groups["cuda-window-1s"]
    assert short["spread"] == pytest.approx(0.25)
    assert short["log_sd"] == pytest.approx(round(math.log(500 / 400) / math.sqrt(2), 4))
    assert short["started_after_s"] == [0, 20]
    assert groups["cuda-window-5s"]["started_after_s"] == [10, 30]
    text = hs.window_markdown(result, "how")
    assert "| cuda-window-1s | 2 | 400, 500 | 25.0% | 15.8% | 0, 20 |" in text
