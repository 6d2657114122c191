"""Workflow overhead, the synthetic records: 1,000 valid records made from real ones
(scaled, retargeted), so the rules after the cells are measured at scale."""

from __future__ import annotations

import copy
import json
import tarfile
from collections import defaultdict
from pathlib import Path

import numpy as np

from .losses import device_losses, loss_curve, reference_record, set_steps, steps_per_epoch

SYNTHETIC_HOST = "synthetic-host"

# ----------------------------------------------------------------------------- synthetic records

# Relative speed of each synthetic device column (times the template's throughput).
DEVICE_SPEED = {"cpu-t1": 0.55, "cpu-t2": 1.0, "mps": 4.0, "cuda": 20.0}
DEVICE_NAMES = {"cpu": "Synthetic CPU", "cuda": "Synthetic GPU", "mps": "Synthetic Apple GPU"}
SYNTHETIC_MACHINE = {
    "host": SYNTHETIC_HOST,
    "cpu_model": DEVICE_NAMES["cpu"],
    "logical_cores": 2,
    "gpu_models": [DEVICE_NAMES["cuda"]],
}
TRAINING_BATCH_SIZES = [8, 16, 32, 64, 128, 256]


def synthetic_config(repeats: int = 10) -> dict:
    """A matrix of 1,000 cells: five workloads x cpu-t1, cpu-t2, mps, cuda x batch sizes x 10."""
    training = {"batch_sizes": TRAINING_BATCH_SIZES}
    return {
        "seed": 0,
        "repeats": repeats,
        "devices": ["cpu", "mps", "cuda"],
        "device_settings": {"cpu": {"threads": [1, 2]}},
        "workloads": {
            "image_cnn": copy.deepcopy(training),
            "matmul": {"batch_sizes": [1], "sizes": [16, 32, 64, 128, 256, 512, 1024]},
            "text_multilabel": copy.deepcopy(training),
            "two_tower": copy.deepcopy(training),
            "clip": copy.deepcopy(training),
        },
    }


def load_templates(archives: list[Path], record_dirs: list[Path]) -> list[tuple[str, dict]]:
    """Real records: the tracked archives (``TEMPLATE_ARCHIVES``) and the records of
    the cells run here."""
    found = []
    for archive in archives:
        with tarfile.open(archive) as tar:
            for member in tar.getmembers():
                if member.name.endswith("metrics.json"):
                    data = tar.extractfile(member).read()
                    found.append((f"{archive.parent.name}:{member.name}", json.loads(data)))
    for folder in record_dirs:
        for path in sorted(folder.glob("*/*/bs*/rep*/metrics.json")):
            found.append((str(path.relative_to(folder.parent)), json.loads(path.read_text())))
    return found


def _scale(result: dict, factor: float, size_factor: float, rng: np.random.Generator) -> None:
    """Vary a result's numbers: throughput x factor, times / factor, losses and
    metrics by a little noise, memory with the batch size."""

    def noisy(value, spread=0.01):
        return value * float(1 + spread * rng.standard_normal())

    for block in ("timed", "eval", "warmup", "data_wait"):
        part = result.get(block) or {}
        for key in list(part):
            if key.endswith("per_s") and isinstance(part[key], (int, float)):
                part[key] *= factor
            elif key.endswith(("seconds", "_s")) and isinstance(part[key], (int, float)):
                part[key] /= factor
    for key, value in list((result.get("step_latency_s") or {}).items()):
        if key != "n" and key != "cv" and isinstance(value, (int, float)):
            result["step_latency_s"][key] = value / factor
    for epoch in result.get("epochs") or []:
        for key in ("samples_per_s", "eval_samples_per_s"):
            if isinstance(epoch.get(key), (int, float)):
                epoch[key] *= factor
        for key in ("train_seconds", "timed_seconds", "eval_seconds"):
            if isinstance(epoch.get(key), (int, float)):
                epoch[key] /= factor
        if isinstance(epoch.get("train_loss"), (int, float)):
            epoch["train_loss"] = noisy(epoch["train_loss"], 0.03)
    task = result.get("task") or {}
    for key in ("final", "best", "micro_f1", "macro_f1"):
        if isinstance(task.get(key), (int, float)):
            task[key] = min(1.0, max(0.0, noisy(task[key])))
    if isinstance(task.get("final_loss"), (int, float)):
        task["final_loss"] = noisy(task["final_loss"], 0.03)
    for row in result.get("sizes") or []:
        row["gflops"] *= factor
        for key in ("median_s", "mean_s", "iqr_s"):
            if isinstance(row.get(key), (int, float)):
                row[key] /= factor
    memory = (result.get("memory") or {}).get("device") or {}
    if isinstance(memory.get("peak_bytes"), (int, float)):
        memory["peak_bytes"] = int(memory["peak_bytes"] * size_factor)


