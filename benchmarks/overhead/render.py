"""Workflow overhead, the write-up: the README section from a results file alone."""

from __future__ import annotations

import re
from pathlib import Path

SECTION_HEADING = "## Workflow overhead"
GOALS = {"per_cell_overhead_s": 3.0, "downstream_s": 15.0}


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
    code += f" ({run['note']})" if run.get("note") else ""
    loads = [
        f"{what} {load[0]:g}"
        for what, load in (
            ("at the start", run.get("load_average_at_start")),
            ("when the downstream runs began", _dig(run, "downstream", "load_average_at_start")),
            ("at the end", run.get("load_average_at_end")),
        )
        if load
    ]
    return code + (f"; 1-minute load average {', '.join(loads)}" if loads else "")


def command_line(argv: list[str]) -> str:
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
    runs = result["runs"]
    labels = [label for label in ("before", "after") if label in runs]
    labels += [label for label in runs if label not in labels]
    records = next((_dig(runs[x], "downstream", "records") for x in reversed(labels)), None)
    lines = [
        *_intro_lines(result, labels, records),
        *_table_lines(runs, labels, result["goals"], records, _downstream_command(runs, labels)),
        *_method_lines(runs, labels),
        *_slurm_lines(runs, labels),
    ]
    return "\n".join(lines)


def _intro_lines(result: dict, labels: list[str], records: int | None) -> list[str]:
    """The heading, the goals, the machine, the commands and the code of each label."""
    machine, runs, goals = result["machine"], result["runs"], result["goals"]
    packages = machine["packages"]
    return [
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
        *(command_line(runs[x]["argv"]) for x in labels),
        "```",
        "",
        *(f"- {x}: {_describe(runs[x])}" for x in labels),
        "",
    ]


# The table's rows after the header: (title, goal key or None, path into a label's run).
# A title holding "{records}" names the downstream record count, "{command}" its command.
TABLE_ROWS: tuple[tuple[str, str | None, tuple], ...] = (
    ("**per-cell overhead** (cell wall time − its own work)", "per_cell_overhead_s",
     ("cells", "all", "overhead_s")),
    *(
        (f"– {status} cells", "per_cell_overhead_s", ("cells", "by_status", status, "overhead_s"))
        for status in ("ok", "unavailable", "failed")
    ),
    ("– Snakemake between jobs (job done, scheduling, job start)", None,
     ("cells", "all", "snakemake_gap_s")),
    ("– launcher: Python start, script preamble, imports", None,
     ("cells", "all", "launcher_start_imports_s")),
    ("– child: spawn, Python start, imports (torch)", None,
     ("cells", "all", "child_spawn_imports_s")),
    ("– child exit, record built and written", None,
     ("cells", "all", "child_exit_and_record_s")),
    ("the cell's own work (a 16×16 matmul; the availability check)", None,
     ("cells", "all", "work_s")),
    ("Snakemake with nothing to do (parse, DAG, file checks)", None,
     ("cells", "snakemake_noop_s")),
    ("**aggregate + tables + figures + reports**, {records} records, "
     "`{command}`", "downstream_s", ("downstream", "wall_s")),
    ("the same without Snakemake's own start-up (each run's, from the trace)", "downstream_s",
     ("downstream", "wall_without_snakemake_startup_s")),
    ("– Snakemake's start-up: imports and executor plugins, until it reads the Snakefile", None,
     ("downstream", "snakemake_fixed", "startup_s")),
    ("– Snakemake parses the Snakefile and builds the DAG of the up-to-date cells", None,
     ("downstream", "snakemake_fixed", "parse_and_dag_s")),
    ("– Snakemake between the jobs (no job running)", None,
     ("downstream", "jobs", "between_jobs_s")),
    ("– the jobs' Python start and imports (summed over the jobs)", None,
     ("downstream", "jobs", "start_imports_s")),
    ("– the jobs' work (summed over the jobs, which may run side by side)", None,
     ("downstream", "jobs", "work_s")),
    ("`snakemake --version` (start-up alone, timed apart)", None, ("snakemake_start", "wall_s")),
)  # fmt: skip


