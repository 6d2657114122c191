"""Published tables -> Markdown reports, through the Jinja2 templates in ``templates/``.

The reports compute nothing: every number and every verdict comes from a published
table of the statistics layer (``docs/statistics.md``); this module selects rows and
formats values with :mod:`trainbench.tables`. ``environments.csv`` and ``skipped.csv``
are read for facts only. No timestamp: the same tables give the same bytes.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2

from . import tables
from .published import PUBLISHED_TABLES as PUBLISHED
from .records import atomic_write_text
from .tables import MISSING, bytes_text, compact, interval_text, ratio_text, read_table, sig
from .workloads import WORKLOADS

TEMPLATES = Path(__file__).parent / "templates"
ALL = "(all)"
fmt_num = sig  # the median's text in the reports (tests/test_workflow_e2e.py formats with it)
Row = dict[str, Any]


# ----------------------------------------------------------------------------- values


def _value(x: Any) -> Any:
    """None for a missing value, a plain Python value otherwise."""
    if tables.is_missing(x):
        return None
    return x.item() if hasattr(x, "item") and not isinstance(x, (str, bytes)) else x


def _flag(x: Any) -> bool | None:
    x = _value(x)
    if x is None:
        return None
    return x.strip().lower() in ("true", "1", "1.0", "yes") if isinstance(x, str) else bool(x)


def _t(x: Any) -> str:
    """Any value as cell text (integral floats from CSV round trips as integers)."""
    x = _value(x)
    if isinstance(x, str):
        return x
    if isinstance(x, float) and x.is_integer() and abs(x) < 1e15:
        x = int(x)
    return tables.cell_text(x)


def _s(r: Row, key: str) -> str:
    return _t(r.get(key))


def _pct(x: Any) -> str:
    return MISSING if _value(x) is None else f"{compact(float(x) * 100, 2)}%"


def _yes(x: Any) -> str:
    flag = _flag(x)
    return MISSING if flag is None else ("yes" if flag else "no")


def _list(x: Any) -> str:
    """A ";"-joined table value for reading."""
    return ", ".join(part.strip() for part in _t(x).split(";"))


def _iv(low: Any, high: Any, kind: Any = None, unit: str = "") -> str:
    """ "1.2–1.4x (range of 3 runs)": an interval and the kind its row states."""
    text = interval_text(_value(low), _value(high))
    if text == MISSING:
        return text
    return f"{text}{unit} ({_t(kind)})" if _value(kind) is not None else f"{text}{unit}"


def _counted(pairs: Iterable[tuple[Any, str]]) -> str:
    return ", ".join(f"{int(n)} {word}" for n, word in pairs if _value(n))


# ----------------------------------------------------------------------------- tables

Column = tuple[str, str, Callable[[Row], str]]  # header, "l" or "r", cell text


@dataclass(frozen=True)
class Table:
    header: tuple[str, ...]
    align: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]

    def __bool__(self) -> bool:
        return bool(self.rows)


def _escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def table(rows: Sequence[Row], columns: Sequence[Column]) -> Table:
    return Table(
        tuple(c[0] for c in columns),
        tuple(c[1] for c in columns),
        tuple(tuple(_escape(c[2](r)) for c in columns) for r in rows),
    )


def markdown(t: Table) -> str:
    """A Markdown pipe table, one row a line, cells unpadded."""
    lines = ["| " + " | ".join(t.header) + " |"]
    lines.append("|" + "|".join("---:" if a == "r" else "---" for a in t.align) + "|")
    lines += ["| " + " | ".join(row) + " |" for row in t.rows]
    return "\n".join(lines)


# Column formats: cell text and alignment.
FORMATS: dict[str, tuple[Callable[[Any], str], str]] = {
    "t": (_t, "l"), "i": (_t, "r"), "n": (sig, "r"), "x": (ratio_text, "r"), "%": (_pct, "r"),
    "b": (bytes_text, "r"), "n4": (lambda x: sig(x, 4), "r"), "y": (_yes, "l"), "l": (_list, "l"),
}  # fmt: skip


def cols(*specs: tuple) -> list[Column]:
    """Columns from (header, key or row function, format of :data:`FORMATS`)."""
    out = []
    for header, key, *fmt in specs:
        fn, align = FORMATS[fmt[0] if fmt else "t"]
        out.append((header, align, key if callable(key) else lambda r, k=key, f=fn: f(r.get(k))))
    return out


def _speed_flags(r: Row) -> str:
    runs = (("disturbed_runs", "disturbed"), ("short_window_runs", "short window"),
            ("no_steady_state_runs", "no steady state"))  # fmt: skip
    text = _counted((r.get(k), w) for k, w in runs)
    return ", ".join(filter(None, [text, "bimodal" if _flag(r.get("bimodal")) else ""]))


def _ratio_iv(r: Row) -> str:
    return _iv(r.get("speedup_low"), r.get("speedup_high"), r.get("speedup_interval"), "x")


WORKLOAD = cols(("workload", "workload"))
KEYS = cols(("device", "device"), ("batch size", "batch_size", "i"))


def speed_columns(unit: str) -> list[Column]:
    return KEYS + cols(
        ("runs", "n", "i"), (f"{unit} (median)", "median", "n"),
        ("interval", lambda r: _iv(r.get("low"), r.get("high"), r.get("interval")), "i"),
        ("speedup", "speedup", "x"), ("speedup interval", _ratio_iv, "i"),
        ("verdict", "verdict"), ("quality", _speed_flags), ("reason", "reason"),
    )  # fmt: skip


STABILITY = cols(
    ("device", "device"), ("status", "status"), ("cells", "cells", "i"), ("ok", "ok_cells", "i"),
    ("failed", "failed_cells", "i"), ("unavailable", "unavailable_cells", "i"),
    ("attempts", "attempts", "i"), ("failed attempts", "failed_attempts", "i"),
    ("failures by class", "failed_by_class"), ("within-run CV", "within_run_cv", "%"),
    ("between-run CV", "between_run_cv", "%"), ("epoch-time CV", "epoch_time_cv", "%"),
    ("slowest to fastest", "slowest_to_fastest", "x"), ("note", "note"),
)  # fmt: skip


def _parity_ci(prefix: str, percent: bool = False) -> Callable[[Row], str]:
    """ "[−0.012, +0.018]": a parity row's 90% interval of the difference."""

    def text(r: Row) -> str:
        low, high = _value(r.get(f"{prefix}_low")), _value(r.get(f"{prefix}_high"))
        if low is None or high is None:
            return MISSING
        scale, unit = (100, "%") if percent else (1, "")
        return f"[{float(low) * scale:+.3g}{unit}, {float(high) * scale:+.3g}{unit}]"

    return text


