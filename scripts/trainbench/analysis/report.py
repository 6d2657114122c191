"""Published tables -> Markdown reports, through the Jinja2 templates in ``templates/``.

The reports compute nothing: every number and every verdict comes from a published
table of the statistics layer (``docs/statistics.md``); this module selects rows and
writes the prose, :mod:`trainbench.analysis.report_tables` formats their values and lays out the
tables. ``environments.csv`` and ``skipped.csv`` are read for facts only. No
timestamp: the same tables give the same bytes.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import jinja2
from trainbench.analysis.beside_verdicts import target_lines as beside_target_lines
from trainbench.analysis.published import PUBLISHED_TABLES as PUBLISHED
from trainbench.analysis.report_beside import SAMPLES_CHECK, beside_context
from trainbench.analysis.report_tables import (
    ATTENTION,
    BEST_SETTING,
    BOUNDS,
    CELL_TIME,
    COLLAPSE,
    CROSSOVER,
    ENERGY,
    ENVIRONMENT,
    LABELS,
    MATMUL,
    MEMORY,
    NUMERICS,
    PARITY,
    REPEATS,
    STABILITY,
    STEP_BREAKDOWN,
    TASK,
    TIME_TO_TARGET,
    WARNINGS,
    WORKLOAD,
    Row,
    as_flag,
    cols,
    counted_text,
    epoch_columns,
    escape_cell,
    field_text,
    list_text,
    markdown,
    plain_value,
    speed_columns,
    table,
    target_text,
    text_of,
)
from trainbench.analysis.tables import MISSING, bytes_text, compact, interval_text, read_table, sig
from trainbench.common.records import atomic_write_text
from trainbench.workloads import WORKLOADS

TEMPLATES = Path(__file__).parent / "templates"
ALL = "(all)"
fmt_num = sig  # the median's text in the reports (tests/test_workflow_e2e.py formats with it)


# ----------------------------------------------------------------------------- prose


def energy_rows(rows: Sequence[Row]) -> list[Row]:
    """The energy table's rows with something measured or a verdict to give: a device
    whose counters were all unavailable is left out (its note is its energy line)."""
    return [r for r in rows if plain_value(r.get("n")) or not plain_value(r.get("unavailable"))]


def energy_lines(rows: Sequence[Row]) -> list[str]:
    """One line per device, in the table's order: the domains it measured and its
    ``unavailable`` note, each distinct text once (selected, never computed)."""
    found: dict[str, dict[str, list[str]]] = {}
    for r in rows:
        entry = found.setdefault(field_text(r, "device"), {"domains": [], "notes": []})
        for key, column in (("domains", "domains"), ("notes", "unavailable")):
            text = plain_value(r.get(column))
            if text and text not in entry[key]:
                entry[key].append(text)
    lines = []
    for device, entry in found.items():
        parts = [f"measured {' / '.join(entry['domains'])}"] if entry["domains"] else []
        parts += entry["notes"] or ([] if parts else [f"no energy measured on {device}"])
        lines.append(escape_cell(f"**{device}**: " + "; ".join(parts)))
    return lines


def _of(rows: Sequence[Row], workload: str) -> list[Row]:
    """Rows of one workload (a ";"-joined workload column counts each of its names)."""
    return [r for r in rows if workload in field_text(r, "workload").split(";")]


def _verdict_line(r: Row, with_workload: bool) -> str:
    """symbol, who, status and the table's text; the first failing item named."""
    status, text, first = (
        field_text(r, "status"),
        field_text(r, "text"),
        plain_value(r.get("first_failing")),
    )
    who = f"**{field_text(r, 'device')}**"
    if with_workload:
        who = f"`{field_text(r, 'workload')}` on {who}"
    line = f"{field_text(r, 'symbol')} {who}"
    line += f": {text}" if text.lower().startswith(status.lower()) else f" ({status}): {text}"
    if first and str(first) not in text:
        line += f" First failing item: {first}."
    bound = plain_value(r.get("bound"))
    if bound:
        line = line.rstrip() + ("" if line.rstrip().endswith(".") else ".") + f" Bound: {bound}."
    return line