def _retarget(value, old: str, new: str):
    """Device names inside a result's verification block, moved to another backend."""
    if isinstance(value, dict):
        return {k: _retarget(v, old, new) for k, v in value.items()}
    if isinstance(value, list):
        return [_retarget(v, old, new) for v in value]
    if isinstance(value, str) and (value == old or value.startswith(old + ":")):
        return new + value[len(old) :]
    return value


def synthetic_record(
    template: tuple[str, dict], cell, backend: str, status: str, rng: np.random.Generator
) -> dict:
    source, base = template
    record = copy.deepcopy(base)
    old_backend = record.get("backend") or "cpu"
    record["cell"] = {
        "workload": cell.workload,
        "device": cell.device,
        "batch_size": cell.batch_size,
        "rep": cell.rep,
    }
    record["backend"] = backend
    record["device_label"] = cell.device
    record["status"] = status
    record["synthetic"] = {"template": source, "generator": "trainbench.bench.overhead"}
    spec = record.setdefault("spec", {})
    spec["backend"] = backend
    spec["run_seed"] = cell.rep
    # One machine: the same host, CPU and GPU in every record.
    env = record.setdefault("environment", {})
    env.update(SYNTHETIC_MACHINE, run_seed=cell.rep)
    env.pop("device", None)
    if status == "ok":
        env["device"] = {"backend": backend, "name": DEVICE_NAMES[backend]}
        settings = record.get("settings_in_force") or {}
        if cell.device.startswith("cpu-t"):
            settings["torch_threads"] = int(cell.device[5:])
        result = record["result"]
        template_bs = base["cell"]["batch_size"]
        size_factor = (cell.batch_size / template_bs) ** 0.5 if template_bs else 1.0
        factor = (
            DEVICE_SPEED.get(cell.device, 1.0)
            * size_factor ** (0.6 if backend == "cpu" else 1.2)
            * float(np.exp(0.05 * rng.standard_normal()))
        )
        _scale(result, factor, size_factor, rng)
        if "verification" in result and old_backend != backend:
            result["verification"] = _retarget(result["verification"], old_backend, backend)
        if isinstance(result.get("settings"), dict) and "batch_size" in result["settings"]:
            result["settings"]["batch_size"] = cell.batch_size
    return record


def write_synthetic_records(
    workdir: Path, config: dict, templates: list[tuple[str, dict]], seed: int = 0
) -> tuple[dict, int]:
    """One valid record per cell of ``config``'s matrix under ``workdir/results/runs``:
    mps unavailable (as on this machine), cuda failed at each training workload's
    largest batch size, everything else ok; ok training records with per-step losses,
    and the float64 reference of every repeat that parity needs (:mod:`.losses`).
    Returns the records' counts by status and the number of references."""
    from trainbench import config as tbconfig
    from trainbench.common.records import write_record

    validated = tbconfig.validate_config(copy.deepcopy(config))
    cells = tbconfig.expand_matrix(validated)
    rng = np.random.default_rng(seed)
    pools = _template_pools(templates)
    counts: dict[str, int] = defaultdict(int)
    records: dict[tbconfig.Cell, dict] = {}
    curves: dict[tuple, list[list[float]]] = {}
    for cell in cells:
        backend = tbconfig.find_variant(validated, cell.device).backend
        status = _status(validated, cell, backend)
        template = _pick(pools, status, cell, backend, rng)
        record = synthetic_record(template, cell, backend, status, rng)
        if status == "ok" and record["result"].get("kind") == "training":
            _add_losses(record, template[1], cell, curves, seed)
        write_record(workdir / "results" / "runs" / cell.relpath / "metrics.json", record)
        records[cell] = record
        counts[status] += 1
    references = _write_references(workdir, validated, records, curves)
    return dict(sorted(counts.items())), references


