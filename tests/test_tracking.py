"""Trackers and the training loop: sync discipline, warm-up exclusion, latency maths."""

from __future__ import annotations

import math
import time
import warnings

import numpy as np
import pytest
import torch
from torch import nn
from trainbench.measure.context import RunContext
from trainbench.measure.devices import AmpPolicy, CpuDevice
from trainbench.measure.steady import dispersion
from trainbench.measure.trackers import (
    EVAL,
    TRAIN,
    StepTimer,
    TimedRegion,
    capture_warnings,
    verify_placement,
)
from trainbench.measure.training import NonFiniteLossError, TrainingParts, run_training


class FakeDevice(CpuDevice):
    """A CPU device that counts synchronize() calls."""

    def __init__(self, settings=None):
        super().__init__(settings)
        self.syncs = 0

    def synchronize(self) -> None:
        self.syncs += 1


class FakeEvent:
    def __init__(self, clock: list[float]):
        self._clock = clock
        self.t_ms: float | None = None

    def record(self) -> None:
        self.t_ms = self._clock.pop(0)

    def elapsed_time(self, other: FakeEvent) -> float:
        return other.t_ms - self.t_ms


class FakeEventDevice(FakeDevice):
    """Timing events whose recorded times (ms) come from a fixed list."""

    backend = "fakeaccel"

    def __init__(self, times_ms: list[float]):
        super().__init__()
        self.clock = list(times_ms)
        self.events_made = 0

    def make_event(self):
        self.events_made += 1
        return FakeEvent(self.clock)


# ----------------------------------------------------------------------------- StepTimer


def _region(timer: StepTimer, device, steps: int) -> None:
    timer.prepare(steps)
    with TimedRegion(device, [timer], TRAIN):
        for _ in range(steps):
            timer.mark_step()


@pytest.mark.parametrize("steps", [0, 1, 5, 40])
def test_step_timer_syncs_only_at_region_edges(steps):
    device = FakeDevice()
    timer = StepTimer(device)
    assert not timer.uses_events
    timer.prepare(steps)
    with TimedRegion(device, [timer], TRAIN) as region:
        assert device.syncs == 1
        for _ in range(steps):
            timer.mark_step()
        assert device.syncs == 1  # mark_step never syncs
    assert device.syncs == 2
    assert len(timer.regions[-1]) == steps
    assert all(s >= 0 for s in timer.regions[-1])
    assert region.seconds >= sum(timer.regions[-1]) - 1e-9
    assert timer.region_seconds == [region.seconds]


def test_step_timer_keeps_each_region_apart():
    device = FakeDevice()
    timer = StepTimer(device)
    _region(timer, device, 3)
    _region(timer, device, 1)
    assert [len(r) for r in timer.regions] == [3, 1]
    assert device.syncs == 4


def test_step_timer_ignores_evaluation_regions():
    device = FakeDevice()
    timer = StepTimer(device)
    with TimedRegion(device, [timer], EVAL):
        pass
    assert timer.regions == []


def test_step_timer_uses_device_events():
    # One event from the probe in __init__ (never recorded), then start + 3 steps.
    device = FakeEventDevice([0.0, 5.0, 15.0, 45.0])
    timer = StepTimer(device)
    assert timer.uses_events
    assert "events" in timer.method
    _region(timer, device, 3)
    assert timer.regions[-1] == pytest.approx([0.005, 0.010, 0.030])
    assert device.syncs == 2
    assert device.clock == []  # every step recorded exactly one event


def test_timed_region_does_not_sync_after_an_exception():
    device = FakeDevice()
    with pytest.raises(RuntimeError), TimedRegion(device, [], TRAIN):
        raise RuntimeError("the device failed")
    assert device.syncs == 1


# ----------------------------------------------------------------------------- dispersion


def test_dispersion_matches_numpy():
    values = [0.010, 0.012, 0.011, 0.030, 0.009, 0.010, 0.013, 0.011]
    arr = np.array(values)
    summary = dispersion(values)
    assert summary["n"] == 8
    assert summary["mean"] == pytest.approx(arr.mean())
    assert summary["p50"] == pytest.approx(np.percentile(arr, 50))
    assert summary["p90"] == pytest.approx(np.percentile(arr, 90))
    assert summary["p99"] == pytest.approx(np.percentile(arr, 99))
    assert summary["cv"] == pytest.approx(arr.std(ddof=1) / arr.mean())
    mad = np.median(np.abs(arr - np.median(arr)))
    assert summary["robust_cv"] == pytest.approx(1.4826 * mad / np.median(arr))
    assert summary["min"] == 0.009
    assert summary["max"] == 0.030