def verdict_lines(t: Mapping[str, list[Row]]) -> list[str]:
    """Index verdicts: one per workload × device, unavailable devices once, then
    failures of workloads without a verdict row (microbenchmarks)."""
    judged = {(r.get("workload"), r.get("device")) for r in t["verdicts"]}
    lines = [_verdict_line(r, True) for r in t["verdicts"] if r.get("status") != "unavailable"]
    for r in t["attention"]:
        cells = f"{field_text(r, 'cells')} cell(s)"
        if r.get("status") == "unavailable":
            lines.append(
                f"⚪ **{field_text(r, 'device')}** (unavailable): {field_text(r, 'detail')}; "
                f"{cells} of {list_text(r.get('workload'))} not measured."
            )
        elif (r.get("workload"), r.get("device")) not in judged:
            lines.append(
                f"❌ `{field_text(r, 'workload')}` on **{field_text(r, 'device')}**: {cells} "
                f"**{field_text(r, 'status')}** ({field_text(r, 'error_class')}) at batch size "
                f"{field_text(r, 'batch_sizes')}: {field_text(r, 'detail')}"
            )
    for r in t["crossover"]:
        if r.get("kind") == "matmul size":
            lines.append(
                f"`{field_text(r, 'workload')}` on **{field_text(r, 'device')}** (matmul batch "
                f"{field_text(r, 'batch_size')}): matmul crossover {field_text(r, 'finding')}"
            )
    return [escape_cell(line) for line in lines]


def target_lines(rows: Sequence[Row]) -> list[str]:
    """The time-to-target lines, as the console prints them (:func:`.beside_verdicts.
    target_lines`): each best_setting row's ``summary`` (every device at its best
    setting, the baseline's own time included) and the one line for the workloads
    without a target."""
    return [escape_cell(line) for line in beside_target_lines(rows, quote="`")]


def has_training(rows: Sequence[Row]) -> bool:
    """Whether the overview names a training workload (the report's Time to target
    section is there whenever one is)."""
    return any(field_text(r, "kind") == "training" for r in rows)


def _span(prefix: str, kind: str):
    """ "1.27–1.32x (range of 3 vs 3 runs)" from a comparison row's interval columns."""

    def text(r: Row) -> str:
        span = interval_text(
            plain_value(r.get(f"{prefix}low")), plain_value(r.get(f"{prefix}high"))
        )
        return span if span == MISSING else f"{span}x ({field_text(r, kind)})"

    return text


# The comparison table (stats.compare): each side against the baseline side.
COMPARISON = cols(
    ("workload", "workload"), ("device", "machine_device"), ("batch size", "batch_size", "i"),
    ("side", "side"), ("baseline", "baseline_side"), ("repeats", "repeats", "i"),
    ("baseline repeats", "baseline_repeats", "i"), ("samples/s (median)", "median", "n"),
    ("baseline samples/s", "baseline_median", "n"), ("ratio", "ratio", "x"),
    ("interval", _span("", "interval"), "i"), ("verdict", "verdict"), ("reason", "reason"),
    ("times sooner to target", "ttt_ratio", "x"), ("interval ", _span("ttt_", "ttt_interval"), "i"),
    ("time-to-target verdict", "ttt_verdict"),
)  # fmt: skip


def comparison_context(rows: Sequence[Row]) -> dict:
    """The template's ``comparison`` (table), ``comparison_by`` (software or folder),
    ``comparison_sides`` (per device: the sides and their baseline) and
    ``comparison_lines`` (each row's ⇄ sentence)."""
    sides: dict[tuple[str, str], list[str]] = {}
    for r in rows:
        if plain_value(r.get("side")) is not None:
            key = (field_text(r, "machine_device"), field_text(r, "baseline_side"))
            sides.setdefault(key, [])
            if field_text(r, "side") not in sides[key]:
                sides[key].append(field_text(r, "side"))
    return {
        "comparison": table(rows, COMPARISON),
        "comparison_by": ", ".join(sorted({field_text(r, "by") for r in rows})),
        "comparison_sides": [
            escape_cell(f"`{machine}`: {', '.join(others)} against the baseline {base}")
            for (machine, base), others in sides.items()
        ],
        "comparison_lines": [escape_cell(field_text(r, "line")) for r in rows],
    }