PARITY = KEYS + cols(
    ("metric", "primary_metric"), ("runs", "n", "i"), ("final (mean)", "final_metric", "n"),
    ("baseline runs", "baseline_n", "i"), ("baseline (mean)", "baseline_metric", "n"),
    ("difference", "metric_diff", "n"), ("90% interval", _parity_ci("metric")),
    ("margin", "metric_margin", "n"), ("metric ok", "metric_pass", "y"),
    ("final loss", "final_loss", "n"), ("baseline loss", "baseline_loss", "n"),
    ("loss difference", "loss_diff", "%"), ("loss 90% interval", _parity_ci("loss", True)),
    ("loss margin", "loss_margin", "%"), ("loss ok", "loss_pass", "y"), ("parity", "parity"),
    ("rule", "rule"),
)  # fmt: skip
REPEATS = KEYS + cols(
    ("baseline", "baseline"), ("repeats", "repeats", "i"), ("records", "records", "i"),
    ("min", "min_repeats", "i"), ("max", "max_repeats", "i"),
    ("target half-width", "target_halfwidth", "%"), ("half-width", "halfwidth", "%"),
    ("converged", "converged", "y"), ("note", "note"),
)  # fmt: skip
MEMORY = KEYS + cols(
    ("runs", "n", "i"), ("initial", "memory_initial_bytes", "b"),
    ("peak", "memory_peak_bytes", "b"), ("limit", "memory_limit_bytes", "b"),
    ("peak share of limit", "peak_fraction_of_limit", "%"), ("how measured", "memory_method"),
)  # fmt: skip
CROSSOVER = cols(
    ("kind", "kind"), ("workload", "workload"), ("device", "device"),
    ("batch size", "batch_size", "i"), ("from", "crossover", "i"), ("finding", "finding"),
)  # fmt: skip
COLLAPSE = WORKLOAD + KEYS + cols(("evidence", "evidence"))
MATMUL = cols(
    ("n", "n", "i"), ("device", "device"), ("matmul batch", "batch_size", "i"),
    ("runs", "repeats", "i"), ("GFLOP/s (median)", "gflops", "n"),
    ("interval", lambda r: _iv(r.get("gflops_low"), r.get("gflops_high"), r.get("interval")), "i"),
    ("speedup", "speedup", "x"), ("speedup interval", _ratio_iv, "i"), ("verdict", "verdict"),
    ("quality", lambda r: _counted(((r.get("noisy_runs"), "noisy"),
                                    (r.get("disturbed_runs"), "disturbed")))),
    ("reason", "reason"),
)  # fmt: skip
NUMERICS = cols(
    ("device", "device"), ("runs", "runs", "i"), ("canary passed", "numerics_pass", "y"),
    ("detail", "numerics_detail"),
)  # fmt: skip
WARNINGS = cols(
    ("kind", "kind"), ("workload", "workload"), ("device", "device"),
    ("batch size", "batch_size", "i"), ("rep", "rep", "i"), ("detail", "detail"),
)  # fmt: skip
ATTENTION = cols(
    ("workload", "workload", "l"), ("device", "device"), ("status", "status"),
    ("class", "error_class"), ("cells", "cells", "i"), ("batch sizes", "batch_sizes"),
    ("detail", "detail"),
)  # fmt: skip
ENVIRONMENT = cols(
    ("host", "host"), ("device", "device"), ("device name", "device_name"), ("CPU", "cpu_model"),
    ("cores", "logical_cores", "i"), ("OS", "os"), ("Python", "python"), ("torch", "torch"),
    ("other packages", "packages"), ("commit", lambda r: _s(r, "git_commit")[:12]),
    ("Slurm jobs", "slurm_job_ids"),
)  # fmt: skip
LABELS = KEYS + cols(
    ("label", "label"), ("runs", "n", "i"), ("precision", "precision", "n"),
    ("recall", "recall", "n"), ("F1", "f1", "n"), ("accuracy", "accuracy", "n"),
    ("F1 − baseline", "f1_minus_baseline", "n"), ("support", "support", "i"),
)  # fmt: skip