def test_dispersion_hand_computed():
    summary = dispersion([1.0, 2.0, 3.0, 4.0])
    assert summary["mean"] == 2.5
    assert summary["p50"] == 2.5
    # sample std of 1..4 is sqrt(5/3)
    assert summary["cv"] == pytest.approx(math.sqrt(5 / 3) / 2.5)


def test_dispersion_edge_cases():
    empty = dispersion([])
    assert empty["n"] == 0 and empty["mean"] is None and empty["cv"] is None
    single = dispersion([0.5])
    assert single["n"] == 1 and single["cv"] == 0.0 and single["p99"] == 0.5


# ----------------------------------------------------------------------------- run_training


def _spec(
    steps: int,
    epochs: int = 1,
    warmup: int = 2,
    accumulation: int = 1,
    batch_size: int = 4,
) -> dict:
    return {
        "cell": {"workload": "tiny", "device": "cpu", "batch_size": batch_size, "rep": 0},
        "workload_settings": {
            "epochs": epochs,
            "warmup_steps": warmup,
            "gradient_accumulation": accumulation,
            "max_steps_per_epoch": steps,
            "eval_batch_size": None,
        },
        "launcher": {"progress": "never"},
        "run_seed": 0,
        # Exact step counts: the window starts at warmup_steps (detection is tested apart).
        "timing": {
            "steady_state": {"detect": False},
            "max_eval_passes": 3,
            # One pass per epoch: these tests count per epoch (the cadences are
            # tested in test_quality_curve.py).
            "eval_every": {"epochs": 1},
            "extend_short_windows": False,
            # Counts of the timed loop alone (the diagnostic pass: test_step_breakdown.py).
            "step_breakdown": {"enabled": False},
        },
    }


def _context(spec: dict, device: CpuDevice, fault: str | None = None) -> RunContext:
    return RunContext(
        spec=spec,
        device=device,
        torch_device=torch.device("cpu"),
        amp=AmpPolicy(False, None, False, "off for the test"),
        settings_in_force={},
        fault=fault,
    )


