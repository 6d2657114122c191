"""Checks of a config that its schema cannot express: files that must exist, optional
packages, entries that must import, thread counts, baselines, faults aimed at real
cells, repeat settings; and config files that must parse. Each problem is one
sentence naming the key and the fix, reported before any job starts."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from trainbench.common import mps_memory
from trainbench.config.entry_check import entry_problems
from trainbench.config.matrix import (
    FAULTS_ENV,
    MIN_COMPILE_WARMUP_STEPS,
    all_batch_sizes,
    device_variants,
    iter_device_ids,
)
from trainbench.config.names import name_problem
from trainbench.config.registry import WORKLOADS
from trainbench.config.targets import target_problems


def semantic_problems(config: dict) -> list[str]:
    """Checks a JSON Schema cannot express: files that must exist, optional packages."""
    problems: list[str] = []
    devices = set(config["devices"])
    for name, wl in config["workloads"].items():
        for dev in wl.get("devices", []):
            if dev not in devices:
                problems.append(
                    f"`workloads.{name}.devices` names {dev!r}, which is not in the top-level "
                    f"`devices` {sorted(devices)}. Fix: add it there or remove it here."
                )
        data = wl.get("data") or {}
        source = data.get("source")
        problems += _data_path_problems(name, data)
        problems += _full_batch_problems(name, wl, data)
        pretrained = (wl.get("model") or {}).get("pretrained")
        if pretrained:
            problem = pretrained_problem(pretrained)
            if problem:
                problems.append(f"`workloads.{name}.model.pretrained`: {problem}")
        if source == "torchvision" and importlib.util.find_spec("torchvision") is None:
            problems.append(
                f"`workloads.{name}.data.source` is torchvision, but torchvision is not "
                "installed. Fix: `pip install -e .[vision]` (needs a torchvision build that "
                "matches your torch), or use source synthetic, digits or mnist_idx."
            )
    for i, folder in enumerate(config.get("aggregate", {}).get("include_results", [])):
        key, fix = f"aggregate.include_results[{i}]", "name a results folder written by trainbench"
        problem = path_problem(key, folder, "folder", fix)
        if problem is None and not (Path(folder) / "runs").is_dir():
            problem = f"`{key}` = {folder!r} has no runs/ folder. Fix: {fix} (it holds runs/)."
        if problem:
            problems.append(problem)
    for name, wl in config["workloads"].items():
        modes = wl.get("compile") or []
        if isinstance(modes, dict):
            modes = [m for per_backend in modes.values() for m in per_backend]
        compiled = sorted({m for m in modes if m != "eager"})
        # Compilation (and CUDA-graph recording) must land in warm-up, never in timing.
        if compiled and wl["warmup_steps"] < MIN_COMPILE_WARMUP_STEPS:
            problems.append(
                f"`workloads.{name}.warmup_steps` is {wl['warmup_steps']}, but compile "
                f"{compiled} needs at least {MIN_COMPILE_WARMUP_STEPS} warm-up steps so that "
                f"compilation stays out of the timed steps. Fix: set warmup_steps to "
                f"{MIN_COMPILE_WARMUP_STEPS} or more."
            )
    problems += _entry_problems(config)
    problems += target_problems(config)
    problems += _repeat_problems(config)
    faults = config.get("fault_injection") or []
    if faults and not (config["launcher"]["allow_fault_injection"] or _faults_allowed_by_env()):
        problems.append(
            "`fault_injection` is set but `launcher.allow_fault_injection` is false. "
            "Fault injection is for tests only; remove `fault_injection` from the config."
        )
    problems += _fault_problems(config, faults)
    if not config.get("aggregate", {}).get("records_only"):  # no cell runs here then
        problems += _thread_problems(config)
    problems += _baseline_problems(config)
    problems += compare_problems(config.get("aggregate", {}))
    problems += mps_memory_problems(config)
    return problems


def mps_memory_problems(config: dict) -> list[str]:
    """MPS's watermark pair as its allocator checks it at a cell's first allocation (a
    refusal there would fail every MPS cell), and two keys that set the same cap."""
    if "mps" not in config["devices"]:
        return []
    key = "device_settings.mps"
    mps = config["device_settings"].get("mps") or {}
    high, low, fraction = (
        mps.get("high_watermark_ratio"), mps.get("low_watermark_ratio"), mps.get("memory_fraction")
    )  # fmt: skip
    problems = []
    if high is not None and fraction is not None:
        problems.append(
            f"`{key}.memory_fraction` ({fraction:g}) and `{key}.high_watermark_ratio` "
            f"({high:g}) both set MPS's high watermark: set_per_process_memory_fraction "
            "replaces PYTORCH_MPS_HIGH_WATERMARK_RATIO at the cell's start, so only the "
            "fraction would hold. Fix: keep one, e.g. `memory_fraction: null`."
        )
    env = {}
    if high is not None:
        env[mps_memory.HIGH_VARIABLE] = str(high)
    if low is not None:
        env[mps_memory.LOW_VARIABLE] = str(low)
    high_in, low_in = mps_memory.ratios_from(env)
    refused = mps_memory.watermark_problem(high_in, low_in)
    if refused:
        shown_low = f"{low:g}" if low is not None else f"unset (MPS's default {low_in:g})"
        fix = (
            f"set `{key}.low_watermark_ratio` to at most {high_in:g} (e.g. {high_in * 0.8:g})"
            if high_in
            else f"set `{key}.low_watermark_ratio` to at most {mps_memory.HIGH_UPPER_BOUND:g}"
        )
        problems.append(
            f"`{key}.high_watermark_ratio` is {high_in:g} and `{key}.low_watermark_ratio` "
            f"is {shown_low}: MPS's allocator refuses the pair at the first allocation "
            f'("{refused}"), so every MPS cell would fail. Fix: {fix}, or raise the high '
            "ratio to at least the low one."
        )
    return problems


def _full_batch_problems(name: str, wl: dict, data: dict) -> list[str]:
    """A training split of ``data.n_train`` samples smaller than a batch size: no full
    batch would run, and the record would claim a batch size that never ran."""
    n_train = data.get("n_train")
    sizes = [bs for bs in all_batch_sizes(wl) if isinstance(bs, int)]
    too_big = sorted(bs for bs in sizes if isinstance(n_train, int) and bs > n_train)
    if not too_big:
        return []
    return [
        f"`workloads.{name}.batch_sizes` has {too_big}, larger than "
        f"`workloads.{name}.data.n_train` ({n_train}): not one full training batch would "
        "run, so a record would claim a batch size that never ran. Fix: use batch sizes "
        f"of at most {n_train}, or raise data.n_train."
    ]


# Where a data source reads from: (key, required, what it must be, what it holds).
DATA_PATHS = {
    "mnist_idx": [
        ("path", True, "folder", "the MNIST IDX .gz files (t10k-images-idx3-ubyte.gz...)")
    ],
    "goemotions": [
        ("path", True, "folder", "the GoEmotions files (train.tsv, dev.tsv, labels.txt)")
    ],
    "table": [
        ("path", True, "file", "the table (a CSV/TSV with a text column and 0/1 label columns)"),
        ("dev_path", False, "file", "the dev table (or remove the key to split path)"),
    ],
    "pairs_file": [("path", True, "file", "the pairs (an .npz or a .parquet)")],
}


def _data_path_problems(name: str, data: dict) -> list[str]:
    """The data files and folders a workload's source reads, before any job reads them."""
    source = data.get("source")
    problems = []
    for key, required, kind, holds in DATA_PATHS.get(source, []):
        value = data.get(key)
        if not value:
            if required:
                problems.append(
                    f"`workloads.{name}.data.{key}` is required with source {source}. "
                    f"Fix: point it to the {kind} holding {holds}."
                )
            continue
        problem = path_problem(
            f"workloads.{name}.data.{key}", value, kind, f"point it to the {kind} holding {holds}"
        )
        if problem is None and kind == "folder":
            problem = _folder_content_problem(f"workloads.{name}.data.{key}", value, source)
        if problem:
            problems.append(problem)
    return problems


