"""Batches from in-memory tensors, through a real DataLoader.

A dataset that returns a whole batch per index list (via a BatchSampler) costs
one fancy-index per batch instead of a Python call and a collate per sample, so
the loader never starves the device, while the per-device DataLoader settings
(workers, pin_memory) still apply exactly as configured.
"""

from __future__ import annotations

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


def make_loader(
    dataset: BatchTensorDataset,
    batch_size: int,
    shuffle: bool,
    generator: torch.Generator | None,
    loader_kwargs: dict,
) -> DataLoader:
    """Training loaders shuffle with a seeded generator and drop the last partial
    batch (fixed shapes: MPS recompiles on every new shape); evaluation keeps it."""
    sampler = RandomSampler(dataset, generator=generator) if shuffle else SequentialSampler(dataset)
    batches = BatchSampler(sampler, batch_size=batch_size, drop_last=shuffle)
    return DataLoader(dataset, sampler=batches, batch_size=None, **loader_kwargs)
