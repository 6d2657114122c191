"""Does the parity rule catch a device whose math is silently wrong, and does it pass
the right ones? (``benchmarks/parity_power.py``.)

For every training workload of a config (default ``config.yaml``) at each of its
batch sizes, with its workload settings unchanged (epochs, data, model), on this
machine's CPU, :data:`REPEATS` repeats of every column, all with the same run seeds
(base seed 0: repeat k has run seed k, as in a real run, so that repeat k of every
column starts from the same weights and sees the same batches):

* ``baseline``: one thread (device ``cpu-t1``), float32;
* ``reference``: repeat k's float64 reference of the first
  ``report.parity_reference.steps`` steps (:func:`trainbench.launch.reference.reference_spec`,
  here at one thread);
* ``clean``: the baseline again (same settings, a fresh process): a correct device
  that computes exactly like the baseline;
* benign numerics, correct devices computing otherwise: ``threads2`` (two threads:
  another reduction order), ``avx2`` (``ONEDNN_MAX_CPU_ISA=AVX2`` in the child's
  environment, set before torch loads: oneDNN's AVX2 kernels instead of its
  AVX-512 ones), ``bf16`` (CPU bf16 autocast: judged with the reduced-precision
  envelope);
* faults: ``fault<size>``, the baseline with the test fault ``silent_numeric_error``
  (:mod:`trainbench.measure.numeric_fault`) of each size in :data:`SIZES`; ``eval-fault<size>``,
  the baseline with the test fault ``eval_output_error`` (:mod:`trainbench.measure.eval_parity`:
  only the evaluation's outputs wrong, training untouched) of each size in
  :data:`EVAL_SIZES`;
* evaluation fault sweeps: a column with ``eval_sweep`` sizes (``threads2``'s and
  ``bf16``'s here, and the CUDA columns of :mod:`.false_alarm`) is a clean column whose
  cells also apply ``eval_output_error`` at each size, apart, to copies of their
  evaluation outputs after the clean comparison (:func:`trainbench.measure.eval_parity.fault_sweep`);
  :mod:`.eval_power` finds the smallest size the rule catches. Nothing the column's
  clean comparison reports comes from the sweep.

Every run is a real cell through the launcher (a fresh child process, the canary
first), as ``snakemake`` runs it; the timing protocol's extras that only serve speed
(calibration passes after training, extension steps) are off, which changes no loss
or metric. Each run keeps its final metric and loss, canary status, the first
``reference steps`` per-step losses (what the rule's drift check reads, as in
``step_losses.csv``) and its wall seconds. :mod:`.parity_analysis` applies the parity
rule (:func:`trainbench.analysis.stats.parity.parity_table`) and writes the Markdown.

Results: ``benchmarks/results/parity-power-<date>.json``, rewritten after each run, so
an interrupted benchmark keeps what it ran and ``--resume`` continues it.
"""

from __future__ import annotations

import copy
import datetime as dt
import json
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import yaml
from trainbench import config as tbconfig
from trainbench import workloads
from trainbench.analysis.tables import compact
from trainbench.bench.parity_analysis import RUN_FIELDS, analyse, json_scalar
from trainbench.bench.parity_markdown import render
from trainbench.bench.provenance import config_facts, drop_changed_workloads, git_commit
from trainbench.bench.workers import run_in_workers
from trainbench.common.atomic_files import atomic_write_text
from trainbench.common.records import atomic_write_json
from trainbench.measure.eval_parity import FAULT as EVAL_FAULT
from trainbench.measure.numeric_fault import FAULT

REPEATS = 5
SIZES = (0.01, 0.03, 0.1, 0.3)
EVAL_SIZES = (0.01,)
EVAL_SWEEP = (0.0025, 0.005, 0.01, 0.015, 0.02, 0.03, 0.04, 0.05, 0.06, 0.08, 0.12, 0.2)
BASELINE, REFERENCE, CLEAN = "baseline", "reference", "clean"
BENIGN = ("threads2", "avx2", "bf16")
ISA_VARIABLE = "ONEDNN_MAX_CPU_ISA"


