"""Batches from in-memory tensors: through a real DataLoader, or staged on the device.

A dataset that returns a whole batch per index list (via a BatchSampler) costs
one fancy-index per batch instead of a Python call and a collate per sample, so
the loader never starves the device, while the per-device DataLoader settings
(workers, pin_memory) still apply exactly as configured.

On a GPU the whole data set can instead be copied to the device once
(``stage_on_device``): each step then gathers its batch there, with no host work,
no pinning and no host-to-device copy per step. The batch order is the one a
RandomSampler with the same generator gives, so both paths train identically.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch.utils.data import BatchSampler, DataLoader, Dataset, RandomSampler, SequentialSampler


class BatchTensorDataset(Dataset):
    """Named tensors of equal length; ``ds[list_of_indices]`` returns a batch dict."""

    def __init__(self, **tensors: torch.Tensor):
        lengths = {len(t) for t in tensors.values()}
        if len(lengths) != 1:
            raise ValueError(f"tensors differ in length: {lengths}")
        self.tensors = tensors
        self.length = lengths.pop()

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, indices) -> dict:
        index = torch.as_tensor(indices, dtype=torch.long)
        return {name: tensor[index] for name, tensor in self.tensors.items()}


class DeviceStagedLoader:
    """Every tensor of ``dataset`` on ``device``; batches gathered there."""

    on_device = True

    def __init__(
        self,
        dataset: BatchTensorDataset,
        batch_size: int,
        shuffle: bool,
        generator: torch.Generator | None,
        device: torch.device,
    ):
        self.device = device
        self.tensors = {name: t.to(device) for name, t in dataset.tensors.items()}
        self.length = len(dataset)
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.generator = generator
        self.drop_last = shuffle

    def __len__(self) -> int:
        full, rest = divmod(self.length, self.batch_size)
        return full if self.drop_last or not rest else full + 1

    def __iter__(self):
        if self.shuffle:  # the very order the DataLoader path's RandomSampler gives
            sampler = RandomSampler(range(self.length), generator=self.generator)
            order = torch.tensor(list(sampler), dtype=torch.long)
        else:
            order = torch.arange(self.length)
        if self.device.type == "cuda":
            order = order.pin_memory().to(self.device, non_blocking=True)
        else:
            order = order.to(self.device)
        for i in range(len(self)):
            index = order[i * self.batch_size : (i + 1) * self.batch_size]
            # index_select: one gather kernel, less host work than advanced indexing.
            yield {name: t.index_select(0, index) for name, t in self.tensors.items()}


def dataset_bytes(dataset: BatchTensorDataset) -> int:
    return sum(t.numel() * t.element_size() for t in dataset.tensors.values())


def make_loader(
    dataset: BatchTensorDataset,
    batch_size: int,
    shuffle: bool,
    generator: torch.Generator | None,
    loader_kwargs: dict,
) -> DataLoader | DeviceStagedLoader:
    """Training loaders shuffle with a seeded generator and drop the last partial
    batch (fixed shapes: MPS recompiles on every new shape); evaluation keeps it.
    With ``stage_on_device`` (a device string) and a data set within
    ``stage_limit_bytes``, the data set is staged on that device instead."""
    loader_kwargs = dict(loader_kwargs)
    stage_on = loader_kwargs.pop("stage_on_device", None)
    limit = loader_kwargs.pop("stage_limit_bytes", None)
    if stage_on and (limit is None or dataset_bytes(dataset) <= limit):
        return DeviceStagedLoader(dataset, batch_size, shuffle, generator, torch.device(stage_on))
    sampler = RandomSampler(dataset, generator=generator) if shuffle else SequentialSampler(dataset)
    batches = BatchSampler(sampler, batch_size=batch_size, drop_last=shuffle)
    return DataLoader(dataset, sampler=batches, batch_size=None, **loader_kwargs)


def staged_batches(loader: Iterable, device: torch.device, non_blocking: bool, prefetch: bool):
    """Batches already on the device. With ``prefetch`` on CUDA, the next batch is
    copied on a side stream while the current step computes, so the step never
    waits for its host-to-device copy."""
    if not (prefetch and device.type == "cuda"):
        for batch in loader:
            yield to_device(batch, device, non_blocking)
        return
    copy_stream = torch.cuda.Stream(device)
    host_batches = iter(loader)

    def copy_next():
        host = next(host_batches, None)
        if host is None:
            return None
        with torch.cuda.stream(copy_stream):
            return to_device(host, device, non_blocking)

    ahead = copy_next()
    while ahead is not None:
        compute_stream = torch.cuda.current_stream(device)
        compute_stream.wait_stream(copy_stream)
        batch = ahead
        for value in batch.values():
            if isinstance(value, torch.Tensor):
                value.record_stream(compute_stream)  # keep its memory until the step is done
        ahead = copy_next()
        yield batch


def copy_to(tensor: torch.Tensor, device: torch.device | str, non_blocking: bool = True):
    """``tensor`` on ``device``; every copy a cell makes goes through here.

    A copy to the host always blocks. A device-to-host copy with ``non_blocking=True``
    lands in pinned memory and returns *before the data has arrived*: the host would
    read whatever the buffer held (a freed block of the pinned-memory cache: another
    batch). This corrupted the CPU float64 reference of evaluation parity on CUDA when
    the evaluation data was staged on the device (docs/how-it-measures.md, "Handoffs
    between the host and the device"). A copy to an accelerator may be non-blocking:
    the device's stream runs it before any kernel queued after it reads the data, and
    the pinned-memory cache keeps the host buffer until the copy has run."""
    if not isinstance(device, torch.device):  # a loop's device already is one (per step)
        device = torch.device(device)
    return tensor.to(device, non_blocking=non_blocking and device.type != "cpu")


def host_float64(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` as a float64 copy on the host: copied out first, then cast there. The
    one way a cell turns a device tensor into float64. MPS has no float64: casting a
    device tensor raises (``TypeError: Cannot convert a MPS Tensor to float64``,
    pytorch#122602, by design), and a copy out that casts in the same call
    (``t.to("cpu", torch.float64)``) raises on torch 2.13 and on 2.14 writes nothing at
    all (pytorch#197715)."""
    return tensor.detach().cpu().to(torch.float64)


def to_device(batch: dict, device: torch.device | str, non_blocking: bool = True) -> dict:
    """Every tensor of ``batch`` on ``device`` (:func:`copy_to`: never a non-blocking
    copy to the host); other values unchanged."""
    return {
        k: (copy_to(v, device, non_blocking) if isinstance(v, torch.Tensor) else v)
        for k, v in batch.items()
    }


def batch_size_of(batch: dict) -> int:
    for value in batch.values():
        if isinstance(value, torch.Tensor):
            return int(value.shape[0])
    raise ValueError("batch holds no tensor")
