"""Synchronizations per step (trainbench.bench.sync_count) and the step-overhead verdict:
a step that synchronizes is seen, per step, apart from a block's edges; a harness that
adds one, or whose per-step additions pass 1% of the bare step, fails its verdict."""

from __future__ import annotations

import warnings

import pytest
from trainbench.bench import sync_count
from trainbench.bench.step_overhead import verdict
from trainbench.measure.devices import get_device


def blocks(device, syncs_per_step: int):
    """A block runner as the bare loop's: the device synchronized at both edges, and
    ``syncs_per_step`` times inside each step."""

    def run(steps: int) -> None:
        device.synchronize()
        for _ in range(steps):
            for _ in range(syncs_per_step):
                device.synchronize()
        device.synchronize()

    return run


@pytest.mark.parametrize("inside", [0, 1, 3])
def test_syncs_per_step_are_counted_apart_from_the_edges(inside):
    device = get_device("cpu")
    counted = sync_count.per_step(blocks(device, inside), device, "cpu", steps=4)
    assert counted["per_step"] == inside
    assert counted["per_block_edges"] == 2
    assert counted["implicit_per_step"] == 0
    assert counted["counted"]["8"]["calls"] == {"Device.synchronize": 2 + 8 * inside}


def test_the_counter_is_removed_and_other_warnings_still_show():
    device = get_device("cpu")
    original = type(device).synchronize
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        with sync_count.counting_syncs(device, "cpu") as tally:
            device.synchronize()
            warnings.warn("something else", UserWarning, stacklevel=1)
    assert tally.explicit == 1 and tally.implicit == 0
    assert [str(w.message) for w in shown] == ["something else"]
    assert type(device).synchronize is original
    device.synchronize()
    assert tally.explicit == 1  # no longer counted


def test_a_sync_warning_raised_inside_a_counted_call_is_counted_once():
    """On CUDA, torch's sync debug mode may warn inside an explicit synchronize: the call
    is counted, its warning is not counted again; a warning outside any call is
    implicit."""
    device = get_device("cpu")
    owner = type(device).__mro__[1]  # Device, which defines synchronize

    def warns(self) -> None:
        warnings.warn(f"{sync_count.SYNC_WARNING} (explicit)", UserWarning, stacklevel=1)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(owner, "synchronize", warns)
        with sync_count.counting_syncs(device, "cpu") as tally:
            device.synchronize()
            warnings.warn(f"{sync_count.SYNC_WARNING} (an .item())", UserWarning, stacklevel=1)
    assert (tally.explicit, tally.implicit) == (1, 1)


def case(harness: float, bare: float, operations_us: float, bare_ms: float) -> dict:
    return {
        "syncs_per_step": {"harness": harness, "bare": bare},
        "operations_us_per_step": operations_us,
        "step_ms_unprofiled": {"harness": bare_ms, "bare": bare_ms},
    }


def test_the_verdict_fails_an_added_sync_or_additions_over_one_percent():
    assert verdict(case(0, 0, 7.85, 3.6))["passed"]  # issue 36: 7.85 us on a 3.6 ms step
    added = verdict(case(1, 0, 7.85, 3.6))
    assert not added["passed"] and "adds 1 synchronization" in added["reasons"][0]
    costly = verdict(case(0, 0, 40.0, 3.6))
    assert not costly["passed"] and costly["additions_share_of_bare_step"] > 0.01