def _energy_flags(r: Row) -> str:
    runs = (("disturbed_runs", "disturbed"), ("short_window_runs", "short window"))
    return _counted((r.get(k), w) for k, w in runs)


ENERGY = KEYS + cols(
    ("runs", "n", "i"), ("J/sample (median)", "joules_per_sample", "n"),
    ("interval", lambda r: _iv(r.get("jps_low"), r.get("jps_high"), r.get("interval")), "i"),
    ("samples/J", "samples_per_joule", "n"), ("energy ratio", "energy_ratio", "x"),
    ("ratio interval", lambda r: _iv(r.get("energy_ratio_low"), r.get("energy_ratio_high"),
                                     r.get("energy_ratio_interval"), "x"), "i"),
    ("verdict", "verdict"), ("domains", "domains"), ("mean W", "mean_watts", "n"),
    ("idle W", "idle_watts", "n"), ("quality", _energy_flags), ("reason", "reason"),
)  # fmt: skip


def energy_rows(rows: Sequence[Row]) -> list[Row]:
    """The energy table's rows with something measured or a verdict to give: a device
    whose counters were all unavailable is left out (its note is its energy line)."""
    return [r for r in rows if _value(r.get("n")) or not _value(r.get("unavailable"))]


def energy_lines(rows: Sequence[Row]) -> list[str]:
    """One line per device, in the table's order: the domains it measured and its
    ``unavailable`` note, each distinct text once (selected, never computed)."""
    found: dict[str, dict[str, list[str]]] = {}
    for r in rows:
        entry = found.setdefault(_s(r, "device"), {"domains": [], "notes": []})
        for key, column in (("domains", "domains"), ("notes", "unavailable")):
            text = _value(r.get(column))
            if text and text not in entry[key]:
                entry[key].append(text)
    lines = []
    for device, entry in found.items():
        parts = [f"measured {' / '.join(entry['domains'])}"] if entry["domains"] else []
        parts += entry["notes"] or ([] if parts else [f"no energy measured on {device}"])
        lines.append(_escape(f"**{device}**: " + "; ".join(parts)))
    return lines