@dataclass(frozen=True)
class Column:
    """A device column: how its cells differ from the baseline's."""

    name: str
    kind: str  # baseline, reference, clean, benign, fault
    threads: int = 1
    env: dict = field(default_factory=dict)
    autocast: str = "off"
    size: float = 0.0
    fault: str = FAULT  # the test fault of a fault column
    backend: str = "cpu"  # cuda: a CUDA cell (trainbench.bench.false_alarm)
    staged: bool | None = None  # CUDA: the data sets staged on the device (None: default)
    eval_sweep: tuple[float, ...] = ()  # evaluation fault sizes applied after the clean comparison

    def describe(self) -> str:
        if self.backend != "cpu":
            where = {True: "data staged on the device", False: "data from the host",
                     None: "default staging"}[self.staged]  # fmt: skip
            precision = "float32" if self.autocast == "off" else f"{self.autocast} autocast"
            return ", ".join([self.backend, precision, where,
                              *(f"{k}={v}" for k, v in self.env.items())])  # fmt: skip
        parts = [f"{self.threads} thread{'s' if self.threads > 1 else ''}"]
        parts += [f"{k}={v}" for k, v in self.env.items()]
        if self.autocast != "off":
            parts.append(f"{self.autocast} autocast")
        if self.kind == "fault":
            parts.append(f"{self.fault} size {compact(self.size)}")
        if self.kind == REFERENCE:
            parts = ["float64, the first reference steps"]
        return ", ".join(parts)


def columns(sizes: Sequence[float] = SIZES) -> dict[str, Column]:
    """Every column, in run order."""
    found = [
        Column(BASELINE, BASELINE),
        Column(REFERENCE, REFERENCE),
        Column(CLEAN, "clean"),
        Column("threads2", "benign", threads=2, eval_sweep=EVAL_SWEEP),
        Column("avx2", "benign", env={ISA_VARIABLE: "AVX2"}),
        Column("bf16", "benign", autocast="bf16", eval_sweep=EVAL_SWEEP),
        *[Column(f"fault{compact(100 * s)}%", "fault", size=float(s)) for s in sizes],
        *[Column(f"eval-fault{compact(100 * s)}%", "fault", size=float(s), fault=EVAL_FAULT)
          for s in EVAL_SIZES],
    ]  # fmt: skip
    return {c.name: c for c in found}


@dataclass(frozen=True, order=True)
class Job:
    """One run: repeat ``rep`` of ``column`` at one workload and batch size."""

    workload: str
    batch_size: int
    column: str
    rep: int = 0

    @property
    def name(self) -> str:
        return f"{self.workload}-bs{self.batch_size}-{self.column}-rep{self.rep}"


# ----------------------------------------------------------------------------- plan


def bench_config(config: dict, backends: Sequence[str] = ("cpu",)) -> dict:
    """The config the benchmark runs: the given config's training workloads with their
    settings, on the CPU at 1 and 2 threads (and the other ``backends``), faults
    allowed, one attempt per cell, no timing extras (calibration passes, extension
    steps)."""
    config = copy.deepcopy(config)
    config["devices"] = list(dict.fromkeys(["cpu", *backends]))
    config.setdefault("device_settings", {}).setdefault("cpu", {})["threads"] = [1, 2]
    launcher = config.setdefault("launcher", {})
    launcher.update(progress="never", max_attempts=1, allow_fault_injection=True)
    launcher["allow_more_threads_than_cores"] = True
    config.setdefault("timing", {}).update(extend_short_windows=False, max_eval_passes=0)
    config["fault_injection"] = []
    config["seed"] = 0
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
    chosen: Iterable[str],
    repeats: int = REPEATS,
    only: Iterable[str] = (),
) -> list[Job]:
    """Every run, workload by workload and batch size by batch size, repeat by repeat
    (a repeat's columns together, so that an interrupted benchmark has whole pairs).
    ``only``: ``workload`` or ``workload:batch_size`` entries (default every one), in
    the order given."""
    wanted = list(only)
    cells = [(name, int(bs)) for name, s in config["workloads"].items()
             for bs in s.get("batch_sizes") or []]  # fmt: skip
    if wanted:
        picked = [c for w in wanted for c in cells if w in (c[0], f"{c[0]}:{c[1]}")]
        cells = list(dict.fromkeys(picked))
    return [
        Job(name, bs, column, rep)
        for name, bs in cells
        for rep in range(repeats)
        for column in chosen
    ]