def _parts(
    n_batches: int,
    batch_size: int = 4,
    nan: bool = False,
    optimizer_steps: list | None = None,
) -> TrainingParts:
    gen = torch.Generator().manual_seed(0)
    batches = [
        {"x": torch.randn(batch_size, 3, generator=gen), "y": torch.randn(batch_size, 1)}
        for _ in range(n_batches)
    ]
    model = nn.Linear(3, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    if optimizer_steps is not None:
        original_step = optimizer.step

        def counting_step(*args, **kwargs):
            optimizer_steps.append(1)
            return original_step(*args, **kwargs)

        optimizer.step = counting_step

    def loss_fn(model, batch):
        loss = nn.functional.mse_loss(model(batch["x"]), batch["y"])
        if nan:
            loss = loss * float("nan")
        return loss, {"abs_err": (model(batch["x"]) - batch["y"]).abs().sum()}

    def evaluate(model, loader, ctx):
        return {"metrics": {"mse": 0.5}, "samples": 8}

    return TrainingParts(
        model=model,
        optimizer=optimizer,
        train_loader=batches,
        eval_loader=batches[:2],
        loss_fn=loss_fn,
        evaluate=evaluate,
        primary_metric="mse",
        higher_is_better=False,
        model_name="linear",
    )


def _run(steps: int, epochs: int = 1, warmup: int = 2, accumulation: int = 1, **parts_kwargs):
    device = FakeDevice()
    spec = _spec(steps, epochs=epochs, warmup=warmup, accumulation=accumulation)
    result = run_training(_parts(steps, **parts_kwargs), _context(spec, device))
    return result, device


def test_training_sync_count_is_independent_of_steps():
    few, dev_few = _run(8, epochs=2)
    many, dev_many = _run(32, epochs=2)
    assert few["timed"]["steps"] == 6 + 8
    assert many["timed"]["steps"] == 30 + 32
    assert dev_few.syncs == dev_many.syncs
    # Small constant: step 0's edges and the placement check, then per epoch the
    # region's edges and the evaluation's, then the calibration passes' edges (at most
    # max_eval_passes 3 of them).
    assert dev_few.syncs <= 2 + 2 * (2 + 2) + 3 * 2


def test_training_sync_count_per_epoch_is_constant():
    _, one = _run(8, epochs=1)
    _, three = _run(8, epochs=3)
    per_later_epoch = (three.syncs - one.syncs) / 2
    assert per_later_epoch == int(per_later_epoch)
    assert per_later_epoch <= 4


def test_training_excludes_warmup_from_timing():
    result, _ = _run(10, epochs=2, warmup=3)
    bs = 4
    total_samples = sum(e["samples"] for e in result["epochs"])
    assert total_samples == 2 * 10 * bs
    assert result["warmup"]["steps"] == 3
    assert result["warmup"]["samples"] == 3 * bs
    assert result["warmup"]["seconds"] > 0
    assert result["warmup"]["seconds"] == pytest.approx(sum(result["steps"]["seconds"][0][:3]))
    timed = result["timed"]
    assert timed["samples"] == total_samples - result["warmup"]["samples"]
    assert timed["steps"] == 2 * 10 - 3
    assert result["epochs"][0]["timed_steps"] == 7
    assert result["epochs"][1]["timed_steps"] == 10
    assert timed["samples_per_s_all_steps"] == pytest.approx(timed["samples"] / timed["seconds"])
    stalls = timed["stalls"]  # stalls above timing.max_stall_share leave the published rate
    kept = (
        stalls["excluded"] * stalls["over_limit_samples"],
        stalls["excluded"] * stalls["over_limit_seconds"],
    )
    published = (timed["samples"] - kept[0]) / (timed["seconds"] - kept[1])
    assert timed["samples_per_s"] == pytest.approx(published)
    for epoch in result["epochs"]:
        assert epoch["samples_per_s"] == pytest.approx(
            epoch["timed_samples"] / epoch["timed_seconds"]
        )
    assert result["step_latency_s"]["n"] == timed["steps"]
    assert result["settings"]["warmup_steps"] == 3
    # every step is kept, warm-up included; the window is the sum of its steps
    assert [len(e) for e in result["steps"]["seconds"]] == [10, 10]
    flat = [s for e in result["steps"]["seconds"] for s in e]
    assert timed["seconds"] == pytest.approx(sum(flat[3:]))
    assert result["steady_state"]["classification"] == "fixed warm-up"


def test_training_warmup_longer_than_first_epoch():
    result, _ = _run(4, epochs=2, warmup=6)
    assert result["warmup"]["steps"] == 6
    assert result["epochs"][0]["timed_steps"] == 0
    assert result["epochs"][0]["samples_per_s"] is None
    assert result["epochs"][1]["timed_steps"] == 2
    assert result["step_latency_s"]["n"] == 2
    assert result["timed"]["samples"] == 2 * 4


def test_training_result_shape():
    result, _ = _run(8)
    assert result["kind"] == "training"
    assert result["model"]["parameters"] == 4
    assert math.isfinite(result["epochs"][0]["train_loss"])
    assert result["task"]["final"] == 0.5
    assert result["task"]["best_epoch"] == 1
    assert result["verification"]["all_on_device"] is True
    assert result["verification"]["cpu_fallback_ops"] == []
    assert result["settings"]["grad_scaler"] is False


def test_training_nan_loss_raises():
    with pytest.raises(NonFiniteLossError, match="nan"):
        _run(6, nan=True)


def test_training_injected_nan_loss_fault_raises():
    device = FakeDevice()
    ctx = _context(_spec(6), device, fault="nan_loss")
    with pytest.raises(NonFiniteLossError):
        run_training(_parts(6), ctx)


@pytest.mark.parametrize("accumulation, steps, optimizer_steps", [(1, 8, 8), (2, 8, 4), (3, 8, 3)])
def test_training_gradient_accumulation(accumulation, steps, optimizer_steps):
    calls: list = []
    result, _ = _run(steps, accumulation=accumulation, optimizer_steps=calls)
    assert result["settings"]["gradient_accumulation"] == accumulation
    assert result["settings"]["effective_batch_size"] == 4 * accumulation
    # A trailing partial accumulation is still applied at the end of the epoch.
    assert len(calls) == optimizer_steps


def test_training_rejects_empty_loader():
    device = FakeDevice()
    with pytest.raises(ValueError, match="not one full batch"):
        run_training(_parts(0), _context(_spec(4), device))


# ----------------------------------------------------------------------------- warnings


@pytest.fixture
def quiet_warnings():
    """capture_warnings re-shows every warning it records; keep them out of pytest's summary."""
    with warnings.catch_warnings():
        warnings.showwarning = lambda *args, **kwargs: None
        yield


FALLBACK_MSG = (
    "The operator 'aten::foo' is not currently supported on the MPS backend and will "
    "fall back to run on the CPU. This may have performance implications."
)


def test_capture_warnings_records_fallback_ops(quiet_warnings):
    with capture_warnings() as log:
        warnings.warn(FALLBACK_MSG, UserWarning, stacklevel=1)
        warnings.warn(FALLBACK_MSG, UserWarning, stacklevel=1)  # repeated: still seen
        warnings.warn("something else entirely", DeprecationWarning, stacklevel=1)
        warnings.warn(
            "In MPS autocast, but the target dtype is not supported. Disabling autocast.",
            UserWarning,
            stacklevel=1,
        )
    assert log.fallback_ops == ["aten::foo", "aten::foo"]
    assert len(log.autocast_disabled) == 1
    assert log.other == ["DeprecationWarning: something else entirely"]
    facts = log.as_dict()
    assert facts["cpu_fallback_ops"] == ["aten::foo"]


def test_capture_warnings_restores_state():
    before_show = warnings.showwarning
    before_always = torch.is_warn_always_enabled()
    with capture_warnings():
        assert torch.is_warn_always_enabled()
    assert warnings.showwarning is before_show
    assert torch.is_warn_always_enabled() == before_always


def test_training_reports_fallback_ops_from_context(quiet_warnings):
    device = FakeDevice()
    ctx = _context(_spec(4), device)
    with capture_warnings() as log:
        ctx.warnings = log
        warnings.warn(FALLBACK_MSG, UserWarning, stacklevel=1)
        result = run_training(_parts(4), ctx)
    assert result["verification"]["cpu_fallback_ops"] == ["aten::foo"]


# ----------------------------------------------------------------------------- placement


def test_verify_placement_flags_cpu_tensors_when_mps_expected():
    model = nn.Linear(3, 1)
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.randn(2, 3)).sum().backward()
    optimizer.step()
    batch = {"x": torch.randn(2, 3), "meta": "not a tensor"}

    facts = verify_placement(model, optimizer, batch, "mps")
    assert facts["batch"] == {"x": "cpu"}
    assert facts["checks"]["batch_on_device"] is False
    assert facts["checks"]["parameters_on_device"] is False
    assert facts["checks"]["optimizer_state_on_device"] is False
    assert facts["all_on_device"] is False

    facts = verify_placement(model, optimizer, batch, "cpu")
    assert facts["all_on_device"] is True
    assert facts["optimizer_state"] == ["cpu"]