# The files a data source's folder must hold (each name, or with .gz where allowed),
# as its reader looks for them (workloads/image_cnn.py, textdata/files.py).
FOLDER_FILES = {
    "mnist_idx": (("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"), (".gz", "")),
    "goemotions": (("labels.txt", "train.tsv", "dev.tsv"), ("",)),
}


def _folder_content_problem(key: str, value: str, source: str) -> str | None:
    names, suffixes = FOLDER_FILES.get(source, ((), ()))
    missing = [
        name
        for name in names
        if not any((Path(value) / f"{name}{suffix}").is_file() for suffix in suffixes)
    ]
    if not missing:
        return None
    shown = ", ".join(f"{n}{'(.gz)' if '.gz' in suffixes else ''}" for n in missing)
    inner = sorted(p.parent.name for p in Path(value).glob(f"*/{names[0]}"))
    within = f" (its subfolders {', '.join(inner)} hold {names[0]})" if inner else ""
    return (
        f"`{key}` = {value!r} holds no {shown}{within}. Fix: point it to the {source} "
        "folder that holds them."
    )


def path_problem(key: str, value: str, kind: str, fix: str) -> str | None:
    """Why the path ``value`` of ``key`` is not an existing ``kind`` ("file", "folder"),
    or None. Relative paths are read from the working directory, as the jobs read them."""
    path = Path(value)
    try:
        exists, right = path.exists(), (path.is_dir() if kind == "folder" else path.is_file())
    except (OSError, ValueError):  # a name the system cannot look up (NUL byte, too long)
        exists = right = False
    if right:
        return None
    where = "" if path.is_absolute() else f" (relative to the working directory {Path.cwd()})"
    what = f"is not a {kind}" if exists else "does not exist"
    return f"`{key}` = {value!r} {what}{where}. Fix: {fix}."


