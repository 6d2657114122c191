"""The interleaved harness-vs-bare comparison (trainbench.bench.interleaved): the
palindromic order, rows per round, and the A/A floor reported as information. No speed is
asserted here."""

from __future__ import annotations

import math

import pytest
from trainbench.bench.interleaved import Block, palindrome, round_rows
from trainbench.bench.throughput_summary import summarize, target_checks


@pytest.mark.parametrize("round_index", range(4))
def test_each_round_is_a_palindrome_of_every_variant(round_index):
    names = ["harness", "bare", "bare-aa"]
    order = palindrome(names, round_index)
    assert order == order[::-1] and sorted(order) == sorted(names * 2)
    # Every variant's two blocks sit symmetrically: their mean position is the middle.
    for name in names:
        positions = [i for i, n in enumerate(order) if n == name]
        assert sum(positions) / 2 == (len(order) - 1) / 2
    assert order[0] == names[round_index % 3]  # the order rotates


def test_a_linear_drift_adds_the_same_to_every_variant():
    """Blocks whose time grows linearly through the round: the palindrome gives every
    variant the same total, so the A/A and the harness ratio stay exactly 1."""
    order = palindrome(["harness", "bare", "bare-aa"], 1)
    blocks = [Block(n, 10, 100, 1.0 + 0.1 * i, None) for i, n in enumerate(order)]
    rows = {r["variant"]: r for r in round_rows(blocks, {"workload": "w", "batch_size": 4}, 0)}
    assert rows["harness"]["wall_s"] == pytest.approx(rows["bare"]["wall_s"])
    assert rows["bare-aa"]["samples_per_s"] == pytest.approx(rows["bare"]["samples_per_s"])


def test_round_rows_carry_the_event_gap_where_events_exist():
    blocks = [Block("harness", 5, 50, 1.0, 1.02), Block("harness", 5, 50, 1.0, 1.0),
              Block("bare", 5, 50, 1.0, None), Block("bare", 5, 50, 1.0, None)]  # fmt: skip
    rows = {r["variant"]: r for r in round_rows(blocks, {}, 3)}
    assert rows["harness"]["event_vs_wall"] == pytest.approx(0.01)
    assert "event_vs_wall" not in rows["bare"]
    assert rows["harness"]["round"] == 3 and rows["harness"]["method"] == "interleaved"
    assert rows["harness"]["samples"] == 100 and rows["harness"]["steps"] == 10


def _results(harness: list[float], aa: list[float]) -> dict:
    measurements = []
    for r, (h, a) in enumerate(zip(harness, aa, strict=True)):
        for variant, sps in (("bare", 100.0), ("harness", 100.0 * h), ("bare-aa", 100.0 * a)):
            measurements.append({"workload": "w", "batch_size": 8, "variant": variant,
                                 "round": r, "status": "ok", "method": "interleaved",
                                 "samples_per_s": sps, "block_steps": 4})  # fmt: skip
    return {"device": "cpu", "summary": summarize(measurements)}


def _verdicts(results: dict) -> dict[str, str]:
    return {c["target"].split(" ")[0]: c["met"] for c in target_checks(results)}


def test_the_interleaved_comparison_and_its_aa_floor_are_information():
    """The A/A floor is the host's, reported with its width; it decides no verdict, and
    the interleaved harness / bare ratio is information too (issue 36: the tax is judged
    by benchmarks/step_overhead.py)."""
    steady = [1.0, 1.001, 0.999, 1.0005, 0.9995, 1.0, 1.0002, 0.9998]
    tight = _verdicts(_results([0.995, 0.996, 0.994, 0.995, 0.997, 0.995, 0.996, 0.994], steady))
    assert tight["A/A"].startswith("information: the host's floor is ±0.")
    assert tight["A/A"].endswith("(within ±1%)")
    assert tight["harness"] == "information"
    noisy_aa = [1.0, 1.05, 0.95, 1.04, 0.96, 1.03, 0.97, 1.02]
    noisy = _verdicts(_results([0.995] * 8, noisy_aa))
    assert noisy["A/A"].endswith("(wider than ±1%)")
    assert noisy["harness"] == "information"
    slow = _verdicts(_results([0.95, 0.951, 0.949, 0.95, 0.952, 0.948, 0.95, 0.95], steady))
    assert slow["harness"] == "information"


def test_an_aa_floor_from_fewer_than_five_rounds_is_not_an_interval():
    few = _verdicts(_results([1.0] * 3, [1.0] * 3))
    assert few["A/A"] == "information: fewer than 5 rounds, no interval"
    assert few["harness"] == "information"
    assert all(math.isfinite(c["value"]) for c in target_checks(_results([1.0] * 3, [1.0] * 3)))
