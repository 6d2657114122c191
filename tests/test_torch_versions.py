"""The measurement code on a torch older than the pinned one (torch 2.5.1 lacks
``torch.accelerator``): feature detection, never a version pin. Each test removes the
API from the torch in hand, so it runs (and can fail) under the pinned torch too; under
2.5.1 the API is absent already."""

from __future__ import annotations

import pytest
import torch
import trainbench.measure.mps_device as mps_device
from trainbench.measure.device_base import torch_version_tuple
from trainbench.measure.devices import MpsDevice, fused_optimizer
from trainbench.measure.mps_emulator import native


@pytest.fixture
def no_accelerator_api(monkeypatch):
    """This torch as torch 2.5 was: no ``torch.accelerator``."""
    monkeypatch.delattr(torch, "accelerator", raising=False)


def test_the_emulator_refuses_a_torch_without_the_accelerator_api(no_accelerator_api, monkeypatch):
    """A clear refusal naming the missing API and the fix, before anything is compiled
    (a 2.5 compile fails with a page of C++ 'does not override' errors)."""

    def build():
        raise AssertionError("compiled the shim on a torch that cannot host it")

    monkeypatch.setattr(native, "build", build)
    with pytest.raises(native.EmulatorUnavailable) as refused:
        native.register()
    message = str(refused.value)
    assert "no torch.accelerator" in message and torch.__version__ in message
    assert "Fix: run the emulator under the torch pyproject.toml pins" in message


def test_the_emulator_check_passes_where_the_api_exists(monkeypatch):
    monkeypatch.setattr(torch, "accelerator", object(), raising=False)
    native.check_torch()  # no refusal


def test_mps_peak_is_sampled_and_named_so_without_the_accelerator_api(
    no_accelerator_api, monkeypatch
):
    """No allocator peak to read: the steps sample the peak, and the record's method
    says it is a sampled lower bound."""
    used = iter([100, 300, 200])
    monkeypatch.setattr(torch.mps, "current_allocated_memory", lambda: next(used))
    monkeypatch.setattr(torch.mps, "driver_allocated_memory", lambda: 4096, raising=False)
    assert mps_device._accelerator_memory("max_memory_allocated") is mps_device.REFUSED
    device = MpsDevice()
    device.reset_peak_memory()  # reads 100
    assert device.samples_memory_per_step is True
    device.sample_memory()  # 300
    device.sample_memory()  # 200
    reading = device.memory_reading(None)
    assert reading.peak_bytes == 300
    assert reading.method == mps_device.SAMPLED_PEAK_METHOD


@pytest.mark.parametrize(
    ("version", "expected"),
    [("2.5.1+cu124", (2, 5)), ("2.13.0+cpu", (2, 13)), ("2.6.0a0+git1234", (2, 6))],
)
def test_torch_version_of_a_local_build_label(monkeypatch, version, expected):
    monkeypatch.setattr(torch, "__version__", version)
    assert torch_version_tuple() == expected


def test_fused_optimizer_on_mps_follows_the_torch_in_hand(monkeypatch):
    """'auto' asks for MPS's fused Adam only from the torch that has it; elsewhere
    torch's own choice (None), and CUDA always fused."""
    monkeypatch.setattr(torch, "__version__", "2.5.1+cu124")
    assert fused_optimizer("auto", "mps") is None
    assert fused_optimizer("auto", "cuda") is True
    assert fused_optimizer("auto", "cpu") is None
    monkeypatch.setattr(torch, "__version__", "2.13.0+cpu")
    assert fused_optimizer("auto", "mps") is True
