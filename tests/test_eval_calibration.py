"""Evaluation timed to the minimum window (trainbench.measure.eval_calibration), and
what an evaluation speed that is not measured leaves in the tables: a row of the
warnings table, never a count in the reports' headline (docs/statistics.md §1,
"Evaluation is timed like training"; the ``warnings`` table)."""

from __future__ import annotations

import math

import pytest
from stats_helpers import cell, frame
from trainbench.analysis.console import summary_lines
from trainbench.analysis.report import warning_counts
from trainbench.analysis.stats import quality
from trainbench.measure.eval_calibration import calibrate, eval_passes_needed
from trainbench.measure.measurement import EXTENSION_MARGIN, TimingProtocol, eval_window


def _pass(seconds: float, cold: bool = False, epoch: int | None = None) -> dict:
    return {"epoch": epoch, "seconds": seconds, "samples": 100, "cold": cold}


def _curve(seconds: float, warm: int = 7) -> list[dict]:
    """The quality curve's passes: the cold first one, then ``warm`` warm ones."""
    return [_pass(0.5, cold=True, epoch=1)] + [_pass(seconds, epoch=1) for _ in range(warm)]


class FakeLoop:
    """A pass of ``seconds`` timed, the wall clock moving ``seconds + edges`` with it."""

    def __init__(self, passes: list[dict], seconds: float, edges: float = 0.001):
        self.passes, self.seconds, self.edges, self.now = passes, seconds, edges, 0.0

    def clock(self) -> float:
        return self.now

    def time_pass(self) -> None:
        self.now += self.seconds + self.edges
        self.passes.append(_pass(self.seconds))


def test_a_3_ms_pass_gets_the_passes_that_reach_the_minimum():
    """What H200 cells showed: 3 ms passes, 0.15 s after 50 passes. Counted from the
    median, with the default protocol, they reach the 1 s minimum in one round."""
    protocol = TimingProtocol()
    passes = _curve(0.003)
    wanted = math.ceil((1.0 * EXTENSION_MARGIN - sum([0.003] * 7)) / 0.003)
    assert eval_passes_needed(passes, protocol) == (wanted, None)
    assert wanted > 50  # the old fixed count of 50 left it at 0.15 s
    loop = FakeLoop(passes, 0.003)
    facts = calibrate(loop.time_pass, passes, protocol, loop.clock)
    assert facts["passes"] == wanted and facts["rounds"] == 1 and facts["out_of_reach"] is None
    assert facts["seconds"] <= protocol.max_eval_seconds  # the budget held
    window = eval_window(passes, protocol, facts)
    assert window["measured"] is True and window["short_window"] is False
    assert window["warm"]["seconds"] >= protocol.min_timed_seconds
    assert window["samples_per_s"] == pytest.approx(100 / 0.003)
    assert window["calibration"] is facts


def test_an_evaluation_minimum_apart_from_the_training_window():
    """timing.min_eval_seconds sets the evaluation's minimum alone: training windows of
    5 s (criterion's measurement time) leave evaluation at its own 1 s; unset, the
    evaluation follows min_timed_seconds."""
    apart = TimingProtocol(min_timed_seconds=5.0, min_eval_seconds=1.0)
    together = TimingProtocol(min_timed_seconds=5.0)
    assert (apart.eval_minimum, together.eval_minimum) == (1.0, 5.0)
    passes = _curve(0.01)
    need_apart, _ = eval_passes_needed(passes, apart)
    need_together, _ = eval_passes_needed(passes, together)
    assert need_apart == math.ceil((1.0 * EXTENSION_MARGIN - 0.07) / 0.01)
    assert need_together == math.ceil((5.0 * EXTENSION_MARGIN - 0.07) / 0.01)
    loop = FakeLoop(passes, 0.01)
    facts = calibrate(loop.time_pass, passes, apart, loop.clock)
    assert facts["target_seconds"] == pytest.approx(1.0 * EXTENSION_MARGIN)
    assert eval_window(passes, apart, facts)["measured"] is True
    # the same 1.2 s of warm passes fall short of the evaluation minimum of 5 s
    window = eval_window(passes, together, facts)
    assert window["measured"] is False and "< 5 s" in window["short_window_reason"]
    # from a cell's spec, as the schema's default (null) leaves it
    spec = {"timing": {"min_timed_seconds": 5.0, "min_eval_seconds": None}}
    assert TimingProtocol.from_spec(spec).eval_minimum == 5.0