TASK = KEYS + cols(
    ("runs", "n", "i"), ("metric", "primary_metric"), ("best (median)", "best_metric", "n"),
    ("interval", lambda r: _iv(r.get("best_low"), r.get("best_high"), r.get("interval")), "t"),
    ("final", "final_metric", "n"), ("micro-F1", "micro_f1", "n"), ("macro-F1", "macro_f1", "n"),
    ("best epoch", "best_epoch", "n"),
)  # fmt: skip


def epoch_columns(rows: Sequence[Row]) -> list[Column]:
    """The per-epoch table with the eval metric columns the rows carry (at most six);
    "*" marks an epoch that is not full in every repeat, "(cold)" the cold eval pass."""
    skip = ("eval_seconds", "eval_cold")
    metrics = [k for k in (rows[0] if rows else {}) if k.startswith("eval_") and k not in skip]
    return KEYS + cols(
        ("epoch", lambda r: _s(r, "epoch") + ("" if _flag(r.get("full_epoch")) else " *"), "i"),
        ("runs", "n", "i"), ("train loss (median)", "train_loss", "n4"),
        ("min–max", lambda r: interval_text(r.get("train_loss_min"), r.get("train_loss_max"),
                                            FORMATS["n4"][0]), "i"),
        *((m[5:], m, "n") for m in metrics[:6]),
        ("time (timed, s)", "timed_seconds", "n"), ("samples/s", "samples_per_s", "n"),
        ("eval s", lambda r: sig(r.get("eval_seconds"))
                             + (" (cold)" if _flag(r.get("eval_cold")) else ""), "i"),
    )  # fmt: skip


# ----------------------------------------------------------------------------- prose


def _of(rows: Sequence[Row], workload: str) -> list[Row]:
    """Rows of one workload (a ";"-joined workload column counts each of its names)."""
    return [r for r in rows if workload in _s(r, "workload").split(";")]


def _verdict_line(r: Row, with_workload: bool) -> str:
    """symbol, who, status and the table's text; the first failing item named."""
    status, text, first = _s(r, "status"), _s(r, "text"), _value(r.get("first_failing"))
    who = f"**{_s(r, 'device')}**"
    if with_workload:
        who = f"`{_s(r, 'workload')}` on {who}"
    line = f"{_s(r, 'symbol')} {who}"
    line += f": {text}" if text.lower().startswith(status.lower()) else f" ({status}): {text}"
    if first and str(first) not in text:
        line += f" First failing item: {first}."
    return line


def verdict_lines(t: Mapping[str, list[Row]]) -> list[str]:
    """Index verdicts: one per workload × device, unavailable devices once, then
    failures of workloads without a verdict row (microbenchmarks)."""
    judged = {(r.get("workload"), r.get("device")) for r in t["verdicts"]}
    lines = [_verdict_line(r, True) for r in t["verdicts"] if r.get("status") != "unavailable"]
    for r in t["attention"]:
        cells = f"{_s(r, 'cells')} cell(s)"
        if r.get("status") == "unavailable":
            lines.append(
                f"⚪ **{_s(r, 'device')}** (unavailable): {_s(r, 'detail')}; "
                f"{cells} of {_list(r.get('workload'))} not measured."
            )
        elif (r.get("workload"), r.get("device")) not in judged:
            lines.append(
                f"❌ `{_s(r, 'workload')}` on **{_s(r, 'device')}**: {cells} "
                f"**{_s(r, 'status')}** ({_s(r, 'error_class')}) at batch size "
                f"{_s(r, 'batch_sizes')}: {_s(r, 'detail')}"
            )
    for r in t["crossover"]:
        if r.get("kind") == "matmul size":
            lines.append(
                f"`{_s(r, 'workload')}` on **{_s(r, 'device')}** (matmul batch "
                f"{_s(r, 'batch_size')}): matmul crossover {_s(r, 'finding')}"
            )
    return [_escape(line) for line in lines]