def job_spec(config: dict, job: Job, column: Column, data_path: str | None) -> dict:
    """The cell spec of ``job``: the baseline's cell (device ``cpu-t1``, or ``cpu-t2``
    for two threads) with the column's environment, autocast and fault; the
    reference's spec for ``reference``."""
    from trainbench.launch.reference import reference_spec

    base_cell = tbconfig.Cell(job.workload, "cpu-t1", job.batch_size, job.rep)
    if column.kind == REFERENCE:
        steps = config["report"]["parity_reference"]["steps"]
        spec = reference_spec(config, base_cell, steps, data_path=data_path)
        spec["device_settings"]["threads"] = 1  # two cells at a time share two cores
        spec["config_hash"] = tbconfig.config_hash(spec)
        return spec
    config = copy.deepcopy(config)
    device = f"cpu-t{column.threads}" if column.backend == "cpu" else column.backend
    if column.kind == "fault":
        config["fault_injection"] = [
            {"workload": job.workload, "device": device, "fault": column.fault, "size": column.size}
        ]
    spec = tbconfig.cell_spec(
        config, tbconfig.Cell(job.workload, device, job.batch_size, job.rep), data_path=data_path
    )
    spec["device_settings"]["env"] = {**spec["device_settings"].get("env", {}), **column.env}
    spec["device_settings"]["autocast"] = column.autocast
    if column.staged is not None:
        spec["device_settings"]["stage_data_on_device"] = column.staged
    # every column's evaluation is compared with CPU float64 (the baseline's too, so
    # that the clean column stays the baseline's very cell)
    spec["eval_parity"] = True
    if column.eval_sweep:
        spec["eval_fault_sizes"] = list(column.eval_sweep)
    spec["config_hash"] = tbconfig.config_hash(spec)
    return spec


# ----------------------------------------------------------------------------- runs


def prepare_data(config: dict, jobs: Sequence[Job], root: Path) -> dict[str, str | None]:
    """Each workload's data artifact, built once with the config's seed (every column
    reads the same data, as in a real run); None for workloads without one."""
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


def run_job(config: dict, job: Job, column: Column, data_path: str | None, root: Path) -> dict:
    """Run ``job`` through the launcher (a fresh child process); its row for the results."""
    from trainbench.analysis.aggregate import run_row
    from trainbench.analysis.loss_tables import reference_row, step_rows
    from trainbench.launch.launcher import run_cell

    folder = root / "runs" / job.name
    steps = int(config["report"]["parity_reference"]["steps"])
    started = time.perf_counter()
    record = run_cell(
        job_spec(config, job, column, data_path), folder / "metrics.json", folder / "cell.log"
    )
    seconds = time.perf_counter() - started
    source = f"{job.name}.json"
    if column.kind == REFERENCE:
        row = reference_row(record, source)
    else:
        row = run_row(record, source)
        row = {k: row.get(k) for k in RUN_FIELDS}
    out = {**asdict(job), **{k: json_scalar(v) for k, v in row.items()}, "record": source}
    out["run_seed"] = record.get("spec", {}).get("run_seed", job.rep)
    losses = step_rows(record, source, "", steps) if record.get("status") == "ok" else []
    out["losses"] = [float(r["loss"]) for r in losses]
    out.update(eval_outputs(record))
    out["seconds"] = seconds
    return out


def eval_outputs(record: dict) -> dict:
    """The record's evaluation-parity outputs, clean and under the fault sweep, each
    output's errors only (:mod:`.eval_power` judges them again)."""
    parity = (record.get("result") or {}).get("eval_parity") or {}
    keep = ("path", "elements", "error", "floor", "max_error")

    def compact_outputs(outputs) -> list[dict]:
        return [{k: o.get(k) for k in keep} for o in outputs or []]

    sweep = parity.get("fault_sweep") or []
    return {
        "eval_outputs": compact_outputs(parity.get("outputs")) or None,
        "eval_fault_sweep": [{"size": s["size"], "outputs": compact_outputs(s.get("outputs"))}
                             for s in sweep] or None,
    }  # fmt: skip


def run_jobs(
    config: dict,
    jobs: Sequence[Job],
    chosen: dict[str, Column],
    root: Path,
    workers: int = 1,
    done: Callable[[dict], None] = lambda row: None,
) -> None:
    """Every job, ``workers`` at a time, each in a worker process of its own, one
    worker included: the launcher handles signals, which only a main thread may, and
    stops its cell when its parent changes (a launcher orphaned by a killed Snakemake),
    which in this process would misfire when the shell that started a ``nohup``-ed
    benchmark exits. The workers stop with this process (:mod:`.workers`); ``done``
    gets each row in this process as it finishes."""
    data = prepare_data(config, jobs, root)
    calls = [(config, j, chosen[j.column], data[j.workload], root) for j in jobs]
    run_in_workers(run_job, calls, max(1, workers), done)


# ----------------------------------------------------------------------------- config and results


def load_config(path: str | Path, backends: Sequence[str] = ()) -> dict:
    """The benchmark's config from a trainbench config file."""
    return bench_config(yaml.safe_load(Path(path).read_text()), ("cpu", *backends))


