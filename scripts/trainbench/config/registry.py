"""The workload registry: bundled workloads and your own (what the config may name).

A training workload is a function ``build(ctx) -> TrainingParts`` (model, optimizer,
loaders, loss function, evaluation; see :class:`trainbench.measure.training.TrainingParts`),
named by an entry ``"package.module:function"``. The bundled workloads are entries
too (``trainbench.workloads.image_cnn:build_parts``); your own is a config key:

    workloads:
      mine:
        entry: "my_model:build"       # my_model.py in the working directory
        batch_sizes: [32, 128]
        settings: {hidden: 64}        # free-form, ctx.workload_settings["settings"]

Every training workload then runs through the one training loop
(:func:`trainbench.measure.training.run_training`): same timing, trackers, canary, records.
A bundled workload may also prepare a shared data artifact once
(``prepare_data(settings, out_dir, seed) -> dict``). The matmul microbenchmark has a
``run(ctx)`` of its own. Modules import lazily: parsing the workflow imports no torch.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any


@dataclass(frozen=True)
class WorkloadInfo:
    module: str
    kind: str  # "training" or "microbenchmark"
    prepares_data: bool
    seed_report: str  # the seed report it reproduces (../shared/seeds: "002"), "—" for your own
    # The workload keys its prepare_data reads: only they rebuild the data artifact
    # (and so rerun the cells); batch sizes, repeats, devices or timeouts never do.
    data_keys: tuple[str, ...] = ()
    entry: str | None = None  # "module:function" building its TrainingParts
    bundled: bool = True


WORKLOADS: dict[str, WorkloadInfo] = {
    "image_cnn": WorkloadInfo(
        "trainbench.workloads.image_cnn",
        "training",
        True,
        "002",
        ("data",),
        "trainbench.workloads.image_cnn:build_parts",
    ),
    "matmul": WorkloadInfo("trainbench.workloads.matmul", "microbenchmark", False, "004"),
    "text_multilabel": WorkloadInfo(
        "trainbench.workloads.text_multilabel",
        "training",
        True,
        "000",
        ("data", "model", "tokenizer", "max_length"),
        "trainbench.workloads.text_multilabel:build_parts",
    ),
    "two_tower": WorkloadInfo(
        "trainbench.workloads.two_tower",
        "training",
        True,
        "003",
        ("data", "mine_schedule", "mining"),
        "trainbench.workloads.two_tower:build_parts",
    ),
    "clip": WorkloadInfo(
        "trainbench.workloads.clip",
        "training",
        True,
        "004",
        ("data",),
        "trainbench.workloads.clip:build_parts",
    ),
}


def custom_info(entry: str) -> WorkloadInfo:
    """The registry entry of your own workload (its config names ``entry``)."""
    return WorkloadInfo(entry.split(":", 1)[0], "training", False, "—", (), entry, False)


def info(name: str, settings: Mapping | None = None) -> WorkloadInfo:
    """A bundled workload by name, or your own from its config ``settings`` (which
    hold ``entry``)."""
    if name in WORKLOADS:
        return WORKLOADS[name]
    if settings is not None and settings.get("entry"):
        return custom_info(settings["entry"])
    raise ValueError(
        f"unknown workload {name!r}; known: {', '.join(sorted(WORKLOADS))}, or your own "
        "with `entry: module:function`"
    )


def get(name: str) -> ModuleType:
    """The module of a bundled workload (prepare_data, build_parts, run)."""
    return importlib.import_module(info(name).module)


def load_entry(entry: str, search_path: Sequence[str | Path] = ()) -> Callable[[Any], Any]:
    """The function an entry ``"package.module:function"`` names; ``search_path``
    folders are tried first (your model's folder, default the working directory)."""
    module_name, _, function = entry.partition(":")
    for folder in reversed([str(Path(p).resolve()) for p in search_path]):
        if folder not in sys.path:
            sys.path.insert(0, folder)
    module = importlib.import_module(module_name)
    try:
        return getattr(module, function)
    except AttributeError:
        raise ImportError(f"{module_name} has no function {function!r} (entry {entry!r})") from None
