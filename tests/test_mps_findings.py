"""The MPS path's defects found by reading it against PyTorch (issue 50), each fixed and
held here without a Mac: device tensors never cast to float64, event pairs that cannot
fail a cell, a watermark pair refused before any job, the optimizer's host wait counted.
The whole cell under MPS's rules: tests/test_mps_emulated.py."""

from __future__ import annotations

import pytest
import torch
from helpers import REPO, tiny_config
from trainbench import config as tbconfig
from trainbench.common import mps_memory
from trainbench.config.checks import mps_memory_problems
from trainbench.measure.data import host_float64
from trainbench.measure.trackers.steps import event_step_seconds
from trainbench.measure.training_facts import optimizer_host_waits


class Stamp:
    """An event with a host timestamp whose elapsed_time refuses a reversed pair, as
    torch 2.13's MPS events do (pytorch#196395); each end is read once."""

    def __init__(self, ms: float):
        self.ms, self.ended = ms, 0

    def elapsed_time(self, end: Stamp) -> float:
        end.ended += 1
        if end.ms <= self.ms:
            raise RuntimeError("End event 2 was not recorded after start event 1")
        return end.ms - self.ms


def test_a_refused_event_pair_never_fails_the_cell_and_keeps_the_sum():
    marks = [Stamp(t) for t in (0.0, 10.0, 9.9, 30.0, 40.0)]  # the pair (10, 9.9) is reversed
    steps, refused, shared = event_step_seconds(marks, region_seconds=0.05)
    assert steps == pytest.approx([0.010, 0.010, 0.010, 0.010])
    assert sum(steps) == pytest.approx(0.040)  # what a window's throughput reads
    assert (refused, shared) == (1, 2)
    assert all(mark.ended <= 1 for mark in marks)  # an end event is waited for once


def test_events_that_never_read_again_share_the_region_wall_time():
    marks = [Stamp(t) for t in (0.0, 10.0, 5.0, 4.0)]  # nothing after 10 ms reads
    steps, refused, shared = event_step_seconds(marks, region_seconds=0.040)
    assert steps[0] == pytest.approx(0.010)
    assert steps[1:] == pytest.approx([0.015, 0.015]) and (refused, shared) == (2, 2)


def test_host_float64_copies_out_before_it_casts():
    seen = []
    t = torch.ones(3)
    original = torch.Tensor.cpu

    def cpu(self, *a, **k):
        seen.append(self.dtype)
        return original(self, *a, **k)

    torch.Tensor.cpu = cpu
    try:
        out = host_float64(t)
    finally:
        torch.Tensor.cpu = original
    assert out.dtype == torch.float64 and seen == [torch.float32]


def test_the_optimizer_host_wait_is_counted_by_what_torch_does():
    params = [torch.nn.Parameter(torch.ones(2))]
    assert optimizer_host_waits(torch.optim.Adam(params), grad_scaler=True) == 1
    assert optimizer_host_waits(torch.optim.Adam(params, fused=True), grad_scaler=True) == 0
    assert optimizer_host_waits(torch.optim.Adam(params), grad_scaler=False) == 0


@pytest.mark.parametrize(
    ("settings", "refused"),
    [
        ({"memory_fraction": None, "high_watermark_ratio": 1.0}, "invalid low watermark ratio 1.4"),
        ({"memory_fraction": None, "high_watermark_ratio": 1.0, "low_watermark_ratio": 0.8}, None),
        ({"memory_fraction": None, "high_watermark_ratio": 0.0, "low_watermark_ratio": 1.9}, None),
        ({"memory_fraction": None, "low_watermark_ratio": 1.8}, "invalid low watermark ratio 1.8"),
        ({"high_watermark_ratio": 1.9}, "both set MPS's high watermark"),
        ({}, None),  # config.yaml's own: memory_fraction 0.8, MPS's defaults 1.7 / 1.4
    ],
)
def test_the_watermark_pair_is_refused_before_any_job(settings, refused):
    config = tiny_config(devices=["cpu", "mps"], device_settings={"cpu": {}, "mps": settings})
    if refused is None:
        assert mps_memory_problems(tbconfig.validate_config(config)) == []
        return
    with pytest.raises(tbconfig.ConfigError) as refusal:
        tbconfig.validate_config(config)
    problem = str(refusal.value)
    assert refused in problem and "device_settings.mps" in problem and "Fix:" in problem