def _template_pools(templates: list[tuple[str, dict]]) -> dict[tuple, list]:
    pools: dict[tuple, list] = defaultdict(list)
    for source, record in templates:
        pools[(record["status"], record["cell"]["workload"], record.get("backend"))].append(
            (source, record)
        )
        pools[(record["status"], None, record.get("backend"))].append((source, record))
        pools[(record["status"], record["cell"]["workload"], None)].append((source, record))
    return pools


def _status(config: dict, cell, backend: str) -> str:
    largest = max(config["workloads"][cell.workload].get("batch_sizes") or [0])
    if backend == "mps":
        return "unavailable"
    if backend == "cuda" and cell.workload != "matmul" and cell.batch_size == largest:
        return "failed"
    return "ok"


def _pick(pools: dict, status: str, cell, backend: str, rng: np.random.Generator):
    """A template record for the cell: the workload's own first (their settings are the
    cell's settings; another workload's would split the tables into setups)."""
    pool = pools.get((status, cell.workload, backend)) or pools.get((status, cell.workload, None))
    if not pool and status != "ok":
        pool = pools.get((status, None, backend)) or [
            p for k, v in pools.items() if k[0] == status and k[1] is None for p in v
        ]
    if not pool:
        raise RuntimeError(f"no {status} template record for {cell.relpath}")
    return pool[int(rng.integers(len(pool)))]


def _add_losses(record: dict, template: dict, cell, curves: dict, seed: int) -> None:
    """The record's per-step losses: its repeat's shared curve as its device computes it."""
    result = record["result"]
    key = (cell.workload, cell.batch_size, cell.rep)
    names = sorted(DEVICE_SPEED)
    ids = [seed, sum(map(ord, cell.workload)), cell.batch_size, cell.rep]
    if key not in curves:
        levels = [epoch["train_loss"] for epoch in result["epochs"]]
        curves[key] = loss_curve(levels, steps_per_epoch(template, cell.batch_size), ids)
    device = names.index(cell.device) if cell.device in names else len(names)
    losses = device_losses(curves[key], cell.device, [*ids, 1 + device])
    set_steps(result, losses, cell.batch_size)


def _write_references(workdir: Path, config: dict, records: dict, curves: dict) -> int:
    """The reference record of each repeat whose baseline and another device finished ok
    (``results/references/<workload>/bs<N>/rep<k>/reference.json``); how many."""
    from trainbench import config as tbconfig
    from trainbench.common.records import atomic_write_json

    steps = config["report"]["parity_reference"]["steps"]
    wanted = config["report"]["baseline_device"]
    written = 0
    for (workload, batch_size, rep), curve in sorted(curves.items()):
        devices = tbconfig.workload_devices(config, workload)
        base = wanted if wanted in devices else devices[0]
        found = {d: records.get(tbconfig.Cell(workload, d, batch_size, rep)) or {} for d in devices}
        if found[base].get("status") != "ok":
            continue
        if not any(r.get("status") == "ok" for d, r in found.items() if d != base):
            continue
        path = workdir / "results" / "references" / workload / f"bs{batch_size}"
        record = reference_record(found[base], curve, steps)
        atomic_write_json(path / f"rep{rep}" / "reference.json", record)
        written += 1
    return written
