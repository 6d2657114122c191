"""Workload registry. A workload module provides ``run(ctx) -> dict`` and, when
``prepares_data`` is set, ``prepare_data(settings, out_dir, seed) -> dict`` (one
data artifact per workload, shared by every device and repeat). Modules import
lazily: parsing the workflow never imports torch."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import ModuleType


@dataclass(frozen=True)
class WorkloadInfo:
    module: str
    kind: str  # "training" or "microbenchmark"
    prepares_data: bool
    seed: str  # the seed document it reproduces
    # The workload keys its prepare_data reads: only they rebuild the data artifact
    # (and so rerun the cells); batch sizes, repeats, devices or timeouts never do.
    data_keys: tuple[str, ...] = ()


WORKLOADS: dict[str, WorkloadInfo] = {
    "image_cnn": WorkloadInfo("trainbench.workloads.image_cnn", "training", True, "002", ("data",)),
    "matmul": WorkloadInfo("trainbench.workloads.matmul", "microbenchmark", False, "004"),
    "text_multilabel": WorkloadInfo(
        "trainbench.workloads.text_multilabel",
        "training",
        True,
        "000",
        ("data", "model", "tokenizer", "max_length"),
    ),
    "two_tower": WorkloadInfo(
        "trainbench.workloads.two_tower",
        "training",
        True,
        "003",
        ("data", "mine_schedule", "mining"),
    ),
    "clip": WorkloadInfo("trainbench.workloads.clip", "training", True, "004", ("data",)),
}


def info(name: str) -> WorkloadInfo:
    try:
        return WORKLOADS[name]
    except KeyError:
        raise ValueError(
            f"unknown workload {name!r}; known: {', '.join(sorted(WORKLOADS))}"
        ) from None


def get(name: str) -> ModuleType:
    return importlib.import_module(info(name).module)
