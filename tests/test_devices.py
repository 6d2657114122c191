"""The device layer: availability, AMP policy, loader defaults, MPS feature detection."""

from __future__ import annotations

import types

import pytest
import torch
import trainbench.measure.devices as devices
import trainbench.measure.mps_device as mps_device
from trainbench.measure.devices import CpuDevice, CudaDevice, MpsDevice, get_device

# ----------------------------------------------------------------------------- CPU


def test_cpu_is_always_available():
    available, reason = CpuDevice().availability()
    assert available is True
    assert "CPU" in reason
    assert CpuDevice().torch_device() == torch.device("cpu")


def test_cpu_amp_policy_default_is_off():
    policy = CpuDevice().amp_policy()
    assert (policy.enabled, policy.dtype, policy.scaler) == (False, None, False)
    assert "off" in policy.reason


@pytest.mark.parametrize("requested", ["off", False, None])
def test_cpu_amp_policy_explicit_off(requested):
    # None as the argument means "use the settings"; here the settings say bf16.
    device = CpuDevice({"autocast": "bf16" if requested is None else "off"})
    policy = device.amp_policy(requested)
    if requested is None:
        assert policy.enabled and policy.dtype == "bfloat16"
    else:
        assert not policy.enabled and policy.dtype is None


@pytest.mark.parametrize(
    "requested, enabled, dtype",
    [("auto", False, None), ("bf16", True, "bfloat16"), ("fp16", True, "float16")],
)
def test_cpu_amp_policy_never_scales(requested, enabled, dtype):
    policy = CpuDevice().amp_policy(requested)
    assert policy.enabled is enabled
    assert policy.dtype == dtype
    assert policy.scaler is False
    assert CpuDevice().make_grad_scaler(policy) is None


def test_cpu_dataloader_kwargs_defaults():
    assert CpuDevice().dataloader_kwargs() == {
        "num_workers": 0,
        "pin_memory": False,
        "persistent_workers": False,
    }


def test_cpu_dataloader_kwargs_never_pins_and_keeps_workers():
    kwargs = CpuDevice({"num_workers": 2, "pin_memory": True}).dataloader_kwargs()
    assert kwargs == {"num_workers": 2, "pin_memory": False, "persistent_workers": True}


def test_cuda_dataloader_pins_when_asked():
    kwargs = CudaDevice({"num_workers": 0, "pin_memory": True}).dataloader_kwargs()
    assert kwargs["pin_memory"] is True
    assert kwargs["persistent_workers"] is False


def test_cpu_apply_settings_reports_threads_in_force():
    before = torch.get_num_threads()
    try:
        in_force = CpuDevice({"threads": before}).apply_settings()
    finally:
        torch.set_num_threads(before)
    assert in_force["torch_threads"] == before
    assert in_force["deterministic"] is False


def test_cpu_has_no_events_and_host_memory():
    device = CpuDevice()
    assert device.make_event() is None
    device.synchronize()  # no-op, must not raise
    assert device.current_memory_bytes() > 0
    reading = device.memory_reading(123)
    assert reading.initial_bytes == 123
    assert reading.peak_bytes > 0
    assert "RSS" in reading.method


def test_get_device_unknown_backend():
    with pytest.raises(ValueError, match="tpu"):
        get_device("tpu")
    assert isinstance(get_device("mps"), MpsDevice)


# ----------------------------------------------------------------------------- CUDA


@pytest.mark.skipif(torch.backends.cuda.is_built(), reason="needs a CPU-only torch build")
def test_cuda_unavailable_on_cpu_build_names_the_build():
    available, reason = CudaDevice().availability()
    assert available is False
    assert torch.__version__ in reason
    assert "CUDA" in reason


def _patch_bf16(monkeypatch, supported: bool):
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: supported)


@pytest.mark.parametrize(
    "bf16_ok, requested, dtype, scaler",
    [
        (True, "auto", "bfloat16", False),
        (False, "auto", "float16", True),
        (True, "bf16", "bfloat16", False),
        (False, "bf16", "float16", True),
        (True, "fp16", "float16", True),
        (False, "fp16", "float16", True),
    ],
)
def test_cuda_amp_policy(monkeypatch, bf16_ok, requested, dtype, scaler):
    _patch_bf16(monkeypatch, bf16_ok)
    policy = CudaDevice().amp_policy(requested)
    assert policy.enabled is True
    assert policy.dtype == dtype
    assert policy.scaler is scaler