def test_passes_are_counted_no_further_than_the_budget_allows():
    """A budget that reaches the minimum but not the margin: as many passes as fit."""
    protocol = TimingProtocol(max_eval_seconds=1.1)
    passes = _curve(0.01)
    need, why = eval_passes_needed(passes, protocol, budget_seconds=1.1)
    assert why is None and need == math.floor(1.1 / 0.01) < math.ceil((1.2 - 0.07) / 0.01)
    assert 0.07 + need * 0.01 >= 1.0


def test_a_budget_that_cannot_reach_the_minimum_times_nothing_and_is_not_measured():
    protocol = TimingProtocol(max_eval_seconds=0.5)
    passes = _curve(0.003)
    loop = FakeLoop(passes, 0.003)
    facts = calibrate(loop.time_pass, passes, protocol, loop.clock)
    assert facts["passes"] == 0 and loop.now == 0.0  # no pass spent in vain
    assert "timing.max_eval_seconds leaves 0.5 s: 166 passes" in facts["out_of_reach"]
    window = eval_window(passes, protocol, facts)
    assert window["measured"] is False and window["samples_per_s"] is None
    assert window["short_window_reason"].startswith("evaluation speed not measured")
    assert "timing.max_eval_seconds" in window["short_window_reason"]
    # A pass cap that cannot reach it either: the reason names it.
    capped = TimingProtocol(max_eval_passes=50)
    assert eval_passes_needed(_curve(0.003), capped) == (
        0,
        "327 more passes of 0.003 s were needed; timing.max_eval_passes allows 50 more",
    )


def test_the_wall_clock_budget_stops_passes_whose_edges_cost_more_than_counted():
    """Passes counted at 3 ms whose edges take 30 ms: the wall-time budget (2 s) stops
    them, and the evaluation speed is not measured."""
    protocol = TimingProtocol(max_eval_seconds=2.0)
    passes = _curve(0.003)
    loop = FakeLoop(passes, 0.003, edges=0.03)
    facts = calibrate(loop.time_pass, passes, protocol, loop.clock)
    assert facts["passes"] == math.ceil(2.0 / 0.033)  # stopped before the pass past 2 s
    assert facts["seconds"] < 2.0 + 0.033
    assert "no time left within timing.max_eval_seconds (2 s)" in facts["out_of_reach"]
    assert eval_window(passes, protocol, facts)["samples_per_s"] is None


def test_a_filled_window_gets_no_pass_and_a_run_without_warm_pass_gets_one():
    protocol = TimingProtocol()
    assert eval_passes_needed(_curve(0.2), protocol) == (0, None)  # 7 × 0.2 s ≥ 1 s
    assert eval_passes_needed(_curve(0.2, warm=0), protocol) == (1, None)
    off = TimingProtocol(max_eval_passes=0)
    need, why = eval_passes_needed(_curve(0.003), off)
    assert need == 0 and "timing.max_eval_passes (0)" in why


# ----------------------------------------------------------------------------- headline


def _runs_with_warnings():
    rows = cell("w", "cpu", 8, [100.0, 101.0, 102.0])
    rows[0].update(disturbed=True, other_cpu_cores=1.5)
    rows[1].update(short_window=True, window_seconds=0.5, window_steps=12)
    rows[2].update(eval_short_window=True, eval_warm_seconds=0.15, eval_warm_passes=57)
    return frame(rows)


def test_the_headline_counts_a_disturbed_or_short_window_but_not_an_eval_only_warning():
    table = quality.warnings_table(_runs_with_warnings())
    rows = table.to_dict("records")
    assert [(r["kind"], r["affects_verdict"]) for r in rows] == [
        ("disturbed", True),
        ("short window", True),
        ("eval speed not measured", False),
    ]
    assert rows[2]["detail"] == (
        "warm evaluation 0.15 s over 57 passes, below the minimum: no evaluation speed"
    )
    assert warning_counts(rows) == {"n": 2, "kinds": "1 disturbed, 1 short window"}
    assert warning_counts(rows[2:]) is None  # an eval-only warning: no headline
    # A table written before the column: every row counts, as before.
    old = [{k: v for k, v in r.items() if k != "affects_verdict"} for r in rows]
    assert warning_counts(old)["n"] == 3


def test_the_console_summary_leaves_eval_only_warnings_to_the_report(tmp_path):
    tables = tmp_path / "tables"
    tables.mkdir()
    quality.warnings_table(_runs_with_warnings()).to_csv(tables / "warnings.csv", index=False)
    lines = summary_lines(tmp_path / "report.md")
    (line,) = [line for line in lines if "read with care" in line]
    assert "1 disturbed" in line and "1 short window" in line
    assert "eval" not in line