# ----------------------------------------------------------------------------- per-step work


class CountingMemoryDevice(FakeDevice):
    """Counts per-step memory samples; ``per_step`` as an MPS device (no peak API)."""

    def __init__(self, per_step: bool):
        super().__init__()
        self.samples_memory_per_step = per_step
        self.samples = 0

    def sample_memory(self) -> None:
        self.samples += 1


@pytest.mark.parametrize(("per_step", "expected"), [(False, 0), (True, 3 * 6)])
def test_memory_is_sampled_inside_steps_only_where_the_device_needs_it(per_step, expected):
    device = CountingMemoryDevice(per_step)
    run_training(_parts(6), _context(_spec(6), device))
    # forward, backward and optimizer step of each of the 6 steps; none elsewhere
    assert device.samples == expected


def test_the_step_timer_starts_last_and_stops_first_around_the_region_clock(monkeypatch):
    """Its first mark is taken after every other tracker started and its region closes
    before any other tracker stops: their bookkeeping is in neither clock."""
    from trainbench.measure import training
    from trainbench.measure.trackers import HostActivity, MemoryTracker, StepTimer

    calls: list[str] = []
    for cls in (HostActivity, MemoryTracker, StepTimer):
        for name in ("start", "stop"):
            original = getattr(cls, name)

            def spy(self, *args, _original=original, _name=f"{cls.__name__}.{name}"):
                calls.append(_name)
                return _original(self, *args)

            monkeypatch.setattr(cls, name, spy)
    loop = training.TrainingLoop(_parts(4), _context(_spec(4), FakeDevice()))
    loop.train_steps(1, 4)
    assert calls[:3] == ["HostActivity.start", "MemoryTracker.start", "StepTimer.start"]
    assert calls[3:6] == ["StepTimer.stop", "MemoryTracker.stop", "HostActivity.stop"]


def test_training_runs_with_the_setup_heap_frozen_and_says_so(monkeypatch):
    import gc

    counts: list[int] = []
    parts = _parts(4)
    original = parts.loss_fn

    def loss_fn(model, batch):
        counts.append(gc.get_freeze_count())
        return original(model, batch)

    parts.loss_fn = loss_fn
    result = run_training(parts, _context(_spec(4), FakeDevice()))
    assert min(counts) > 0  # every step ran with the set-up's objects frozen
    assert gc.get_freeze_count() == 0  # and they are unfrozen after the timed regions
    assert "gc.freeze" in result["settings"]["garbage_collection"]


