"""Does the parity rule catch a device whose math is silently wrong, and how often
does it fail a right one? (``benchmarks/parity_power.py``.)

For every training workload of a config (default ``config.yaml``), with its workload
settings unchanged (epochs, data, model, batch sizes), on this machine's CPU:

* **baseline**: device ``cpu-t1`` (one thread), base seed :data:`BASELINE_SEED` (0),
  :data:`REPEATS` repeats (run seeds 0, 1, 2);
* **device column**: ``cpu-t2`` (two threads; ``--device-threads 1`` runs it as
  ``cpu-t1`` too), base seed :data:`DEVICE_SEED` (100), the same number of repeats,
  once clean and once per error size with the test fault ``silent_numeric_error``
  (:mod:`trainbench.numeric_fault`) of that size. The thread count changes numbers
  at most by the order of floating-point sums (image_cnn's convolutions: the same
  seed gives other final values at 1 and 2 threads; other workloads the same bits),
  far less than a seed does; on a busy 2-core machine two-thread cells run several
  times slower, and two one-thread cells side by side (``--workers 2``) twice as fast.

The device column uses other seeds than the baseline, so that a clean pair differs
by seed-to-seed variation — more than a real device with the baseline's seeds would
(its runs differ from the CPU's by rounding, amplified by training): the false-alarm
rate measured here is for the harder case. With the same seeds and thread count the
two columns would be bit-identical, which the rule reports as ``identical``. Every run
is a real cell through the launcher (a fresh child process, the canary first), as
``snakemake`` runs it.

Then the parity rule (:func:`trainbench.stats.parity.parity_table`, with the config's
``report.parity_margins``) is applied (:mod:`.parity_analysis`, which also writes the
Markdown) to

* each faulted column against the baseline: **detected** when the outcome is
  ``fail``; ``pass`` is a miss (the wrong device shown equivalent), ``insufficient
  data`` an inconclusive interval;
* the clean column against the baseline (seed 0 vs seed 100): a ``fail`` is a false
  alarm;
* every split of the 2 × :data:`REPEATS` clean runs into two groups of
  :data:`REPEATS` (10 splits for 3 repeats): the false-alarm rate over splits (the
  splits share runs: an indication, not independent trials).

Results: ``benchmarks/results/parity-power-<date>.json`` (every run's final metric,
loss and canary status, every comparison with its rule text; rewritten after each
run, so an interrupted benchmark keeps what it ran and ``--resume`` continues it) and
the Markdown table beside it.
"""

from __future__ import annotations

import ast
import copy
import datetime as dt
import hashlib
import multiprocessing
import os
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass
from pathlib import Path

import yaml

from .. import config as tbconfig
from .. import workloads
from ..numeric_fault import FAULT
from ..records import atomic_write_json
from ..tables import compact
from .parity_analysis import (
    BASELINE_DEVICE,
    BASELINE_SEED,
    DEVICE,
    DEVICE_SEED,
    REPEATS,
    RUN_FIELDS,
    analyse,
    json_scalar,
    render,
)

SIZES = (0.01, 0.03, 0.1, 0.3)
ROLES = ("baseline", "clean", "fault")


@dataclass(frozen=True, order=True)
class Job:
    """One run: the baseline, the clean device column, or the faulted one at ``size``."""

    workload: str
    batch_size: int
    role: str
    size: float = 0.0
    rep: int = 0

    def device(self, column: str = DEVICE) -> str:
        """The cell's device id: the baseline's, or ``column`` (the device column's)."""
        return BASELINE_DEVICE if self.role == "baseline" else column

    @property
    def seed(self) -> int:
        return BASELINE_SEED if self.role == "baseline" else DEVICE_SEED

    @property
    def name(self) -> str:
        what = f"fault{compact(self.size)}" if self.role == "fault" else self.role
        return f"{self.workload}-bs{self.batch_size}-{what}-rep{self.rep}"


# ----------------------------------------------------------------------------- plan


