"""Calibration's cost beyond what it times, read from constructed records."""

from __future__ import annotations

import pytest
from trainbench.bench.eval_calibration_cost import cell_costs


def _record(passes, seconds, status="ok"):
    timed = [{"epoch": 1, "seconds": 0.5, "cold": True}] + [
        {"epoch": None, "seconds": 0.003, "cold": False} for _ in range(passes)
    ]
    return {
        "status": status,
        "backend": "cuda",
        "result": {
            "eval": {"passes": timed, "calibration": {"passes": passes, "seconds": seconds}}
        },
        "wall_time": {"attempt_seconds": 10.0},
        "environment": {"code": {"label": "code"}},
    }


def test_the_cost_beyond_the_timed_passes_per_pass():
    cost = cell_costs(_record(100, 1.3))  # 0.3 s timed, 1.0 s beyond, over 100 passes
    assert cost["timed_ms_per_pass"] == pytest.approx(3.0)
    assert cost["beyond_ms_per_pass"] == pytest.approx(10.0)
    assert cost["calibration_seconds"] == 1.3 and cost["attempt_seconds"] == 10.0


def test_no_pass_or_no_ok_record_has_no_cost():
    assert cell_costs(_record(0, 0.0)) is None
    assert cell_costs(_record(5, 0.1, status="failed")) is None