def test_strtod_reads_the_variable_as_mps_does():
    assert mps_memory.strtod("1.0") == 1.0 and mps_memory.strtod("0.5x") == 0.5
    assert mps_memory.strtod("off") == 0.0  # no number: 0.0 (the high ratio: no cap)
    assert mps_memory.ratios_from({}) == (1.7, 1.4)


def test_the_readme_mps_example_is_a_valid_pair():
    """The README's MPS settings pass the check the allocator would apply."""
    import re

    import yaml

    text = (REPO / "README.md").read_text()
    block = next(b for b in re.findall(r"```yaml\n(.*?)```", text, re.S) if "watermark" in b)
    example = yaml.safe_load(block)
    settings = {**tiny_config(), **{k: example[k] for k in ("devices", "device_settings")}}
    settings["device_settings"]["cpu"]["threads"] = None
    config = tbconfig.validate_config(settings)
    assert mps_memory_problems(config) == []
    mps = config["device_settings"]["mps"]
    assert (
        mps_memory.watermark_problem(mps["high_watermark_ratio"], mps["low_watermark_ratio"])
        is None
    )


def test_readiness_says_not_checked_where_the_emulator_cannot_start():
    from trainbench.launch.readiness import judge

    record = {
        "status": "failed",
        "error": {
            "exception": "EmulatorUnavailable",
            "message": "EmulatorUnavailable: no compiler",
        },
    }
    verdict = judge("mine", 32, record)
    assert not verdict.ready and not verdict.checked_at_all
    assert verdict.line() == "mps-ready: mine: not checked: EmulatorUnavailable: no compiler"
    failed = judge("mine", 32, {"status": "failed", "error": {"message": "TypeError: x"}})
    assert failed.line() == "mps-ready: mine: not ready: the cell is failed: TypeError: x"


def test_without_a_compiler_the_emulator_says_how_to_get_one(monkeypatch):
    from trainbench.measure.mps_emulator import native

    monkeypatch.setattr(native.shutil, "which", lambda name: None)
    with pytest.raises(native.EmulatorUnavailable, match="no C\\+\\+ compiler .* Fix: install one"):
        native._compiler()


def test_the_collapse_rule_can_fire_under_the_memory_fraction(monkeypatch):
    """Under memory_fraction 0.8 the allocator refuses past 0.8 x the recommended
    working set: the limit a cell records is that cap, so a throughput drop at 7 GiB of
    a 10 GiB working set (87% of the 8 GiB cap) is flagged; against the working set
    itself (70%) it never could be."""
    from stats_helpers import frame, run
    from trainbench.analysis import stats
    from trainbench.measure.mps_device import MpsDevice

    gib = 1024**3
    monkeypatch.setattr(torch.mps, "recommended_max_memory", lambda: 10 * gib)
    monkeypatch.setattr(torch.mps, "set_per_process_memory_fraction", lambda f: None)
    device = MpsDevice({"memory_fraction": 0.8})
    device.apply_settings()

    def rows(limit):
        return frame([
            run("w", "mps", bs, r, samples_per_s=speed, memory_peak_bytes=peak * gib,
                memory_limit_bytes=limit)
            for bs, speed, peak in [(8, 100.0, 2.0), (16, 60.0, 7.0)]
            for r in range(2)
        ])  # fmt: skip

    assert device.memory_limit_bytes() == 8 * gib
    assert stats.collapse_table(rows(device.memory_limit_bytes()))["device"].tolist() == ["mps"]
    assert stats.collapse_table(rows(10 * gib)).empty