def bench_config(config: dict) -> dict:
    """The config the benchmark runs: the given config's training workloads with their
    settings, on the CPU at 1 and 2 threads, faults allowed, one attempt per cell."""
    config = copy.deepcopy(config)
    config["devices"] = ["cpu"]
    config.setdefault("device_settings", {}).setdefault("cpu", {})["threads"] = [1, 2]
    launcher = config.setdefault("launcher", {})
    launcher.update(progress="never", max_attempts=1, allow_fault_injection=True)
    launcher["allow_more_threads_than_cores"] = True
    config["fault_injection"] = []
    kept = {}
    for name, settings in config.get("workloads", {}).items():
        if workloads.info(name, settings).kind != "training" or settings.get("enabled") is False:
            continue
        for key in ("cpu_threads", "devices", "compile"):
            settings.pop(key, None)
        kept[name] = settings
    config["workloads"] = kept
    return tbconfig.validate_config(config)


def plan(
    config: dict,
    sizes: Sequence[float] = SIZES,
    repeats: int = REPEATS,
    only: Iterable[str] = (),
) -> list[Job]:
    """Every run, workload by workload: baseline, clean, then each size. ``only``:
    ``workload`` or ``workload:batch_size`` entries (default every one)."""
    wanted = list(only)
    jobs = []
    for name, settings in config["workloads"].items():
        for bs in settings.get("batch_sizes") or []:
            if wanted and name not in wanted and f"{name}:{bs}" not in wanted:
                continue
            for rep in range(repeats):
                jobs.append(Job(name, bs, "baseline", 0.0, rep))
                jobs.append(Job(name, bs, "clean", 0.0, rep))
                jobs += [Job(name, bs, "fault", float(s), rep) for s in sizes]
    return jobs


def job_spec(config: dict, job: Job, data_path: str | None, column: str = DEVICE) -> dict:
    """The cell spec of ``job``: the config's seed replaced by the job's base seed, and
    the fault entry of its size on the device column (device id ``column``)."""
    config = copy.deepcopy(config)
    config["seed"] = job.seed
    if job.role == "fault":
        config["fault_injection"] = [
            {"workload": job.workload, "device": column, "fault": FAULT, "size": job.size}
        ]
    cell = tbconfig.Cell(job.workload, job.device(column), job.batch_size, job.rep)
    return tbconfig.cell_spec(config, cell, data_path=data_path)


# ----------------------------------------------------------------------------- runs


def prepare_data(config: dict, jobs: Sequence[Job], root: Path) -> dict[str, str | None]:
    """Each workload's data artifact, built once with the config's seed (both columns
    read the same data, as in a real run); None for workloads without one."""
    paths: dict[str, str | None] = {}
    for name in dict.fromkeys(j.workload for j in jobs):
        if not workloads.info(name, config["workloads"][name]).prepares_data:
            paths[name] = None
            continue
        out = root / "data" / name
        if not (out / "meta.json").exists():
            workloads.get(name).prepare_data(config["workloads"][name], out, config["seed"])
        paths[name] = str(out)
    return paths


def run_job(
    config: dict, job: Job, data_path: str | None, root: Path, column: str = DEVICE
) -> dict:
    """Run ``job`` through the launcher (a fresh child process); its row for the results."""
    import time

    from ..aggregate import run_row
    from ..launcher import run_cell

    folder = root / "runs" / job.name
    started = time.perf_counter()
    record = run_cell(
        job_spec(config, job, data_path, column), folder / "metrics.json", folder / "cell.log"
    )
    row = run_row(record, str(folder / "metrics.json"))
    out = {**asdict(job), "device": job.device(column), "seed": job.seed}
    out.update({k: json_scalar(row.get(k)) for k in RUN_FIELDS})
    out["seconds"] = time.perf_counter() - started
    return out


def run_jobs(
    config: dict,
    jobs: Sequence[Job],
    root: Path,
    workers: int = 1,
    done: Callable[[dict], None] = lambda row: None,
    column: str = DEVICE,
) -> list[dict]:
    """Every job, ``workers`` at a time (each in a worker process of its own: the
    launcher handles signals, which only a main thread may); ``done`` gets each row
    in this process as it finishes."""
    data = prepare_data(config, jobs, root)
    rows = []
    if workers <= 1:
        for job in jobs:
            rows.append(run_job(config, job, data[job.workload], root, column))
            done(rows[-1])
        return rows
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
        futures = [pool.submit(run_job, config, j, data[j.workload], root, column) for j in jobs]
        for future in as_completed(futures):
            rows.append(future.result())
            done(rows[-1])
    return rows


# ----------------------------------------------------------------------------- config and results


