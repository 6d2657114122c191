"""The workload's ``data`` settings turned into a train and a dev split, whatever the source."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from trainbench.workloads.textdata.dataset import CONFIG_KEY, TextDataset
from trainbench.workloads.textdata.files import GOEMOTIONS_FOLDER, load_goemotions, load_table
from trainbench.workloads.textdata.proposals import generate_proposals

# Proposals' dev split is generated from a derived seed so it shares no document with train.
DEV_SEED_OFFSET = 1_000_003
DEFAULT_DEV_FRACTION = 0.2


def _count(data: dict, key: str, required: bool = False) -> int | None:
    value = data.get(key)
    if value is None:
        if required:
            raise ValueError(
                f"{CONFIG_KEY}.{key} is required for source 'proposals' "
                "(the number of documents to generate); set a positive integer"
            )
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(
            f"{CONFIG_KEY}.{key} = {value!r}; set a positive integer (or null for all rows)"
        )
    return int(value)


def _cap(dataset: TextDataset, n: int | None, seed: int, stream: int) -> TextDataset:
    """The first ``n`` rows of a seeded shuffle (kept in file order); all rows if None."""
    if n is None or n >= len(dataset):
        return dataset
    rng = np.random.default_rng([int(seed), stream])
    return dataset.subset(np.sort(rng.permutation(len(dataset))[:n]))


def _required_path(data: dict, key: str, what: str) -> Path:
    value = data.get(key)
    if not value:
        raise ValueError(f"{CONFIG_KEY}.{key} is required for source {data['source']!r}: {what}")
    return Path(value).expanduser()


def _table_splits(data: dict, seed: int) -> tuple[TextDataset, TextDataset]:
    """(train, dev) of source 'table': a separate dev file, or a seeded split of one file."""
    path = _required_path(data, "path", "the CSV/TSV file with the training rows")
    text_column = data.get("text_column") or "text"
    label_columns = data.get("label_columns") or None
    full = load_table(path, text_column, label_columns)
    if data.get("dev_path"):
        train = full
        dev = load_table(Path(data["dev_path"]).expanduser(), text_column, label_columns)
        if dev.label_names != train.label_names:
            raise ValueError(
                f"{CONFIG_KEY}.dev_path has label columns {dev.label_names} but "
                f"{CONFIG_KEY}.path has {train.label_names}; make them match or set "
                f"{CONFIG_KEY}.label_columns"
            )
        return train, dev
    fraction = data.get("dev_fraction")
    fraction = DEFAULT_DEV_FRACTION if fraction is None else fraction
    if isinstance(fraction, bool) or not 0.0 < float(fraction) < 1.0:
        raise ValueError(
            f"{CONFIG_KEY}.dev_fraction = {fraction!r}; set a number strictly between "
            f"0 and 1, or give a separate {CONFIG_KEY}.dev_path"
        )
    if len(full) < 2:
        raise ValueError(
            f"{path}: {len(full)} row(s) cannot be split into train and dev; add rows "
            f"or give {CONFIG_KEY}.dev_path"
        )
    order = np.random.default_rng([int(seed), 2]).permutation(len(full))
    k = min(max(1, round(len(full) * float(fraction))), len(full) - 1)
    dev, train = full.subset(np.sort(order[:k])), full.subset(np.sort(order[k:]))
    return train, dev


def load_splits(data: dict, seed: int) -> dict[str, TextDataset]:
    """{"train": ..., "dev": ...} from the workload's ``data`` settings."""
    source = data.get("source", "proposals")
    n_train, n_dev = (
        _count(data, "n_train", source == "proposals"),
        _count(data, "n_dev", source == "proposals"),
    )
    if source == "proposals":
        freqs = data.get("label_frequencies") or None
        return {
            "train": generate_proposals(n_train, seed, freqs),
            "dev": generate_proposals(n_dev, seed + DEV_SEED_OFFSET, freqs),
        }
    if source == "goemotions":
        folder = _required_path(data, "path", GOEMOTIONS_FOLDER)
        train, dev = load_goemotions(folder, "train"), load_goemotions(folder, "dev")
    elif source == "table":
        train, dev = _table_splits(data, seed)
    else:
        raise ValueError(
            f"{CONFIG_KEY}.source = {source!r}; use 'proposals', 'goemotions' or 'table'"
        )
    return {"train": _cap(train, n_train, seed, 0), "dev": _cap(dev, n_dev, seed, 1)}