def warning_counts(rows: Sequence[Row]) -> dict | None:
    """How many measurements carry a warning that withholds or changes a verdict (the
    table's ``affects_verdict``; every row in tables written before it), by kind (the
    table is sorted by kind). The other rows stay in Measurement quality alone."""
    kinds = [field_text(r, "kind") for r in rows if as_flag(r.get("affects_verdict")) is not False]
    counts = ", ".join(f"{kinds.count(k)} {k}" for k in dict.fromkeys(kinds))
    return {"n": len(kinds), "kinds": counts} if kinds else None


def interval_kinds(*groups: Sequence[Row]) -> dict:
    """The interval kinds the rows state (only these may be claimed)."""
    keys = ("interval", "speedup_interval")
    kinds = [
        field_text(r, k) for rows in groups for r in rows for k in keys if plain_value(r.get(k))
    ]
    kinds = list(dict.fromkeys(kinds))
    ci = any("CI" in k for k in kinds)
    return {"kinds": "; ".join(kinds), "range": any("range" in k for k in kinds), "ci": ci}


def _not_converged(rows: Sequence[Row]) -> list[str]:
    return [
        escape_cell(
            f"`{field_text(r, 'workload')}` on **{field_text(r, 'device')}** at batch size "
            f"{field_text(r, 'batch_size')}: {field_text(r, 'note')}"
        )
        for r in rows
        if as_flag(r.get("converged")) is False
    ]


def _counts_text(r: Row | None) -> str:
    if r is None:
        return "0 run records."
    counts = counted_text((r.get(k), k) for k in ("ok", "failed", "unavailable"))
    return f"{field_text(r, 'records')} run records: {counts}." if counts else "0 run records."


def _links(paths: Iterable[Any] | None, output: Any, suffix: str | None = None) -> dict[str, str]:
    """Relative links from the report, by file stem (``suffix`` replaces the paths')."""
    paths = [Path(p).with_suffix(suffix) if suffix else Path(p) for p in paths or []]
    return {p.stem: Path(os.path.relpath(p, Path(output).parent)).as_posix() for p in paths}


def _tables(inputs: Mapping[str, Any], output: Any, suffix: str) -> dict[str, str]:
    return _links([inputs[n] for n in PUBLISHED if inputs.get(n)], output, suffix)


# ----------------------------------------------------------------------------- rendering


def load(inputs: Mapping[str, Any]) -> dict[str, list[Row]]:
    """Every published table (and the record tables environments, skipped, software,
    duplicates) as rows; absent ones empty."""
    out = {}
    for name in (*PUBLISHED, "environments", "skipped", "software", "duplicates"):
        rows = read_table(inputs[name]).to_dict("records") if inputs.get(name) else []
        out[name] = [{k: plain_value(v) for k, v in row.items()} for row in rows]
    return out


