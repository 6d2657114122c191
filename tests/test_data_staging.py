"""Staging a data set on the device: the same batches, in the same order, as the
DataLoader path, and a fall-back to the DataLoader for data sets too large."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from trainbench.measure import devices
from trainbench.measure.data import BatchTensorDataset, DeviceStagedLoader, make_loader


def dataset(n: int = 50) -> BatchTensorDataset:
    return BatchTensorDataset(x=torch.arange(n * 3).reshape(n, 3).float(), y=torch.arange(n))


@pytest.mark.parametrize("shuffle", [True, False])
def test_staged_batches_equal_the_dataloader_batches(shuffle):
    plain = make_loader(dataset(), 8, shuffle, torch.Generator().manual_seed(7), {})
    staged = make_loader(
        dataset(),
        8,
        shuffle,
        torch.Generator().manual_seed(7),
        {"stage_on_device": "cpu", "stage_limit_bytes": 10**6},
    )
    assert isinstance(staged, DeviceStagedLoader)
    assert len(staged) == len(plain) == (6 if shuffle else 7)  # training drops the partial batch
    for _epoch in range(2):  # the generator advances the same way every epoch
        for a, b in zip(plain, staged, strict=True):
            assert torch.equal(a["x"], b["x"]) and torch.equal(a["y"], b["y"])


def test_a_data_set_over_the_limit_uses_the_dataloader():
    loader = make_loader(
        dataset(), 8, True, None, {"stage_on_device": "cpu", "stage_limit_bytes": 10}
    )
    assert isinstance(loader, torch.utils.data.DataLoader)


def test_cuda_settings_ask_for_staging_within_a_share_of_gpu_memory(monkeypatch):
    monkeypatch.setattr(
        torch.cuda, "get_device_properties", lambda index: SimpleNamespace(total_memory=8 * 2**30)
    )
    dev = devices.CudaDevice(
        {
            "num_workers": 0,
            "pin_memory": True,
            "stage_data_on_device": True,
            "stage_memory_fraction": 0.25,
        }
    )
    kwargs = dev.dataloader_kwargs()
    assert kwargs["stage_on_device"] == "cuda:0"
    assert kwargs["stage_limit_bytes"] == 2 * 2**30
    off = devices.CudaDevice({"stage_data_on_device": False}).dataloader_kwargs()
    assert "stage_on_device" not in off