def workload_code_sha256(module: Path) -> str:
    """SHA-256 over a workload's module and the modules of its package it imports
    (``from .x import``, ``from . import x``), transitively, in name order."""
    files, todo = set(), [module]
    while todo:
        path = todo.pop()
        if path in files or not path.exists():
            continue
        files.add(path)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                names = [node.module] if node.module else [a.name for a in node.names]
                todo += [path.parent / f"{name.replace('.', '/')}.py" for name in names]
    digest = hashlib.sha256()
    for path in sorted(files):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def config_facts(path: str | Path, config: dict) -> dict:
    """Which config the benchmark ran: its path, the SHA-256 of the file, and the
    training workloads' settings as run."""
    raw = Path(path).read_bytes()
    code = {
        name: workload_code_sha256(Path(workloads.get(name).__file__))
        for name in config["workloads"]
        if workloads.info(name, config["workloads"][name]).bundled
    }
    return {
        "path": os.path.relpath(path)
        if Path(path).resolve().is_relative_to(Path.cwd())
        else str(path),
        "sha256": hashlib.sha256(raw).hexdigest(),
        "workload_code_sha256": code,
        "workloads": config["workloads"],
        "parity_margins": config["report"]["parity_margins"],
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    }


def load_config(path: str | Path) -> dict:
    """The benchmark's config from a trainbench config file."""
    return bench_config(yaml.safe_load(Path(path).read_text()))


def write_results(path: str | Path, results: dict) -> None:
    atomic_write_json(path, results)


# ----------------------------------------------------------------------------- the benchmark


def run_benchmark(
    config_path: str | Path,
    out_json: str | Path,
    workdir: str | Path,
    sizes: Sequence[float] = SIZES,
    repeats: int = REPEATS,
    only: Iterable[str] = (),
    workers: int = 1,
    resume: bool = False,
    column: str = DEVICE,
    log: Callable[[str], None] = print,
) -> dict:
    """Run every job not yet in ``out_json`` (with ``resume``), rewriting it and its
    Markdown after each run; returns the results."""
    import threading

    from .machine import machine_facts

    config = load_config(config_path)
    margins = config["report"]["parity_margins"]
    jobs = plan(config, sizes, repeats, only)
    previous = json_load(out_json) if resume and Path(out_json).exists() else {}
    done = {Job(r["workload"], r["batch_size"], r["role"], r["size"], r["rep"]) for r in
            previous.get("runs", [])}  # fmt: skip
    results = {
        "benchmark": "parity_power", "config": config_facts(config_path, config),
        "machine": machine_facts("cpu"), "sizes": list(sizes), "repeats": repeats,
        "baseline": {"device": BASELINE_DEVICE, "seed": BASELINE_SEED},
        "device": {"device": column, "seed": DEVICE_SEED}, "runs": previous.get("runs", []),
    }  # fmt: skip
    lock = threading.Lock()
    todo = [j for j in jobs if j not in done]
    log(f"{len(todo)} runs to go ({len(done)} already in {out_json}); work folder {workdir}")

    def save(row: dict) -> None:
        with lock:
            results["runs"].append(row)
            analyse(results, margins)
            write_results(out_json, results)
            Path(out_json).with_suffix(".md").write_text(render(results))
            log(f"[{len(results['runs']) - len(done)}/{len(todo)}] {Job(**_job_keys(row)).name}: "
                f"{row['status']} metric {row['final_metric']} loss {row['final_loss']} "
                f"canary {row['numerics_status']} ({row['seconds']:.0f} s)")  # fmt: skip

    run_jobs(config, todo, Path(workdir), workers, save, column)
    analyse(results, margins)
    write_results(out_json, results)
    Path(out_json).with_suffix(".md").write_text(render(results))
    return results


def _job_keys(row: dict) -> dict:
    return {k: row[k] for k in ("workload", "batch_size", "role", "size", "rep")}


def json_load(path: str | Path) -> dict:
    import json

    return json.loads(Path(path).read_text())


def rerender(results_json: str | Path, config_path: str | Path | None = None) -> dict:
    """Re-apply the rule to a results JSON's runs (with the margins of ``config_path``
    if given, else those it was run with) and rewrite the JSON and its Markdown."""
    results = json_load(results_json)
    if config_path is not None:
        config = load_config(config_path)
        results["config"]["parity_margins"] = config["report"]["parity_margins"]
    analyse(results, results["config"]["parity_margins"])
    write_results(results_json, results)
    Path(results_json).with_suffix(".md").write_text(render(results))
    return results