@functools.lru_cache(maxsize=8)
def _environment(loader_dir: Path) -> jinja2.Environment:
    """One Jinja environment per template folder (templates compiled once a process)."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(loader_dir)), undefined=jinja2.StrictUndefined,
        trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True,
    )  # fmt: skip
    env.filters.update(
        table=markdown, text=text_of, bytes=bytes_text, list=list_text, esc=escape_cell
    )
    return env


def _write(template: Any, default: str, output: Any, context: Mapping) -> str:
    template = Path(template or TEMPLATES / default)
    text = _environment(template.parent).get_template(template.name).render(**context)
    atomic_write_text(output, text)
    return text


def _workload_sections(t: Mapping[str, list[Row]], reports: Mapping[str, str]) -> list[dict]:
    sections = []
    for r in t["overview"]:
        name = field_text(r, "workload")
        if name == ALL:
            continue
        low, high = field_text(r, "repeats_min"), field_text(r, "repeats_max")
        info = WORKLOADS.get(name)
        sections.append({
            "name": name, "seed_report": info.seed_report if info else "?", "kind": field_text(r, "kind"),
            "baseline": field_text(r, "baseline"), "devices": list_text(r.get("devices")),
            "counts": _counts_text(r), "repeats": low if low == high else f"{low}–{high}",
            "report": reports.get(name), "matmul": table(_of(t["matmul_summary"], name), MATMUL),
            "setup": field_text(r, "setup"),
        })  # fmt: skip
    return sections


def _shared(t: Mapping[str, list[Row]], inputs: Mapping, output: Any, first: list) -> dict:
    """What both reports render (``first``: leading columns, the index's workload)."""
    return {
        "stability": table(t["stability"], first + STABILITY),
        "parity": table(t["parity"], first + PARITY),
        "repeats": table(t["repeats"], first + REPEATS),
        "warning": warning_counts(t["warnings"]),
        "not_converged": _not_converged(t["repeats"]),
        "quality": table(t["warnings"], WARNINGS),
        "attention": table(t["attention"], ATTENTION),
        "figures": _links(inputs.get("figures"), output),
        "tables_md": _tables(inputs, output, ".md"),
        "provenance": provenance_line(inputs),
    }


def provenance_line(inputs: Mapping[str, Any]) -> str:
    """Which config files (and run name) produced this report."""
    files = [f"`{f}`" for f in inputs.get("config_files") or []]
    if not files:
        return ""
    text = "Config: " + files[0] + (f", overridden by {', '.join(files[1:])}" if files[1:] else "")
    name = inputs.get("run_name")
    return text + (f"; run name `{name}`." if name else ".")


def merge_context(t: Mapping[str, list[Row]]) -> dict:
    """What merging results folders did (software.csv, duplicates.csv): each software
    difference, whether it split the records and why; how many duplicate records were
    dropped; each conflict, whose records are in no number."""
    notes = t.get("duplicates", [])
    dropped = sum(int(r.get("records") or 0) for r in notes if r.get("kind") == "duplicate")
    conflicts = [
        f"{text_of(r.get('identity'))}: `{'`, `'.join(str(r.get('dropped')).split('; '))}`"
        f" (they differ in {text_of(r.get('differs'))})"
        for r in notes
        if r.get("kind") == "conflict"
    ]
    software = [
        f"{text_of(r.get('field'))}: {text_of(r.get('values'))}; **{text_of(r.get('split'))}**"
        f" ({text_of(r.get('reason'))})"
        for r in t.get("software", [])
    ]
    return {"duplicates_dropped": dropped, "conflicts": conflicts, "software_notes": software}


def render_report(inputs: Mapping[str, Any], output: str | os.PathLike) -> str:
    """The index report (results/report.md) from the published tables in ``inputs``."""
    t = load(inputs)
    total = next((r for r in t["overview"] if r.get("workload") == ALL), None)
    codes = [c for c in field_text(total or {}, "code").split(";") if c and c != MISSING]
    context = {
        **_shared(t, inputs, output, WORKLOAD),
        "records_line": _counts_text(total),
        "code": f" Code: {'; '.join(f'`{c}`' for c in codes)}." if codes else "",
        "skipped": [{k: escape_cell(text_of(v)) for k, v in r.items()} for r in t["skipped"]],
        **merge_context(t),
        "verdicts": verdict_lines(t),
        "target_lines": target_lines(t["best_setting"]),
        "training": has_training(t["overview"]),
        "speedup": table(t["speedup"], WORKLOAD + speed_columns("train samples/s") + BOUNDS),
        "step_breakdown": table(t["step_breakdown"], WORKLOAD + STEP_BREAKDOWN),
        "energy_lines": energy_lines(t["energy"]),
        "intervals": interval_kinds(t["speedup"]),
        "crossover": table(t["crossover"], CROSSOVER),
        "collapse": table(t["collapse"], COLLAPSE),
        "workloads": _workload_sections(t, _links(inputs.get("workload_reports"), output)),
        "tables_csv": _tables(inputs, output, ".csv"),
        "environments": table(t["environments"], ENVIRONMENT),
        # Devices with a breakdown (records written before it have none).
        "cell_time": table([r for r in t["cell_time"] if plain_value(r.get("cells"))], CELL_TIME),
        **beside_context(t, WORKLOAD),
        **comparison_context(t["comparison"]),
    }
    return _write(inputs.get("template"), "report.md.j2", output, context)


class _Text(dict):
    """Cell texts by column; a column the table lacks reads as missing."""

    def __missing__(self, key: str) -> str:
        return MISSING


def _checklist(r: Row) -> _Text:
    """One device's verification facts and configuration as text."""
    text = _Text({k: escape_cell(text_of(v)) for k, v in r.items()})
    for check in ("placement", "autocast", "fallback", "numerics"):
        text[f"{check}_box"] = "x" if as_flag(r.get(f"{check}_pass")) else " "
    parameters = plain_value(r.get("parameters"))
    text.update(
        parameters_text=MISSING if parameters is None else f"{int(parameters):,}",
        batch_sizes=list_text(r.get("batch_sizes")),
        effective_batch_sizes=list_text(r.get("effective_batch_sizes")),
        learning_rate=compact(r.get("learning_rate")),
        memory_initial=bytes_text(r.get("memory_initial_bytes")),
        memory_peak=bytes_text(r.get("memory_peak_bytes")),
        grad_scaler="yes" if as_flag(r.get("grad_scaler")) else "",
        amp=field_text(r, "autocast_dtype") if plain_value(r.get("autocast_dtype")) else "off",
    )
    return text


def render_workload_report(
    workload: str, inputs: Mapping[str, Any], output: str | os.PathLike
) -> str:
    """One training workload's verification report (the form of seed report 000) from the tables."""
    every = load(inputs)
    t = {name: _of(rows, workload) for name, rows in every.items()}
    overview = next(iter(t["overview"]), None)
    devices = {
        field_text(r, "device") for name in ("verification", "speedup", "verdicts") for r in t[name]
    }
    environments = [
        r
        for r in every["environments"]
        if any(
            field_text(r, "device") == d or field_text(r, "device").startswith(d + "@")
            for d in devices
        )
    ]
    info = WORKLOADS.get(workload)
    context = {
        **_shared(t, inputs, output, []),
        "workload": workload,
        "seed_report": info.seed_report if info else "?",
        "baseline": text_of((overview or {}).get("baseline")),
        "records_line": _counts_text(overview),
        "setup": field_text(overview or {}, "setup"),
        "verdicts": [escape_cell(_verdict_line(r, False)) for r in t["verdicts"]],
        "speed": table(t["speedup"], speed_columns("samples/s")),
        "intervals": interval_kinds(t["speedup"], t["eval_speed"]),
        "eval_speed": table(t["eval_speed"], speed_columns("eval samples/s")),
        "energy": table(energy_rows(t["energy"]), ENERGY),
        "energy_lines": energy_lines(t["energy"]),
        "checklists": [_checklist(r) for r in t["verification"]],
        "numerics": table(t["verification"], NUMERICS),
        "epochs": table(t["epoch_summary"], epoch_columns(t["epoch_summary"])),
        "labels": table(t["per_label"], LABELS),
        "task": table(t["task"], TASK),
        "memory": table(t["memory"], MEMORY),
        "time_to_target": table(t["time_to_target"], TIME_TO_TARGET + SAMPLES_CHECK),
        "best_setting": table(t["best_setting"], BEST_SETTING),
        "target_lines": target_lines(t["best_setting"]),
        "target": target_text(next(iter(t["time_to_target"]), None)),
        "environments": table(environments, ENVIRONMENT),
        "missing": MISSING,
        **beside_context(t, []),
    }
    template = inputs.get("workload_template") or inputs.get("template")
    return _write(template, "workload_report.md.j2", output, context)