SIZED_FAULTS = ("silent_numeric_error", "eval_output_error")


def _fault_problems(config: dict, faults: list[dict]) -> list[str]:
    """A fault aimed at no cell would silently inject nothing: name it. So would a
    ``size`` on a fault that takes none."""
    problems = []
    for i, fault in enumerate(faults):
        if fault.get("size") is not None and fault["fault"] not in SIZED_FAULTS:
            problems.append(
                f"`fault_injection[{i}].size` is set, but only {' and '.join(SIZED_FAULTS)} "
                f"take a size ({fault['fault']!r} does not). Fix: remove `size`."
            )
        workload = fault["workload"]
        if workload not in config["workloads"]:
            problems.append(f"`fault_injection[{i}].workload` {workload!r} is not a workload.")
            continue
        wl = config["workloads"][workload]
        ids = [v.id for v in device_variants(config, wl.get("devices"), workload)]
        if fault["device"] not in ids:
            problems.append(
                f"`fault_injection[{i}].device` {fault['device']!r} is not a device of "
                f"{workload} (its devices: {', '.join(ids)}). Fix: name one of those."
            )
        sizes = all_batch_sizes(wl)
        if fault.get("batch_size") is not None and sizes and fault["batch_size"] not in sizes:
            problems.append(
                f"`fault_injection[{i}].batch_size` {fault['batch_size']} is not a batch size "
                f"of {workload} ({sizes}). Fix: name one of those or leave it out."
            )
    return problems


def _thread_problems(config: dict) -> list[str]:
    """Thread counts above the machine's cores make cells crawl: refused unless asked."""
    cores = os.cpu_count() or 1
    if config["launcher"].get("allow_more_threads_than_cores"):
        return []
    places = [("device_settings.cpu.threads", config["device_settings"]["cpu"].get("threads"))]
    places += [
        (f"workloads.{name}.cpu_threads", wl.get("cpu_threads"))
        for name, wl in config["workloads"].items()
    ]
    problems = []
    for key, value in places:
        counts = value if isinstance(value, list) else [value]
        too_many = [n for n in counts if isinstance(n, int) and n > cores]
        if too_many:
            problems.append(
                f"`{key}` asks for {too_many} threads, but this machine has {cores} logical "
                "cores: the cells would be oversubscribed and crawl. Fix: use at most "
                f"{cores}, or set launcher.allow_more_threads_than_cores: true when the cells "
                "run on bigger cluster nodes."
            )
    return problems


def _baseline_problems(config: dict) -> list[str]:
    wanted = config.get("report", {}).get("baseline_device")
    if not wanted:
        return []
    ids = list(iter_device_ids(config))
    # device@hardware labels of merged results folders name a device id before the "@"
    if wanted in ids or wanted.split("@", 1)[0] in ids:
        return []
    return [
        f"`report.baseline_device` is {wanted!r}, which is not a device of this matrix "
        f"({', '.join(ids)}). Fix: name one of those, or remove the key to compare with "
        "each workload's first listed device."
    ]


