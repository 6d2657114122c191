"""Workflow overhead: what Snakemake, process start-up and imports add to each cell,
and how long the rules after the cells (aggregate, tables, figures, reports) take.

Two measurements, both through the real ``snakemake`` in a copy of the workflow:

- **cells**: a matrix of cells that do almost nothing (one 16x16 matmul; cuda and
  mps cells, unavailable here; one cell failed on purpose by fault injection).
  A tracer (``overhead_tracer.py``, installed as ``sitecustomize``) timestamps
  every process and a few phase boundaries, so each cell's wall time splits into
  Snakemake's gap before the job, the launcher's start and imports, the child's
  spawn and imports, the cell's own work, and the child's exit plus the record.
  Per-cell overhead = cell wall time - the cell's own work.
- **downstream**: 1,000 synthetic records, made from real records (the measured
  H200 records in ``docs/measured/*/records.tgz`` and the cells run above) with
  their device, batch size, repeat and values varied; their data sets are built
  and the records made newer, so the cells are up to date as after a real run;
  then ``snakemake --cores 1 results/report.md`` runs only the rules after them.

Also ``python -X importtime`` of the imports each process pays, and Snakemake's
own start-up (``snakemake --version``). Results go to one
JSON file (``runs.<label>``, so a ``before`` and an ``after`` can sit side by side);
:func:`markdown_section` renders the README section from that JSON only.
"""

from __future__ import annotations

import argparse
import copy
import datetime as _dt
import io
import json
import os
import platform
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections import defaultdict
from importlib import metadata
from pathlib import Path

import numpy as np
import yaml

REPO = Path(__file__).resolve().parents[3]
TRACER = Path(__file__).with_name("overhead_tracer.py")
WORKFLOW_FILES = ("Snakefile", "config.yaml")
WORKFLOW_DIRS = ("rules", "scripts", "profiles", "envs")
TEMPLATE_ARCHIVES = "docs/measured/*/records.tgz"
GOALS = {"per_cell_overhead_s": 3.0, "downstream_s": 15.0}
SYNTHETIC_HOST = "synthetic-host"
CELL_RULES = ("run_cell", "prepare_data", "plan_round")
SECTION_HEADING = "## Workflow overhead"

# What each process imports before it does anything (for python -X importtime).
IMPORTS = {
    "torch": "import torch",
    "run_cell script (launcher)": "import trainbench.config, trainbench.launcher",
    "child before its work": (
        "import numpy, torch; from trainbench import workloads, context, devices, "
        "environment, faults, trackers, training"
    ),
    "snakemake script preamble": "import pickle, snakemake.iocontainers, snakemake.logging",
    "aggregate script": "import trainbench.aggregate",
    "statistics script": "import trainbench.tables, trainbench.stats",
    "figures script": "import trainbench.tables, trainbench.figures",
    "report scripts": "import trainbench.report",
}


# ----------------------------------------------------------------------------- facts


def _version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_facts() -> dict:
    return {
        "host": socket.gethostname(),
        "cpu_model": _cpu_model(),
        "logical_cores": os.cpu_count(),
        "memory_gib": _memory_gib(),
        "os": platform.platform(),
        "python": platform.python_version(),
        "packages": {
            name: _version(name)
            for name in ("torch", "snakemake", "pandas", "numpy", "matplotlib", "seaborn", "scipy")
        },
    }


def _memory_gib() -> float | None:
    try:
        pages, size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        return None
    return round(pages * size / 2**30, 1)


def tree_facts(tree: Path, rev: str | None) -> dict:
    def git(*args: str) -> str | None:
        out = subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True)
        return out.stdout.strip() if out.returncode == 0 else None

    if rev:
        return {"source": f"git archive {rev}", "commit": git("rev-parse", rev)}
    if tree.resolve() != REPO:
        return {"source": str(tree), "commit": None}
    dirty = git("status", "--porcelain", "--untracked-files=no")
    return {"source": str(tree), "commit": git("rev-parse", "HEAD"), "dirty": bool(dirty)}


# ----------------------------------------------------------------------------- workflow copies


def export_tree(rev: str, dst: Path) -> Path:
    """The workflow files of commit ``rev`` (git archive: the repository is not touched)."""
    dst.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", rev, *WORKFLOW_FILES, *WORKFLOW_DIRS, "docs/measured"],
        capture_output=True,
        check=True,
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(dst, filter="data")
    return dst