def warning_counts(rows: Sequence[Row]) -> dict | None:
    """How many measurements were flagged, by kind (the table is sorted by kind)."""
    kinds = [_s(r, "kind") for r in rows]
    counts = ", ".join(f"{kinds.count(k)} {k}" for k in dict.fromkeys(kinds))
    return {"n": len(kinds), "kinds": counts} if kinds else None


def interval_kinds(*groups: Sequence[Row]) -> dict:
    """The interval kinds the rows state (only these may be claimed)."""
    keys = ("interval", "speedup_interval")
    kinds = [_s(r, k) for rows in groups for r in rows for k in keys if _value(r.get(k))]
    kinds = list(dict.fromkeys(kinds))
    ci = any("CI" in k for k in kinds)
    return {"kinds": "; ".join(kinds), "range": any("range" in k for k in kinds), "ci": ci}


def _not_converged(rows: Sequence[Row]) -> list[str]:
    return [
        _escape(
            f"`{_s(r, 'workload')}` on **{_s(r, 'device')}** at batch size "
            f"{_s(r, 'batch_size')}: {_s(r, 'note')}"
        )
        for r in rows
        if _flag(r.get("converged")) is False
    ]


def _counts_text(r: Row | None) -> str:
    if r is None:
        return "0 run records."
    counts = _counted((r.get(k), k) for k in ("ok", "failed", "unavailable"))
    return f"{_s(r, 'records')} run records: {counts}." if counts else "0 run records."


def _links(paths: Iterable[Any] | None, output: Any, suffix: str | None = None) -> dict[str, str]:
    """Relative links from the report, by file stem (``suffix`` replaces the paths')."""
    paths = [Path(p).with_suffix(suffix) if suffix else Path(p) for p in paths or []]
    return {p.stem: Path(os.path.relpath(p, Path(output).parent)).as_posix() for p in paths}


def _tables(inputs: Mapping[str, Any], output: Any, suffix: str) -> dict[str, str]:
    return _links([inputs[n] for n in PUBLISHED if inputs.get(n)], output, suffix)


# ----------------------------------------------------------------------------- rendering


def load(inputs: Mapping[str, Any]) -> dict[str, list[Row]]:
    """Every published table (and environments, skipped) as rows; absent ones empty."""
    out = {}
    for name in (*PUBLISHED, "environments", "skipped"):
        rows = read_table(inputs[name]).to_dict("records") if inputs.get(name) else []
        out[name] = [{k: _value(v) for k, v in row.items()} for row in rows]
    return out


