"""Workflow overhead, downstream: the rules after the cells (aggregate, tables, figures,
reports) over 1,000 synthetic records whose cells are up to date, timed per rule
through the real ``snakemake`` with the tracer."""

from __future__ import annotations

import os
import shutil
import time
from collections import defaultdict
from pathlib import Path

import yaml
from trainbench.evidence.tree import copy_workflow

from .synthetic import synthetic_config, write_synthetic_records
from .trace import idle_between_jobs, job_phases, read_trace, snakemake_fixed
from .workflow import median, snakemake, tracer_dir, workflow_env

CELL_RULES = ("run_cell", "run_reference", "prepare_data", "plan_round")


def _records(workdir: Path) -> list[Path]:
    return sorted((workdir / "results" / "runs").glob("*/*/bs*/rep*/metrics.json"))


def _prepare_data(workdir: Path, config: dict) -> None:
    """Build the data sets the records' cells read (for real, through the workflow),
    then make every record newer than them, and every reference newer than its records:
    Snakemake then sees the cells and references as up to date, as after a real run,
    and runs only what follows them."""
    from trainbench import config as tbconfig
    from trainbench.workloads import info

    targets = [
        f"results/data/{name}/meta.json"
        for name in tbconfig.enabled_workloads(config)
        if info(name).prepares_data
    ]
    if targets:
        snakemake(workdir, "--cores", str(os.cpu_count() or 1), *targets, env=workflow_env(workdir))
    now = time.time()
    for path in _records(workdir):
        os.utime(path, (now, now))
    # A reference is made from its repeat's records: newer than them.
    for path in (workdir / "results" / "references").glob("*/bs*/rep*/reference.json"):
        os.utime(path, (now + 1, now + 1))


def _clean_downstream(workdir: Path) -> None:
    results = workdir / "results"
    for name in ("tables", "figures", "reports", "report.md"):
        target = results / name
        if target.is_dir():
            shutil.rmtree(target)
        elif target.exists():
            target.unlink()


def _per_rule_sums(jobs: list[dict]) -> dict[str, dict]:
    """One run's jobs summed per rule, with each rule's job count."""
    grouped = defaultdict(list)
    for job in jobs:
        grouped[job["rule"]].append(job)
    return {
        rule: {key: sum(r[key] for r in rows) for key in rows[0] if key != "rule"}
        | {"jobs": len(rows)}
        for rule, rows in grouped.items()
    }


def _job_totals(jobs: list[dict], procs: dict[int, dict]) -> dict:
    """One run's jobs summed, and Snakemake's time between them (no job running)."""
    return {
        key: sum(j[key] for j in jobs) for key in ("start_imports_s", "work_s", "process_s")
    } | {"jobs": len(jobs), "between_jobs_s": idle_between_jobs(procs)}


def measure_downstream(
    tree: Path,
    tmp: Path,
    templates: list[tuple[str, dict]],
    runs: int,
    cores: int | None = None,
    log=print,
) -> dict:
    """``runs`` timed runs of ``snakemake --cores N results/report.md`` (N: ``cores``,
    default every core) over synthetic records made from ``templates``, every cell and
    reference up to date: wall times, Snakemake's fixed costs, and the jobs' phases in
    total and per rule."""
    cores = cores or os.cpu_count() or 1
    command = ["--cores", str(cores), "results/report.md"]
    tracer = tracer_dir(tmp)
    workdir = copy_workflow(tree, tmp / "downstream")
    config = synthetic_config()
    (workdir / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    counts, references = write_synthetic_records(workdir, config, templates)
    _prepare_data(workdir, config)
    walls, fixed, per_rule, totals, without_startup = [], [], defaultdict(list), [], []
    for run in range(runs):
        _clean_downstream(workdir)
        trace = tmp / f"downstream-{run}.jsonl"
        wall, _ = snakemake(workdir, *command, env=workflow_env(workdir, tracer, trace))
        procs = read_trace(trace)
        jobs = job_phases(procs)
        if any(job["rule"] in CELL_RULES for job in jobs):
            raise RuntimeError(f"cells reran in {workdir}: {[j['rule'] for j in jobs]}")
        walls.append(wall)
        fixed.append(snakemake_fixed(procs))
        if "startup_s" in fixed[-1]:
            without_startup.append(wall - fixed[-1]["startup_s"])
        for rule, sums in _per_rule_sums(jobs).items():
            per_rule[rule].append(sums)
        totals.append(_job_totals(jobs, procs))
        log(f"downstream run {run + 1}/{runs}: {len(jobs)} jobs in {wall:.1f} s")
    keys = ["job_wall_s", "snakemake_gap_s", "start_imports_s", "work_s", "process_s"]
    return {
        "command": " ".join(["snakemake", *command]),
        "cores": cores,
        "records": sum(counts.values()),
        "records_by_status": counts,
        "references": references,
        "config": config,
        "runs": runs,
        "wall_s": median(walls),
        "wall_s_each": [round(w, 3) for w in walls],
        # Snakemake's start-up varies with the machine (see snakemake_start), not
        # with the workflow: each run's own, from the trace, taken off that run.
        "wall_without_snakemake_startup_s": median(without_startup),
        "wall_without_snakemake_startup_s_each": [round(w, 3) for w in without_startup],
        "snakemake_fixed": {
            key: median(f.get(key) for f in fixed)
            for key in (
                "startup_s",
                "parse_and_dag_s",
                "start_to_first_job_s",
                "last_job_to_exit_s",
            )
        },
        "jobs": {
            key: median(t[key] for t in totals)
            for key in ("jobs", "between_jobs_s", "start_imports_s", "work_s", "process_s")
        },
        "by_rule": {
            rule: {"jobs": rows[0]["jobs"], **{key: median(r[key] for r in rows) for key in keys}}
            for rule, rows in sorted(per_rule.items())
        },
    }