def compare_problems(aggregate: dict) -> list[str]:
    """``aggregate.compare`` against what can be checked before a job: a folder comparison
    needs a folder to include, a folder baseline must be one of them (or "this run"), and a
    baseline needs a comparison. A software baseline can only be matched against the
    records: one that names no software is a note row of the comparison table."""
    compare = aggregate.get("compare") or {}
    by, wanted = compare.get("by", "software"), compare.get("baseline")
    folders = list(aggregate.get("include_results") or [])
    key = "`aggregate.compare"
    if wanted and by == "none":
        return [
            f"{key}.baseline` is {wanted!r} but {key}.by` is none: nothing is compared. "
            "Fix: set `aggregate.compare.by` to software or folder, or remove the baseline."
        ]
    if by != "folder":
        return []
    if not folders:
        return [
            f"{key}.by` is folder, but `aggregate.include_results` names no folder: this "
            "run's own records are the only side. Fix: list the results folders to compare "
            'in `aggregate.include_results` (e.g. `make redraw FOLDERS="a b" COMPARE=folder`), '
            "or set `aggregate.compare.by` to software or none."
        ]
    named = {os.path.normpath(f) for f in folders} | {"this run"}
    if wanted and wanted != "this run" and os.path.normpath(wanted) not in named:
        return [
            f"{key}.baseline` is {wanted!r}, which is not a compared folder. Fix: name one "
            f"of `aggregate.include_results` ({', '.join(map(repr, folders))}) or 'this run' "
            "(the run's own records), or null for the folder whose records started first."
        ]
    return []


def _repeat_problems(config: dict) -> list[str]:
    places = [("repeats", config.get("repeats"))] + [
        (f"workloads.{name}.repeats", wl.get("repeats")) for name, wl in config["workloads"].items()
    ]
    problems = []
    for key, value in places:
        if not isinstance(value, dict):
            continue
        low, high = value["min"], value.get("max", value["min"])
        if high < low:
            problems.append(
                f"`{key}.max` is {high}, below `{key}.min` {low}. Fix: make max at least min."
            )
        elif high > low and value.get("target_ci_halfwidth") is None:
            problems.append(
                f"`{key}` asks for up to {high} repeats but sets no `target_ci_halfwidth`, "
                "so nothing would decide when to stop. Fix: add target_ci_halfwidth "
                "(e.g. 0.03) or set max equal to min."
            )
    return problems


def pretrained_problem(name: str) -> str | None:
    """Why ``name`` cannot be loaded without a network, or None if it can be."""
    path = Path(name).expanduser()
    if path.exists():
        return (
            None
            if (path / "config.json").exists()
            else f"{name!r} has no config.json (not a save_pretrained folder)"
        )
    looks_like_path = name.startswith((".", "/", "~")) or name.count("/") > 1
    if looks_like_path:
        return f"the folder {name!r} does not exist. Fix: point it to a folder written by save_pretrained."
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:  # pragma: no cover - transformers brings it
        return None
    cached = try_to_load_from_cache(name, "config.json")
    if isinstance(cached, str):
        return None
    if os.environ.get("HF_HUB_OFFLINE") == "1":
        return (
            f"{name!r} is not in the Hugging Face cache and HF_HUB_OFFLINE=1. Fix: download it once "
            "with a network, or set the key to a local folder written by save_pretrained."
        )
    return None  # not cached, but the hub may be reachable; a failed download fails the run, loudly


def _faults_allowed_by_env() -> bool:
    return os.environ.get(FAULTS_ENV) == "1"


def _entry_problems(config: dict) -> list[str]:
    """Your own workloads: the entry's folders exist, its module imports (in a child
    process) and has the function (trainbench.config.entry_check)."""
    problems = []
    for name, wl in config["workloads"].items():
        if wl.get("entry") and name not in WORKLOADS:
            problems += entry_problems(name, wl["entry"], wl.get("python_path"))
    return problems


def unknown_workload_problems(config: dict) -> list[str]:
    """A workload name that is neither bundled nor your own (no ``entry``): a typo,
    named as one (checked before the schema, whose message would ask for an entry).
    Workloads that are not a mapping are left to the schema's message."""
    workloads = config.get("workloads")
    if not isinstance(workloads, dict):
        return []
    unsafe = [problem for name in workloads if (problem := name_problem("workloads", name))]
    if unsafe:  # a name that would leave results/ first: adding an entry cannot fix it
        return unsafe
    return [
        f"`workloads.{name}` is not a bundled workload ({', '.join(WORKLOADS)}). Fix: "
        "correct the name, or add `entry: module:function` for your own model "
        "(see examples/my_model.py)."
        for name, wl in workloads.items()
        if name not in WORKLOADS and not (isinstance(wl, dict) and wl.get("entry"))
    ]
