"""Workflow overhead, the trace: which process did what when (written by tracer.py,
installed as sitecustomize in every process of a measured run)."""

from __future__ import annotations

import json
from pathlib import Path


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
        ready = _first_call(job, "trainbench.launch.launcher.run_cell")
        record_write = _last_call(job, "trainbench.common.records.atomic_write_json")
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
        child_ready = _first_call(child, "trainbench.measure.devices.get_device") if child else None
        child_done = (
            _last_call(child, "trainbench.common.records.atomic_write_json") if child else None
        )
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
    """One row per downstream job: Snakemake's gap before it (from the last job that
    ended before it started, or Snakemake's start; jobs may run side by side), its
    script's start and imports (until its first trainbench call), and its work."""
    main = _main_process(procs)
    calls = (
        "trainbench.analysis.tables.read_table",
        "trainbench.analysis.aggregate.write_tables",
        "trainbench.analysis.report.render_report",
        "trainbench.analysis.report.render_workload_report",
    )
    jobs = job_processes(procs)
    rows = []
    for job in jobs:
        ready = _first_call(job, calls)
        start = ready[0] if ready else job["exit"]
        ended = [j["exit"] for j in jobs if j["exit"] <= job["created"]]
        previous_end = max(ended, default=main["created"])
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
    return rows


def idle_between_jobs(procs: dict[int, dict]) -> float:
    """Seconds between the first job's start and the last job's end in which no job
    ran: Snakemake's own time between jobs (their sum in a run of one job at a time)."""
    spans = sorted((j["created"], j["exit"]) for j in job_processes(procs))
    idle, reach = 0.0, None
    for start, end in spans:
        if reach is not None and start > reach:
            idle += start - reach
        reach = end if reach is None else max(reach, end)
    return idle


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