@functools.lru_cache(maxsize=8)
def _environment(loader_dir: Path) -> jinja2.Environment:
    """One Jinja environment per template folder (templates compiled once a process)."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(loader_dir)), undefined=jinja2.StrictUndefined,
        trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True,
    )  # fmt: skip
    env.filters.update(table=markdown, text=_t, bytes=bytes_text, list=_list, esc=_escape)
    return env


def _write(template: Any, default: str, output: Any, context: Mapping) -> str:
    template = Path(template or TEMPLATES / default)
    text = _environment(template.parent).get_template(template.name).render(**context)
    atomic_write_text(output, text)
    return text


def _workload_sections(t: Mapping[str, list[Row]], reports: Mapping[str, str]) -> list[dict]:
    sections = []
    for r in t["overview"]:
        name = _s(r, "workload")
        if name == ALL:
            continue
        low, high = _s(r, "repeats_min"), _s(r, "repeats_max")
        info = WORKLOADS.get(name)
        sections.append({
            "name": name, "seed_report": info.seed_report if info else "?", "kind": _s(r, "kind"),
            "baseline": _s(r, "baseline"), "devices": _list(r.get("devices")),
            "counts": _counts_text(r), "repeats": low if low == high else f"{low}–{high}",
            "report": reports.get(name), "matmul": table(_of(t["matmul_summary"], name), MATMUL),
            "setup": _s(r, "setup"),
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


def render_report(inputs: Mapping[str, Any], output: str | os.PathLike) -> str:
    """The index report (results/report.md) from the published tables in ``inputs``."""
    t = load(inputs)
    total = next((r for r in t["overview"] if r.get("workload") == ALL), None)
    commits = [c for c in _s(total or {}, "commits").split(";") if c and c != MISSING]
    context = {
        **_shared(t, inputs, output, WORKLOAD),
        "records_line": _counts_text(total),
        "code": f" Code: {', '.join(f'`{c}`' for c in commits)}." if commits else "",
        "skipped": [{k: _escape(_t(v)) for k, v in r.items()} for r in t["skipped"]],
        "verdicts": verdict_lines(t),
        "speedup": table(t["speedup"], WORKLOAD + speed_columns("train samples/s")),
        "energy_lines": energy_lines(t["energy"]),
        "intervals": interval_kinds(t["speedup"]),
        "crossover": table(t["crossover"], CROSSOVER),
        "collapse": table(t["collapse"], COLLAPSE),
        "workloads": _workload_sections(t, _links(inputs.get("workload_reports"), output)),
        "tables_csv": _tables(inputs, output, ".csv"),
        "environments": table(t["environments"], ENVIRONMENT),
    }
    return _write(inputs.get("template"), "report.md.j2", output, context)


class _Text(dict):
    """Cell texts by column; a column the table lacks reads as missing."""

    def __missing__(self, key: str) -> str:
        return MISSING


def _checklist(r: Row) -> _Text:
    """One device's verification facts and configuration as text."""
    text = _Text({k: _escape(_t(v)) for k, v in r.items()})
    for check in ("placement", "autocast", "fallback", "numerics"):
        text[f"{check}_box"] = "x" if _flag(r.get(f"{check}_pass")) else " "
    parameters = _value(r.get("parameters"))
    text.update(
        parameters_text=MISSING if parameters is None else f"{int(parameters):,}",
        batch_sizes=_list(r.get("batch_sizes")),
        effective_batch_sizes=_list(r.get("effective_batch_sizes")),
        learning_rate=compact(r.get("learning_rate")),
        memory_initial=bytes_text(r.get("memory_initial_bytes")),
        memory_peak=bytes_text(r.get("memory_peak_bytes")),
        grad_scaler="yes" if _flag(r.get("grad_scaler")) else "",
        amp=_s(r, "autocast_dtype") if _value(r.get("autocast_dtype")) else "off",
    )
    return text


def render_workload_report(
    workload: str, inputs: Mapping[str, Any], output: str | os.PathLike
) -> str:
    """One training workload's verification report (the form of seed report 000) from the tables."""
    every = load(inputs)
    t = {name: _of(rows, workload) for name, rows in every.items()}
    overview = next(iter(t["overview"]), None)
    devices = {_s(r, "device") for name in ("verification", "speedup", "verdicts") for r in t[name]}
    environments = [
        r
        for r in every["environments"]
        if any(_s(r, "device") == d or _s(r, "device").startswith(d + "@") for d in devices)
    ]
    info = WORKLOADS.get(workload)
    context = {
        **_shared(t, inputs, output, []),
        "workload": workload,
        "seed_report": info.seed_report if info else "?",
        "baseline": _t((overview or {}).get("baseline")),
        "records_line": _counts_text(overview),
        "setup": _s(overview or {}, "setup"),
        "verdicts": [_escape(_verdict_line(r, False)) for r in t["verdicts"]],
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
        "environments": table(environments, ENVIRONMENT),
        "missing": MISSING,
    }
    template = inputs.get("workload_template") or inputs.get("template")
    return _write(template, "workload_report.md.j2", output, context)