def copy_workflow(tree: Path, dst: Path) -> Path:
    """The files a workflow run needs (as tests/helpers.py copies them)."""
    dst.mkdir(parents=True, exist_ok=True)
    for name in WORKFLOW_FILES:
        shutil.copy2(tree / name, dst / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", ".*")
    for name in WORKFLOW_DIRS:
        shutil.copytree(tree / name, dst / name, ignore=ignore, dirs_exist_ok=True)
    return dst


def _tracer_dir(tmp: Path) -> Path:
    folder = tmp / "tracer"
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy2(TRACER, folder / "sitecustomize.py")
    return folder


def _env(workdir: Path, tracer: Path | None = None, trace: Path | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "TRAINBENCH_ALLOW_FAULTS"}
    paths = [str(tracer)] if tracer else []
    paths += [str(workdir / "scripts"), os.environ.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    env.pop("TRAINBENCH_TRACE", None)
    if trace:
        env["TRAINBENCH_TRACE"] = str(trace)
    return env


def snakemake(workdir: Path, *args: str, env: dict, timeout: float = 1800) -> tuple[float, str]:
    """Run ``python -m snakemake ARGS`` in ``workdir``; (wall seconds, output). Raises on failure."""
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", *args],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )
    wall = time.perf_counter() - t0
    output = proc.stdout + proc.stderr
    if proc.returncode != 0:
        raise RuntimeError(f"snakemake {' '.join(args)} failed in {workdir}:\n{output[-4000:]}")
    return wall, output


# ----------------------------------------------------------------------------- trace


def read_trace(path: Path) -> dict[int, dict]:
    """Processes of a trace by pid: start/exit times, argv, rule, and their calls."""
    procs: dict[int, dict] = {}
    for line in path.read_text().splitlines():
        event = json.loads(line)
        proc = procs.setdefault(event["pid"], {"pid": event["pid"], "calls": []})
        proc["ppid"] = event["ppid"]
        if event["event"] == "start":
            proc["hooked"] = event["t"]
            proc["created"] = event.get("created") or event["t"]
            proc["argv"] = event.get("argv") or []
        elif event["event"] == "exit":
            proc["exit"] = event["t"]
            proc["rule"] = event.get("rule")
        elif event["event"] == "call":
            proc["calls"].append((event["t"], event["what"], event.get("arg")))
    return procs


def _first_call(proc: dict, what: str | tuple[str, ...]) -> tuple[float, str | None] | None:
    names = (what,) if isinstance(what, str) else what
    for t, name, arg in proc["calls"]:
        if name in names:
            return t, arg
    return None


def _last_call(proc: dict, what: str) -> float | None:
    times = [t for t, name, _ in proc["calls"] if name == what]
    return times[-1] if times else None


def _main_process(procs: dict[int, dict]) -> dict:
    roots = [p for p in procs.values() if p.get("ppid") not in procs]
    return min(roots, key=lambda p: p.get("created", 0))


def job_processes(procs: dict[int, dict]) -> list[dict]:
    """The Snakemake jobs' script processes (children of the main process), in start order."""
    main = _main_process(procs)
    jobs = [p for p in procs.values() if p.get("ppid") == main["pid"] and "exit" in p]
    return sorted(jobs, key=lambda p: p["created"])


def _children(procs: dict[int, dict], pid: int) -> list[dict]:
    return sorted((p for p in procs.values() if p.get("ppid") == pid), key=lambda p: p["created"])


def cell_phases(procs: dict[int, dict], records_root: Path) -> list[dict]:
    """One row per run_cell job: its wall time split into phases (seconds).

    A cell's wall time runs from the end of the previous job (or Snakemake's start)
    to the end of its own script process, so the rows add up to the whole run."""
    main = _main_process(procs)
    rows = []
    previous_end = main["created"]
    for job in job_processes(procs):
        end = job["exit"]
        if job.get("rule") != "run_cell":
            previous_end = end
            continue
        ready = _first_call(job, "trainbench.launcher.run_cell")
        record_write = _last_call(job, "trainbench.records.atomic_write_json")
        row: dict = {
            "cell": None,
            "snakemake_gap_s": job["created"] - previous_end,
            "launcher_start_imports_s": (ready[0] if ready else end) - job["created"],
        }
        if ready and ready[1]:
            output = Path(ready[1])
            row["cell"] = str(output.parent.relative_to(output.parents[4]))
            record = json.loads((records_root / row["cell"] / "metrics.json").read_text())
            row["status"] = record["status"]
        children = _children(procs, job["pid"])
        child = children[0] if children else None
        child_ready = _first_call(child, "trainbench.devices.get_device") if child else None
        child_done = _last_call(child, "trainbench.records.atomic_write_json") if child else None
        if child and child_ready and child_done:
            row["child_spawn_imports_s"] = child_ready[0] - ready[0]
            row["work_s"] = child_done - child_ready[0]
            row["child_exit_and_record_s"] = end - child_done
        else:  # no child ran (or it died before its work): everything after start-up
            row["child_spawn_imports_s"] = 0.0
            row["work_s"] = 0.0
            row["child_exit_and_record_s"] = end - (ready[0] if ready else end)
        row["record_write_s"] = (end - record_write) if record_write else None
        row["children"] = len(children)
        row["cell_wall_s"] = end - previous_end
        row["overhead_s"] = row["cell_wall_s"] - row["work_s"]
        rows.append(row)
        previous_end = end
    return rows


def job_phases(procs: dict[int, dict]) -> list[dict]:
    """One row per downstream job: Snakemake's gap before it, its script's start and
    imports (until its first trainbench call), and its work."""
    main = _main_process(procs)
    calls = (
        "trainbench.tables.read_table",
        "trainbench.aggregate.write_tables",
        "trainbench.report.render_report",
        "trainbench.report.render_workload_report",
    )
    rows, previous_end = [], main["created"]
    for job in job_processes(procs):
        ready = _first_call(job, calls)
        start = ready[0] if ready else job["exit"]
        rows.append(
            {
                "rule": job.get("rule"),
                "snakemake_gap_s": job["created"] - previous_end,
                "start_imports_s": start - job["created"],
                "work_s": job["exit"] - start,
                "process_s": job["exit"] - job["created"],
                "job_wall_s": job["exit"] - previous_end,
            }
        )
        previous_end = job["exit"]
    return rows


def snakemake_fixed(procs: dict[int, dict]) -> dict:
    """Snakemake's own cost around the jobs: its start-up (imports, executor plugins)
    until the Snakefile validates the config, then parsing and the DAG until the
    first job; and from the last job to its exit."""
    main = _main_process(procs)
    jobs = job_processes(procs)
    if not jobs or "exit" not in main:
        return {}
    fixed = {
        "start_to_first_job_s": jobs[0]["created"] - main["created"],
        "last_job_to_exit_s": main["exit"] - jobs[-1]["exit"],
        "total_s": main["exit"] - main["created"],
    }
    parsing = _first_call(main, "trainbench.config.validate_config")
    if parsing:
        fixed["startup_s"] = parsing[0] - main["created"]
        fixed["parse_and_dag_s"] = jobs[0]["created"] - parsing[0]
    return fixed


# ----------------------------------------------------------------------------- statistics


def _median(values) -> float | None:
    values = [v for v in values if v is not None]
    return round(statistics.median(values), 4) if values else None


def summarise(rows: list[dict], keys: list[str]) -> dict:
    return {"n": len(rows), **{key: _median(r.get(key) for r in rows) for key in keys}}


# ----------------------------------------------------------------------------- cells

CELL_KEYS = [
    "cell_wall_s",
    "overhead_s",
    "snakemake_gap_s",
    "launcher_start_imports_s",
    "child_spawn_imports_s",
    "work_s",
    "child_exit_and_record_s",
]


def cells_config(repeats: int) -> dict:
    """Cells that do almost nothing: one 16x16 matmul on cpu, cuda and mps (unavailable
    here), the last cpu repeat failed on purpose (fault injection)."""
    return {
        "seed": 0,
        "repeats": repeats,
        "devices": ["cpu", "mps", "cuda"],
        "launcher": {"max_attempts": 1, "progress": "never", "allow_fault_injection": True},
        "device_settings": {"cpu": {"threads": None}},
        "workloads": {"matmul": {"sizes": [16], "min_run_time_s": 0.01, "warmup_calls": 1}},
        "fault_injection": [
            {"workload": "matmul", "device": "cpu", "rep": repeats - 1, "fault": "exception"}
        ],
    }


def _records(workdir: Path) -> list[Path]:
    return sorted((workdir / "results" / "runs").glob("*/*/bs*/rep*/metrics.json"))


def _targets(workdir: Path, config: dict) -> list[str]:
    """The config's cell records, as the workflow names them (without running anything)."""
    from trainbench import config as tbconfig

    cells = tbconfig.expand_matrix(tbconfig.validate_config(copy.deepcopy(config)))
    return [f"results/runs/{cell.relpath}/metrics.json" for cell in cells]


def measure_cells(tree: Path, tmp: Path, repeats: int, runs: int, log=print) -> dict:
    tracer = _tracer_dir(tmp)
    config = cells_config(repeats)
    all_rows, walls, fixed, noop = [], [], [], []
    workdir = None
    for run in range(runs):
        workdir = copy_workflow(tree, tmp / f"cells-{run}")
        (workdir / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
        targets = _targets(workdir, config)
        trace = tmp / f"cells-{run}.jsonl"
        wall, _ = snakemake(workdir, "--cores", "1", *targets, env=_env(workdir, tracer, trace))
        procs = read_trace(trace)
        rows = cell_phases(procs, workdir / "results" / "runs")
        for row in rows:
            row["run"] = run
        all_rows += rows
        walls.append(wall)
        fixed.append(snakemake_fixed(procs))
        # Nothing to do: Snakemake's own fixed cost (parse, DAG, file checks).
        noop.append(snakemake(workdir, "--cores", "1", *targets, env=_env(workdir))[0])
        log(
            f"cells run {run + 1}/{runs}: {len(rows)} cells in {wall:.1f} s; median overhead "
            f"{_median(r['overhead_s'] for r in rows):.2f} s"
        )
    by_status = defaultdict(list)
    for row in all_rows:
        by_status[row.get("status")].append(row)
    return {
        "config": config,
        "runs": runs,
        "cells_per_run": len(all_rows) // max(runs, 1),
        "snakemake_wall_s": [round(w, 3) for w in walls],
        "snakemake_noop_s": _median(noop),
        "snakemake_fixed": {
            key: _median(f.get(key) for f in fixed)
            for key in ("start_to_first_job_s", "last_job_to_exit_s")
        },
        "all": summarise(all_rows, CELL_KEYS),
        "by_status": {
            status: summarise(rows, CELL_KEYS) for status, rows in sorted(by_status.items())
        },
        "cells": [
            {k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items()}
            for r in all_rows
        ],
        "records_dir": str(workdir / "results" / "runs") if workdir else None,
    }


# ----------------------------------------------------------------------------- imports


def _importtime_top(stderr: str, limit: int = 8) -> list[dict]:
    rows = []
    for line in stderr.splitlines():
        match = re.match(r"import time:\s+(\d+) \|\s+(\d+) \|( +)(\S+)", line)
        if match:
            rows.append(
                {
                    "module": match.group(4),
                    "depth": (len(match.group(3)) - 1) // 2,
                    "cumulative_s": int(match.group(2)) / 1e6,
                }
            )
    rows.sort(key=lambda r: -r["cumulative_s"])
    return [{**r, "cumulative_s": round(r["cumulative_s"], 3)} for r in rows[:limit]]


def measure_snakemake_start(tree: Path, reps: int) -> dict:
    """``snakemake --version``: Snakemake's own start-up (its imports and executor
    plugins), which every run pays once before it reads the Snakefile."""
    walls = []
    for _ in range(reps):
        t0 = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "snakemake", "--version"],
            env=_env(tree),
            cwd=tree,
            check=True,
            capture_output=True,
        )
        walls.append(time.perf_counter() - t0)
    plugins = sorted(
        dist.metadata["Name"]
        for dist in metadata.distributions()
        if (dist.metadata["Name"] or "").startswith("snakemake-executor-plugin-")
    )
    out = {"wall_s": _median(walls), "reps": reps, "executor_plugins": plugins}
    if "snakemake-executor-plugin-slurm" in plugins and shutil.which("scontrol"):
        # The Slurm plugin asks `scontrol show config` when it is imported.
        t0 = time.perf_counter()
        try:
            proc = subprocess.run(
                ["scontrol", "show", "config"], capture_output=True, timeout=30, check=False
            )
            out["scontrol_show_config_rc"] = proc.returncode
        except subprocess.TimeoutExpired:
            out["scontrol_show_config_rc"] = "timeout"
        out["scontrol_show_config_s"] = round(time.perf_counter() - t0, 3)
    return out


def measure_imports(tree: Path, reps: int) -> dict:
    env = _env(tree)
    out = {}
    for name, statement in IMPORTS.items():
        walls = []
        for _ in range(reps):
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-c", statement], env=env, cwd=tree, check=True)
            walls.append(time.perf_counter() - t0)
        profile = subprocess.run(
            [sys.executable, "-X", "importtime", "-c", statement],
            env=env,
            cwd=tree,
            capture_output=True,
            text=True,
            check=True,
        )
        out[name] = {
            "statement": statement,
            "process_wall_s": _median(walls),
            "reps": reps,
            "slowest_imports": _importtime_top(profile.stderr),
        }
    return out


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
    """Real records: the tracked H200 archives and the records of the cells run here."""
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
) -> dict:
    """One valid record per cell of ``config``'s matrix under ``workdir/results/runs``:
    mps unavailable (as on this machine), cuda failed at each training workload's
    largest batch size, everything else ok. Returns counts by status."""
    from trainbench import config as tbconfig
    from trainbench.records import write_record

    validated = tbconfig.validate_config(copy.deepcopy(config))
    cells = tbconfig.expand_matrix(validated)
    rng = np.random.default_rng(seed)
    pools: dict[tuple, list] = defaultdict(list)
    for source, record in templates:
        pools[(record["status"], record["cell"]["workload"], record.get("backend"))].append(
            (source, record)
        )
        pools[(record["status"], None, record.get("backend"))].append((source, record))
        pools[(record["status"], record["cell"]["workload"], None)].append((source, record))
    counts: dict[str, int] = defaultdict(int)
    for cell in cells:
        backend = tbconfig.find_variant(validated, cell.device).backend
        largest = max(validated["workloads"][cell.workload].get("batch_sizes") or [0])
        if backend == "mps":
            status = "unavailable"
        elif backend == "cuda" and cell.workload != "matmul" and cell.batch_size == largest:
            status = "failed"
        else:
            status = "ok"
        if status == "ok":
            pool = pools.get(("ok", cell.workload, backend)) or pools[("ok", cell.workload, None)]
        else:
            pool = pools.get((status, None, backend)) or pools[(status, None, None)]
            if not pool:
                pool = [p for k, v in pools.items() if k[0] == status for p in v]
        if not pool:
            raise RuntimeError(f"no {status} template record for {cell.relpath}")
        template = pool[int(rng.integers(len(pool)))]
        record = synthetic_record(template, cell, backend, status, rng)
        write_record(workdir / "results" / "runs" / cell.relpath / "metrics.json", record)
        counts[status] += 1
    return dict(sorted(counts.items()))