def json_load(path: str | Path) -> dict:

    return json.loads(Path(path).read_text())


SENSITIVITY_STEPS = (8, 16)
ANALYSE_EVERY_S = 600.0


def save(out_json: str | Path, results: dict, sensitivity: Sequence[int] = ()) -> None:
    """(Re)apply the rule to ``results``' runs (and at the shorter drift windows
    ``sensitivity``) and write the JSON and its Markdown."""
    analyse(results, sensitivity)
    # the rule is the analysing code's: a re-render may judge older runs by a newer rule
    results["judged"] = {"commit": git_commit(Path(__file__).parent), "at": _now()}
    atomic_write_json(out_json, results)
    atomic_write_text(Path(out_json).with_suffix(".md"), render(results))


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


# ----------------------------------------------------------------------------- the benchmark


@dataclass
class Options:
    """What to run: sizes, repeats, ``only`` (workload[:batch_size] entries), which
    columns (default all), workers (cells at a time), resume, and the command line."""

    sizes: Sequence[float] = SIZES
    repeats: int = REPEATS
    extra_columns: Sequence[Column] = ()  # beyond :func:`columns` (the CUDA ones)
    only: Sequence[str] = ()
    columns: Sequence[str] = ()
    workers: int = 1
    resume: bool = False
    command: str = ""


def run_benchmark(
    config_path: str | Path,
    out_json: str | Path,
    workdir: str | Path,
    options: Options,
    log: Callable[[str], None] = print,
) -> dict:
    """Run every job not yet in ``out_json`` (with ``resume``), rewriting it and its
    Markdown after each run; returns the results."""
    import threading

    from trainbench.bench.machine import machine_facts

    backends = sorted({c.backend for c in options.extra_columns} - {"cpu"})
    config = load_config(config_path, backends)
    every = {**columns(options.sizes), **{c.name: c for c in options.extra_columns}}
    chosen = {n: every[n] for n in (options.columns or every)}
    jobs = plan(config, chosen, options.repeats, options.only)
    previous = json_load(out_json) if options.resume and Path(out_json).exists() else {}
    facts = config_facts(config_path, config)
    previous, dropped = drop_changed_workloads(previous, facts)
    for note in dropped:
        log(note)
    done = {Job(r["workload"], r["batch_size"], r["column"], r["rep"])
            for r in previous.get("runs", [])}  # fmt: skip
    invocation = {"command": options.command, "commit": git_commit(Path(__file__).parent),
                  "started": _now(), "finished": None, "wall_seconds": None}  # fmt: skip
    results = {
        "benchmark": "parity_power",
        "config": facts,
        "machine": machine_facts(backends[0] if backends else "cpu"),
        "repeats": options.repeats,
        "columns": {n: {**asdict(c), "describe": c.describe()} for n, c in every.items()},
        "invocations": [*previous.get("invocations", []), invocation],
        "notes": [*previous.get("notes", []), *dropped],
        "runs": previous.get("runs", []),
    }
    lock = threading.Lock()
    analysed = [time.perf_counter()]
    todo = [j for j in jobs if j not in done]
    log(f"{len(todo)} runs to go ({len(done)} already in {out_json}); work folder {workdir}")
    started = time.perf_counter()

    def finished(row: dict) -> None:
        with lock:
            results["runs"].append(row)
            invocation["wall_seconds"] = time.perf_counter() - started
            if time.perf_counter() - analysed[0] > ANALYSE_EVERY_S:  # the analysis takes a while
                save(out_json, results)
                analysed[0] = time.perf_counter()
            else:
                atomic_write_json(out_json, results)
            log(f"[{len(results['runs']) - len(done)}/{len(todo)}] {row['workload']} bs"
                f"{row['batch_size']} {row['column']} rep{row['rep']}: {row['status']} metric "
                f"{row.get('final_metric')} loss {row.get('final_loss')} canary "
                f"{row.get('numerics_status')} ({row['seconds']:.0f} s)")  # fmt: skip

    run_jobs(config, todo, chosen, Path(workdir), options.workers, finished)
    invocation["finished"] = _now()
    invocation["wall_seconds"] = time.perf_counter() - started
    save(out_json, results, SENSITIVITY_STEPS)
    return results


def rerender(results_json: str | Path, sensitivity: Sequence[int] = SENSITIVITY_STEPS) -> dict:
    """Re-apply the rule to a results JSON's runs and rewrite it and its Markdown."""
    results = json_load(results_json)
    save(results_json, results, sensitivity)
    return results
