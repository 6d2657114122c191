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
- **downstream**: 1,000 synthetic records, made from real records (the test
  records in ``tests/data/cpu-records.tgz`` and the cells run above) with
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

import yaml
from trainbench.environment import cpu_model_name
from trainbench.tree import WORKFLOW_DIRS, WORKFLOW_FILES, copy_workflow

from .render import GOALS, markdown_section, update_readme
from .synthetic import load_templates, synthetic_config, write_synthetic_records
from .trace import cell_phases, job_phases, read_trace, snakemake_fixed

REPO = Path(__file__).resolve().parents[2]
TRACER = Path(__file__).with_name("tracer.py")
TEMPLATE_ARCHIVES = "tests/data/*records.tgz"
CELL_RULES = ("run_cell", "prepare_data", "plan_round")

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


def machine_facts() -> dict:
    return {
        "host": socket.gethostname(),
        "cpu_model": cpu_model_name(),
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
        ["git", "-C", str(REPO), "archive", rev, *WORKFLOW_FILES, *WORKFLOW_DIRS],
        capture_output=True,
        check=True,
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(dst, filter="data")
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