def _downstream_command(runs: dict, labels: list[str]) -> str:
    """The downstream's command (the latest label's; results before it was kept: --cores 1)."""
    found = [_dig(runs[x], "downstream", "command") for x in labels if "downstream" in runs[x]]
    return next((c for c in reversed(found) if c), "snakemake --cores 1 results/report.md")


def _table_lines(
    runs: dict, labels: list[str], goals: dict, records: int | None, command: str
) -> list[str]:
    """The table: one column per label, one row per :data:`TABLE_ROWS` entry."""
    lines = [
        "| | goal | " + " | ".join(labels) + " |",
        "|---|---|" + "---|" * len(labels),
    ]
    for title, goal_key, path in TABLE_ROWS:
        goal = goals[goal_key] if goal_key else None
        shown = [_table_value(_dig(runs[label], *path), goal) for label in labels]
        goal_text = f"≤ {goal:g} s" if goal is not None else ""
        title = title.format(records=records, command=command)
        lines.append(f"| {title} | {goal_text} | " + " | ".join(shown) + " |")
    return lines


def _table_value(value, goal: float | None) -> str:
    text = "–" if value is None else f"{value:.2f} s"
    if goal is not None and value is not None:
        text += f" ({_met(value, goal)})"
    return text


def _jobs_text(downstream: dict) -> str:
    """ "8 jobs under `snakemake --cores 2 ...`: aggregate 2.1 s, ..." (each rule's
    processes' seconds, summed over its jobs)."""
    rules = downstream.get("by_rule") or {}
    parts = [
        f"{rule} {row['process_s']:.1f} s" + (f" ({row['jobs']} jobs)" if row["jobs"] > 1 else "")
        for rule, row in rules.items()
        if row.get("process_s") is not None
    ]
    command = downstream.get("command", "snakemake --cores 1 results/report.md")
    return f"{downstream['jobs']['jobs']:g} jobs under `{command}`: " + ", ".join(parts)


def _method_lines(runs: dict, labels: list[str]) -> list[str]:
    """How the cells and the downstream rules were measured, with the jobs each label ran."""
    jobs = "; ".join(
        f"{x}: {_jobs_text(runs[x]['downstream'])}"
        for x in labels
        if _dig(runs[x], "downstream", "jobs", "jobs") is not None
    )
    counts = _dig(runs[labels[-1]], "downstream", "records_by_status") or {}
    references = _dig(runs[labels[-1]], "downstream", "references")
    return [
        "",
        "How: **cells** runs a matrix of cells that do almost nothing (one 16×16 matmul on "
        "cpu, mps and cuda; mps and cuda are unavailable here; one cpu repeat fails on "
        "purpose) through `snakemake --cores 1`, with a tracer (`sitecustomize`) that "
        "timestamps every process and phase boundary. **Downstream** makes "
        + ", ".join(f"{n} {status}" for status, n in counts.items())
        + " records from the real records in `tests/data/cpu-records.tgz` and the cells' "
        "records (device, batch size, repeat and values varied"
        + (
            "; each ok training record with its per-step losses, of its batch size's length"
            f"), {references} float64 references (one per repeat of each training "
            "workload's baseline, as `run_reference` makes them)"
            if references
            else ")"
        )
        + ", builds their data sets, and times the rules after the cells, every cell "
        "up to date; each rule's processes' seconds are medians over the runs"
        + (f" ({jobs})" if jobs else "")
        + ".",
        "",
    ]


def _slurm_lines(runs: dict, labels: list[str]) -> list[str]:
    """Where the Slurm executor plugin is installed: what its ``scontrol show config``
    cost each label."""
    slurm = [
        (x, runs[x]["snakemake_start"])
        for x in labels
        if _dig(runs[x], "snakemake_start", "scontrol_show_config_s") is not None
    ]
    if not slurm:
        return []
    return [
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