class _Encoder(nn.Module):
    """nn.TransformerEncoder's first Linear (self_attn.out_proj) never runs as a module:
    MultiheadAttention uses its weight directly."""

    def __init__(self):
        super().__init__()
        layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 1, enable_nested_tensor=False)
        self.head = nn.Linear(16, 2)

    def forward(self, x):
        return self.head(self.encoder(x).mean(1))


def _autocast_step(model, x, amp):
    from trainbench.measure.trackers import AutocastProbe, autocast_facts

    probe = AutocastProbe(model)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp.enabled):
        flag = torch.is_autocast_enabled("cpu")
        model(x).float().sum().backward()
    probe.remove()
    return autocast_facts(amp, flag, probe), probe


@pytest.mark.parametrize("enabled", [True, False])
def test_autocast_probe_sees_a_transformer_encoder(enabled):
    """Under autocast (bf16 on the CPU, as on CUDA) a transformer encoder is active; the
    probe once hooked only out_proj, which never runs, and called it not active."""
    torch.manual_seed(0)
    model = _Encoder()
    amp = AmpPolicy(enabled, "bfloat16" if enabled else None, False, "test")
    facts, probe = _autocast_step(model, torch.randn(4, 8, 16), amp)
    assert facts["autocast_active"] is enabled
    assert facts["autocast_output_dtype"] == ("bfloat16" if enabled else "float32")
    assert facts["autocast_probe_layer"] == "encoder.layers.0.self_attn"
    assert probe._handles == []  # removed: nothing stays on the timed steps
    assert not any(m._forward_hooks for m in model.modules())


def test_autocast_probe_skips_layers_autocast_casts_on_some_devices_only():
    """A GRU stays float32 under the CPU's bf16 autocast (its cuDNN kernel is cast on
    CUDA): the probe reads the first layer cast everywhere, the head."""

    class Gru(nn.Module):
        def __init__(self):
            super().__init__()
            self.gru = nn.GRU(16, 8, batch_first=True)
            self.head = nn.Linear(8, 2)

        def forward(self, x):
            return self.head(self.gru(x)[0][:, -1])

    amp = AmpPolicy(True, "bfloat16", False, "test")
    facts, _ = _autocast_step(Gru(), torch.randn(4, 5, 16), amp)
    assert facts["autocast_active"] is True
    assert facts["autocast_probe_layer"] == "head"


def test_autocast_probe_without_a_probed_layer_reads_the_flag():
    """A model of functional ops only: no layer answers, so the flag alone decides, and
    the record says so (never "not active" for want of a layer)."""

    class Functional(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.randn(16, 2))

        def forward(self, x):
            return x @ self.w

    amp = AmpPolicy(True, "bfloat16", False, "test")
    facts, _ = _autocast_step(Functional(), torch.randn(4, 16), amp)
    assert facts["autocast_active"] is True
    assert facts["autocast_output_dtype"] is None and facts["autocast_probe_layer"] is None
    assert facts["autocast_probe"].startswith("no Linear")


def test_calibration_passes_read_the_trackers_once_around_them(monkeypatch):
    """Each calibration pass is its own synchronized region, but the energy and host
    trackers read once around all of them: the energy's evaluation window gains one
    region for the calibration, the host's span still ends after the last pass."""
    from trainbench.measure.trackers.energy import EnergyTracker
    from trainbench.measure.trackers.host import HostActivity

    stops: dict[str, list] = {"energy": [], "host": []}
    energy_stop, host_stop = EnergyTracker.stop, HostActivity.stop

    def energy(self, kind, seconds):
        stops["energy"].append(kind)
        return energy_stop(self, kind, seconds)

    def host(self, kind, seconds):
        stops["host"].append((kind, time.perf_counter()))
        return host_stop(self, kind, seconds)

    monkeypatch.setattr(EnergyTracker, "stop", energy)
    monkeypatch.setattr(HostActivity, "stop", host)
    spec = _spec(8, epochs=1)
    spec["timing"].update(min_timed_seconds=0.002, max_eval_passes=2000)
    result = run_training(_parts(8), _context(spec, FakeDevice()))
    passes = result["eval"]["calibration"]["passes"]
    assert passes > 2 and result["eval"]["measured"]
    # one evaluation after the epoch (cold), then the calibration as one window
    assert stops["energy"].count(EVAL) == 2
    assert [k for k, _ in stops["host"]].count(EVAL) == 2
    assert result["energy"]["eval"]["regions"] == 2
    assert len(result["eval"]["passes"]) == 1 + passes