def _prepare_data(workdir: Path, config: dict) -> None:
    """Build the data sets the records' cells read (for real, through the workflow),
    then make every record newer than them: Snakemake then sees the cells as up to
    date, as after a real run, and runs only what follows them."""
    from trainbench import config as tbconfig
    from trainbench.workloads import info

    targets = [
        f"results/data/{name}/meta.json"
        for name in tbconfig.enabled_workloads(config)
        if info(name).prepares_data
    ]
    if targets:
        snakemake(workdir, "--cores", str(os.cpu_count() or 1), *targets, env=_env(workdir))
    now = time.time()
    for path in _records(workdir):
        os.utime(path, (now, now))


def _clean_downstream(workdir: Path) -> None:
    results = workdir / "results"
    for name in ("tables", "figures", "reports", "report.md"):
        target = results / name
        if target.is_dir():
            shutil.rmtree(target)
        elif target.exists():
            target.unlink()


def measure_downstream(
    tree: Path, tmp: Path, templates: list[tuple[str, dict]], runs: int, log=print
) -> dict:
    tracer = _tracer_dir(tmp)
    workdir = copy_workflow(tree, tmp / "downstream")
    config = synthetic_config()
    (workdir / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    counts = write_synthetic_records(workdir, config, templates)
    _prepare_data(workdir, config)
    walls, fixed, per_rule, totals, without_startup = [], [], defaultdict(list), [], []
    for run in range(runs):
        _clean_downstream(workdir)
        trace = tmp / f"downstream-{run}.jsonl"
        wall, _ = snakemake(
            workdir, "--cores", "1", "results/report.md", env=_env(workdir, tracer, trace)
        )
        procs = read_trace(trace)
        jobs = job_phases(procs)
        if any(job["rule"] in CELL_RULES for job in jobs):
            raise RuntimeError(f"cells reran in {workdir}: {[j['rule'] for j in jobs]}")
        walls.append(wall)
        fixed.append(snakemake_fixed(procs))
        if "startup_s" in fixed[-1]:
            without_startup.append(wall - fixed[-1]["startup_s"])
        grouped = defaultdict(list)
        for job in jobs:
            grouped[job["rule"]].append(job)
        for rule, rows in grouped.items():
            per_rule[rule].append(
                {key: sum(r[key] for r in rows) for key in rows[0] if key != "rule"}
                | {"jobs": len(rows)}
            )
        totals.append(
            {key: sum(j[key] for j in jobs) for key in ("start_imports_s", "work_s", "process_s")}
            | {"jobs": len(jobs), "between_jobs_s": sum(j["snakemake_gap_s"] for j in jobs[1:])}
        )
        log(f"downstream run {run + 1}/{runs}: {len(jobs)} jobs in {wall:.1f} s")
    keys = ["job_wall_s", "snakemake_gap_s", "start_imports_s", "work_s", "process_s"]
    return {
        "records": sum(counts.values()),
        "records_by_status": counts,
        "config": config,
        "runs": runs,
        "wall_s": _median(walls),
        "wall_s_each": [round(w, 3) for w in walls],
        # Snakemake's start-up varies with the machine (see snakemake_start), not
        # with the workflow: each run's own, from the trace, taken off that run.
        "wall_without_snakemake_startup_s": _median(without_startup),
        "wall_without_snakemake_startup_s_each": [round(w, 3) for w in without_startup],
        "snakemake_fixed": {
            key: _median(f.get(key) for f in fixed)
            for key in (
                "startup_s",
                "parse_and_dag_s",
                "start_to_first_job_s",
                "last_job_to_exit_s",
            )
        },
        "jobs": {
            key: _median(t[key] for t in totals)
            for key in ("jobs", "between_jobs_s", "start_imports_s", "work_s", "process_s")
        },
        "by_rule": {
            rule: {"jobs": rows[0]["jobs"], **{key: _median(r[key] for r in rows) for key in keys}}
            for rule, rows in sorted(per_rule.items())
        },
    }


# ----------------------------------------------------------------------------- report


def _met(value, goal) -> str:
    if value is None:
        return "not measured"
    return "met" if value <= goal else "not met"


def _dig(mapping: dict | None, *keys):
    for key in keys:
        mapping = mapping.get(key) if isinstance(mapping, dict) else None
    return mapping


def _describe(run: dict) -> str:
    tree = run.get("tree") or {}
    code = f"commit `{tree['commit'][:10]}`" if tree.get("commit") else f"`{tree.get('source')}`"
    if tree.get("dirty"):
        code += " plus uncommitted changes"
    return code + (f" ({run['note']})" if run.get("note") else "")


def _command(argv: list[str]) -> str:
    """A label's command as one would rerun it: the default output, quoted values."""
    shown, skip = [], False
    for arg in argv:
        if skip or arg in ("--output", "--no-readme"):
            skip = arg == "--output"
            continue
        shown.append(arg if re.fullmatch(r"[\w./:=+-]+", arg) else repr(arg))
    return " ".join([".venv/bin/python benchmarks/workflow_overhead.py", *shown])


def markdown_section(result: dict) -> str:
    """The README section, every number read from ``result`` (the JSON)."""
    machine, runs, goals = result["machine"], result["runs"], result["goals"]
    packages = machine["packages"]
    labels = [label for label in ("before", "after") if label in runs]
    labels += [label for label in runs if label not in labels]
    records = next((_dig(runs[x], "downstream", "records") for x in reversed(labels)), None)
    lines = [
        SECTION_HEADING,
        "",
        "Goals: what Snakemake, process start-up and imports add to each cell ≤ "
        f"{goals['per_cell_overhead_s']:g} s; aggregate + tables + figures + reports over "
        f"{records or 1000} records ≤ {goals['downstream_s']:g} s.",
        "",
        f"Measured on {result['date']} on `{machine['host']}`: {machine['cpu_model']}, "
        f"{machine['logical_cores']} logical cores, {machine['memory_gib']} GiB, "
        f"{machine['os']}; Python {machine['python']}, torch {packages['torch']}, "
        f"snakemake {packages['snakemake']}, pandas {packages['pandas']}, "
        f"matplotlib {packages['matplotlib']}, seaborn {packages['seaborn']}. Every number "
        f"below is a median read from [`{result['json']}`]({result['json_link']}), which "
        "also holds each repetition, per-rule times and the slowest imports.",
        "",
        "```bash",
        *(_command(runs[x]["argv"]) for x in labels),
        "```",
        "",
        *(f"- {x}: {_describe(runs[x])}" for x in labels),
        "",
        "| | goal | " + " | ".join(labels) + " |",
        "|---|---|" + "---|" * len(labels),
    ]

    def row(title: str, goal: float | None, path: tuple) -> None:
        shown = []
        for label in labels:
            value = _dig(runs[label], *path)
            text = "–" if value is None else f"{value:.2f} s"
            if goal is not None and value is not None:
                text += f" ({_met(value, goal)})"
            shown.append(text)
        goal_text = f"≤ {goal:g} s" if goal is not None else ""
        lines.append(f"| {title} | {goal_text} | " + " | ".join(shown) + " |")

    row("**per-cell overhead** (cell wall time − its own work)", goals["per_cell_overhead_s"],
        ("cells", "all", "overhead_s"))  # fmt: skip
    for status in ("ok", "unavailable", "failed"):
        row(f"– {status} cells", goals["per_cell_overhead_s"],
            ("cells", "by_status", status, "overhead_s"))  # fmt: skip
    for key, title in (
        ("snakemake_gap_s", "– Snakemake between jobs (job done, scheduling, job start)"),
        ("launcher_start_imports_s", "– launcher: Python start, script preamble, imports"),
        ("child_spawn_imports_s", "– child: spawn, Python start, imports (torch)"),
        ("child_exit_and_record_s", "– child exit, record built and written"),
        ("work_s", "the cell's own work (a 16×16 matmul; the availability check)"),
    ):
        row(title, None, ("cells", "all", key))
    row("Snakemake with nothing to do (parse, DAG, file checks)", None,
        ("cells", "snakemake_noop_s"))  # fmt: skip
    row(f"**aggregate + tables + figures + reports**, {records} records, "
        "`snakemake --cores 1 results/report.md`", goals["downstream_s"],
        ("downstream", "wall_s"))  # fmt: skip
    row("the same without Snakemake's own start-up (each run's, from the trace)",
        goals["downstream_s"], ("downstream", "wall_without_snakemake_startup_s"))  # fmt: skip
    row("– Snakemake's start-up: imports and executor plugins, until it reads the Snakefile",
        None, ("downstream", "snakemake_fixed", "startup_s"))  # fmt: skip
    row("– Snakemake parses the Snakefile and builds the DAG of the up-to-date cells",
        None, ("downstream", "snakemake_fixed", "parse_and_dag_s"))  # fmt: skip
    row("– Snakemake between the jobs", None, ("downstream", "jobs", "between_jobs_s"))
    row("– the jobs' Python start and imports", None, ("downstream", "jobs", "start_imports_s"))
    row("– the jobs' work", None, ("downstream", "jobs", "work_s"))
    row("`snakemake --version` (start-up alone, timed apart)", None,
        ("snakemake_start", "wall_s"))  # fmt: skip
    jobs = ", ".join(
        f"{x}: {_dig(runs[x], 'downstream', 'jobs', 'jobs'):g} jobs "
        f"({', '.join(_dig(runs[x], 'downstream', 'by_rule') or {})})"
        for x in labels
        if _dig(runs[x], "downstream", "jobs", "jobs") is not None
    )
    counts = _dig(runs[labels[-1]], "downstream", "records_by_status") or {}
    lines += [
        "",
        "How: **cells** runs a matrix of cells that do almost nothing (one 16×16 matmul on "
        "cpu, mps and cuda; mps and cuda are unavailable here; one cpu repeat fails on "
        "purpose) through `snakemake --cores 1`, with a tracer (`sitecustomize`) that "
        "timestamps every process and phase boundary. **Downstream** makes "
        + ", ".join(f"{n} {status}" for status, n in counts.items())
        + " records from the measured H200 records in `docs/measured/` and the cells' "
        "records (device, batch size, repeat and values varied), builds their data sets, "
        "and times `snakemake --cores 1 results/report.md` with every cell up to date"
        + (f" ({jobs})" if jobs else "")
        + ".",
        "",
    ]
    slurm = [
        (x, runs[x]["snakemake_start"])
        for x in labels
        if _dig(runs[x], "snakemake_start", "scontrol_show_config_s") is not None
    ]
    if slurm:
        lines += [
            "Snakemake's start-up includes the Slurm executor plugin (installed in this "
            "environment), which runs `scontrol show config` when it is imported, by every "
            "`snakemake`, local runs too. `scontrol show config` alone, timed before each "
            "label's runs: "
            + "; ".join(
                f"{x}: {s['scontrol_show_config_s']:.1f} s (exit {s['scontrol_show_config_rc']})"
                for x, s in slurm
            )
            + ". It waits for a controller where Slurm's client tools and config are "
            "installed but no controller answers (exit 1), as on this shared machine at "
            "times; hence the row without Snakemake's start-up.",
            "",
        ]
    return "\n".join(lines)


def update_readme(path: Path, section: str) -> None:
    """Replace (or append) the ``## Workflow overhead`` section, leaving the others alone."""
    text = path.read_text() if path.exists() else "# Benchmarks\n\n"
    pattern = re.compile(rf"^{re.escape(SECTION_HEADING)}\n.*?(?=^## |\Z)", re.M | re.S)
    block = section.rstrip("\n") + "\n\n"
    if pattern.search(text):
        text = pattern.sub(lambda _: block, text, count=1)
    else:
        text = text.rstrip("\n") + "\n\n" + block
    path.write_text(text.rstrip("\n") + "\n")


# ----------------------------------------------------------------------------- main


def default_output(date: str) -> Path:
    return REPO / "benchmarks" / "results" / f"workflow-overhead-{os.cpu_count()}core-{date}.json"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--label", default="after", help="runs.<label> in the JSON (before/after)")
    parser.add_argument(
        "--rev", help="measure this commit's workflow (git archive) instead of the working tree"
    )
    parser.add_argument("--tree", type=Path, help="measure the workflow in this folder")
    parser.add_argument("--note", help="what this label's code is (kept in the JSON)")
    parser.add_argument("--cell-repeats", type=int, default=5, help="repeats of each cell per run")
    parser.add_argument("--cell-runs", type=int, default=3, help="snakemake runs of the cells")
    parser.add_argument("--downstream-runs", type=int, default=3)
    parser.add_argument("--import-reps", type=int, default=5)
    parser.add_argument(
        "--skip", choices=["cells", "downstream", "imports"], action="append", default=[]
    )
    parser.add_argument(
        "--output",
        type=Path,
        help="JSON file (default benchmarks/results/workflow-overhead-<N>core-<date>.json)",
    )
    parser.add_argument("--readme", type=Path, default=REPO / "benchmarks" / "README.md")
    parser.add_argument("--no-readme", action="store_true")
    parser.add_argument(
        "--render", action="store_true", help="only write the README section from the JSON"
    )
    parser.add_argument("--keep", action="store_true", help="keep the temporary workflow copies")
    args = parser.parse_args(argv)

    date = _dt.date.today().isoformat()
    output = args.output or default_output(date)
    result = json.loads(output.read_text()) if output.exists() else {}
    if args.render:
        # The file may have been measured under another name and moved here.
        result.update(json=output.name, json_link=f"results/{output.name}")
        output.write_text(json.dumps(result, indent=2) + "\n")
        update_readme(args.readme, markdown_section(result))
        print(f"updated {args.readme} from {output}")
        return 0
    tmp = Path(tempfile.mkdtemp(prefix="trainbench-overhead-"))
    try:
        tree = export_tree(args.rev, tmp / "tree") if args.rev else (args.tree or REPO)
        run: dict = {
            "tree": tree_facts(tree, args.rev),
            "started": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
            "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
            "argv": sys.argv[1:] if argv is None else argv,
        }
        if args.note:
            run["note"] = args.note
        if "imports" not in args.skip:
            print("timing imports ...", flush=True)
            run["imports"] = measure_imports(tree, args.import_reps)
            run["snakemake_start"] = measure_snakemake_start(tree, args.import_reps)
        record_dirs = []
        if "cells" not in args.skip:
            run["cells"] = measure_cells(tree, tmp, args.cell_repeats, args.cell_runs)
            record_dirs.append(Path(run["cells"].pop("records_dir")))
        if "downstream" not in args.skip:
            archives = sorted(REPO.glob(TEMPLATE_ARCHIVES))
            if not record_dirs:
                raise SystemExit(
                    "downstream needs the cells' records as templates: do not skip cells"
                )
            templates = load_templates(archives, record_dirs)
            run["downstream"] = measure_downstream(tree, tmp, templates, args.downstream_runs)
        run["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            print(f"kept {tmp}")
    result.update(
        {
            "benchmark": "workflow_overhead",
            "date": date,
            "machine": machine_facts(),
            "goals": GOALS,
            "json": output.name,
            "json_link": f"results/{output.name}",
        }
    )
    result.setdefault("runs", {})[args.label] = run
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {output}")
    if not args.no_readme:
        update_readme(args.readme, markdown_section(result))
        print(f"updated {args.readme}")
    return 0
