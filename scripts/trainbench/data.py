"""Deprecated import path (an earlier README's own-model example): use
``from trainbench import BatchTensorDataset, make_loader, to_device``."""

import warnings

from trainbench.measure.data import BatchTensorDataset, make_loader, to_device

warnings.warn(
    "trainbench.data is deprecated and will be removed; use "
    "`from trainbench import BatchTensorDataset, make_loader, to_device`",
    DeprecationWarning,
    stacklevel=2,
)

__all__ = ["BatchTensorDataset", "make_loader", "to_device"]