def test_cuda_amp_default_setting_is_respected(monkeypatch):
    _patch_bf16(monkeypatch, True)
    assert CudaDevice().amp_policy().enabled is False  # no setting -> off
    assert CudaDevice({"autocast": "auto"}).amp_policy().dtype == "bfloat16"


# ----------------------------------------------------------------------------- MPS


def test_mps_not_built_is_unavailable_with_reason(monkeypatch):
    monkeypatch.setattr(torch.backends.mps, "is_built", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    available, reason = MpsDevice().availability()
    assert available is False
    assert "without MPS" in reason
    assert torch.__version__ in reason


def test_mps_built_but_not_available(monkeypatch):
    monkeypatch.setattr(torch.backends.mps, "is_built", lambda: True)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    available, reason = MpsDevice().availability()
    assert available is False
    assert "is_available() is False" in reason


def test_mps_missing_backend_module(monkeypatch):
    monkeypatch.setattr(torch.backends, "mps", types.SimpleNamespace())
    available, reason = MpsDevice().availability()
    assert available is False
    assert "no torch.backends.mps" in reason


def test_mps_available_when_patched(monkeypatch):
    monkeypatch.setattr(torch.backends.mps, "is_built", lambda: True)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    available, reason = MpsDevice().availability()
    assert available is True
    assert "MPS available" in reason
    assert MpsDevice().torch_device().type == "mps"


def test_mps_sampled_peak_memory(monkeypatch):
    values = iter([5, 100, 700, 300, 50])  # the first: reset's read (the allocator's first use)
    monkeypatch.setattr(torch.mps, "current_allocated_memory", lambda: next(values))
    monkeypatch.setattr(torch.mps, "driver_allocated_memory", lambda: 4096)
    monkeypatch.setattr(torch.mps, "recommended_max_memory", lambda: 8192)
    device = MpsDevice()
    device.reset_peak_memory()
    for _ in range(4):
        device.sample_memory()
    reading = device.memory_reading(10)
    assert reading.initial_bytes == 10
    assert reading.peak_bytes == 700
    assert "sampled peak" in reading.method
    assert reading.extra["driver_allocated_bytes_at_end"] == 4096
    assert reading.extra["recommended_max_memory_bytes"] == 8192
    # the cap in force: MPS's default high watermark 1.7 x the recommended working set
    assert device.memory_limit_bytes() == int(8192 * 1.7)
    assert "high watermark ratio 1.7 (MPS default)" in reading.extra["limit_method"]


def test_mps_reset_peak_memory_forgets_old_samples(monkeypatch):
    values = iter([900, 0, 20, 30])
    monkeypatch.setattr(torch.mps, "current_allocated_memory", lambda: next(values))
    device = MpsDevice()
    device.sample_memory()
    device.reset_peak_memory()
    assert device.memory_reading(None).peak_bytes is None
    device.sample_memory()
    device.sample_memory()
    assert device.memory_reading(None).peak_bytes == 30


def _bare_mps(monkeypatch, **attrs):
    """Replace torch.mps with a namespace holding only ``attrs`` (an old or odd torch)."""
    monkeypatch.setattr(torch, "mps", types.SimpleNamespace(**attrs))


@pytest.mark.parametrize(
    "attrs",
    [
        {},  # torch.mps exists but has none of the functions
        {"synchronize": lambda: None, "empty_cache": lambda: None},  # only the oldest API
    ],
    ids=["empty", "oldest"],
)
def test_mps_methods_degrade_without_api(monkeypatch, attrs):
    _bare_mps(monkeypatch, **attrs)
    device = MpsDevice({"memory_fraction": 0.8})
    device.synchronize()
    assert device.make_event() is None
    assert device.current_memory_bytes() is None
    device.reset_peak_memory()
    device.sample_memory()
    reading = device.memory_reading(None)
    assert reading.peak_bytes is None
    assert reading.extra["driver_allocated_bytes_at_end"] is None
    assert reading.extra["recommended_max_memory_bytes"] is None
    in_force = device.apply_settings()
    assert in_force["memory_fraction"] is None  # could not be applied: not claimed
    device.empty_cache()
    assert device.memory_limit_bytes() is None
    assert device.facts()["recommended_max_memory_bytes"] is None


def test_mps_methods_degrade_without_torch_mps(monkeypatch):
    monkeypatch.delattr(torch, "mps")
    device = MpsDevice({"memory_fraction": 0.5})
    device.synchronize()
    assert device.make_event() is None
    assert device.current_memory_bytes() is None
    assert device.memory_reading(None).peak_bytes is None
    assert device.apply_settings()["memory_fraction"] is None
    device.empty_cache()
    assert device.memory_limit_bytes() is None


def test_mps_functions_that_raise_are_not_measured(monkeypatch):
    def boom(*args):
        raise RuntimeError("Cannot execute without MPS backend")

    for name in (
        "synchronize",
        "current_allocated_memory",
        "driver_allocated_memory",
        "recommended_max_memory",
        "set_per_process_memory_fraction",
        "empty_cache",
    ):
        monkeypatch.setattr(torch.mps, name, boom)
    device = MpsDevice({"memory_fraction": 0.8})
    device.synchronize()
    assert device.current_memory_bytes() is None
    device.sample_memory()
    assert device.memory_reading(None).peak_bytes is None
    assert device.memory_limit_bytes() is None
    device.empty_cache()
    # The fraction was refused, so it must not be reported as in force.
    assert device.apply_settings()["memory_fraction"] is None


def test_mps_event_feature_detection(monkeypatch):
    class FakeEvent:
        def __init__(self, enable_timing=False):
            self.enable_timing = enable_timing

    _bare_mps(monkeypatch, event=types.SimpleNamespace(Event=FakeEvent))
    event = MpsDevice().make_event()
    assert isinstance(event, FakeEvent) and event.enable_timing is True

    def refuse(enable_timing=False):
        raise RuntimeError("no MPS")

    _bare_mps(monkeypatch, event=types.SimpleNamespace(Event=refuse))
    assert MpsDevice().make_event() is None
    _bare_mps(monkeypatch, event=types.SimpleNamespace())
    assert MpsDevice().make_event() is None


def test_mps_apply_settings_sets_memory_fraction(monkeypatch):
    calls = []
    monkeypatch.setattr(torch.mps, "set_per_process_memory_fraction", calls.append)
    in_force = MpsDevice({"memory_fraction": 0.65}).apply_settings()
    assert calls == [0.65]
    assert in_force["memory_fraction"] == 0.65


def test_mps_apply_settings_without_fraction_does_not_call(monkeypatch):
    calls = []
    monkeypatch.setattr(torch.mps, "set_per_process_memory_fraction", calls.append)
    monkeypatch.setenv("PYTORCH_ENABLE_MPS_FALLBACK", "1")
    monkeypatch.setenv("PYTORCH_MPS_HIGH_WATERMARK_RATIO", "1.0")
    in_force = MpsDevice({"memory_fraction": None}).apply_settings()
    assert calls == []
    assert in_force["memory_fraction"] is None
    assert in_force["cpu_fallback_enabled"] is True
    assert in_force["high_watermark_ratio"] == 1.0  # parsed as MPS does (strtod)
    assert in_force["high_watermark_source"] == "PYTORCH_MPS_HIGH_WATERMARK_RATIO"


@pytest.mark.parametrize(
    "version, scaler",
    [((2, 7), False), ((2, 8), True), ((2, 13), True), ((1, 13), False), ((3, 0), True)],
)
def test_mps_fp16_scaler_needs_torch_2_8(monkeypatch, version, scaler):
    monkeypatch.setattr(mps_device, "torch_version_tuple", lambda: version)
    for requested in ("fp16", "auto"):
        policy = MpsDevice().amp_policy(requested)
        assert policy.enabled is True
        assert policy.dtype == "float16"
        assert policy.scaler is scaler


@pytest.mark.parametrize("version", [(2, 7), (2, 8)])
def test_mps_bf16_never_scales(monkeypatch, version):
    monkeypatch.setattr(mps_device, "torch_version_tuple", lambda: version)
    policy = MpsDevice().amp_policy("bf16")
    assert policy.enabled is True
    assert policy.dtype == "bfloat16"
    assert policy.scaler is False
    assert MpsDevice().make_grad_scaler(policy) is None


def test_mps_amp_default_setting_is_fp16_when_configured(monkeypatch):
    monkeypatch.setattr(mps_device, "torch_version_tuple", lambda: (2, 8))
    assert MpsDevice({"autocast": "fp16"}).amp_policy().dtype == "float16"
    assert MpsDevice({"autocast": "off"}).amp_policy().enabled is False


@pytest.mark.parametrize(
    "version, expected",
    [("2.13.0+cpu", (2, 13)), ("2.8.0", (2, 8)), ("2.10.0a0+git123", (2, 10)), ("weird", (0, 0))],
)
def test_torch_version_tuple(monkeypatch, version, expected):
    monkeypatch.setattr(torch, "__version__", version)
    assert devices.torch_version_tuple() == expected


def test_mps_peak_from_the_allocator_where_torch_has_one(monkeypatch):
    """torch 2.13's MPS allocator is a device allocator (pytorch#186748): its own peak,
    named, and no sampling inside the steps; where it raises, the sampled peak."""
    stats = {"allocated_bytes.all.peak": 4242}
    monkeypatch.setattr(torch.mps, "current_allocated_memory", lambda: 7)
    monkeypatch.setattr(torch.accelerator, "current_accelerator", lambda: torch.device("mps"))
    monkeypatch.setattr(torch.accelerator, "reset_peak_memory_stats", lambda *a: None)
    monkeypatch.setattr(torch.accelerator, "memory_stats", lambda *a: stats)
    monkeypatch.setattr(torch.accelerator, "max_memory_allocated", lambda *a: 4242)
    device = MpsDevice()
    device.reset_peak_memory()
    assert device.samples_memory_per_step is False
    reading = device.memory_reading(None)
    assert reading.peak_bytes == 4242 and "max_memory_allocated" in reading.method

    def not_a_device_allocator(*_a):
        raise RuntimeError("Allocator for mps is not a DeviceAllocator.")

    monkeypatch.setattr(torch.accelerator, "reset_peak_memory_stats", not_a_device_allocator)
    device.reset_peak_memory()
    assert device.samples_memory_per_step is True
    device.sample_memory()
    assert "sampled peak" in device.memory_reading(None).method


def test_mps_memory_limit_is_the_cap_in_force(monkeypatch):
    """The collapse rule compares with the allocator's cap: the memory fraction where
    one was set (it replaces the environment's high ratio), else the variable."""
    monkeypatch.setattr(torch.mps, "recommended_max_memory", lambda: 1000)
    monkeypatch.setattr(torch.mps, "set_per_process_memory_fraction", lambda f: None)
    monkeypatch.setenv("PYTORCH_MPS_HIGH_WATERMARK_RATIO", "1.0")
    device = MpsDevice({"memory_fraction": 0.5})
    in_force = device.apply_settings()
    assert in_force["high_watermark_ratio"] == 0.5
    assert in_force["high_watermark_source"] == "set_per_process_memory_fraction"
    assert device.memory_limit_bytes() == 500
    plain = MpsDevice({})
    plain.apply_settings()
    assert plain.memory_limit_bytes() == 1000
    monkeypatch.setenv("PYTORCH_MPS_HIGH_WATERMARK_RATIO", "0.0")  # no cap: the working set
    assert plain.memory_limit_bytes() == 1000 and "no high watermark" in plain.memory_limit_method()


@pytest.mark.parametrize(
    "version, device_type, fused",
    [
        ((2, 13), "mps", True),
        ((2, 12), "mps", None),
        ((2, 8), "cuda", True),
        ((2, 13), "cpu", None),
    ],
)
def test_fused_adam_on_mps_from_2_13_as_on_cuda(monkeypatch, version, device_type, fused):
    """From 2.13 the MPS fused kernel honours GradScaler (pytorch#186360), and then no
    .item() per step (GradScaler's _maybe_opt_step) is paid on MPS either."""
    monkeypatch.setattr(devices, "torch_version_tuple", lambda: version)
    assert devices.fused_optimizer("auto", device_type) is fused
    assert devices.fused_optimizer(False, device_type) is False
