"""What a person sees on the terminal during a run: one line per finished job (a
cell's outcome in words and numbers), then a short summary with the main verdicts
and the path of the report. Snakemake's own job blocks go to its log file
(``.snakemake/log/``), and to the terminal with ``--verbose``.

The Snakemake side is the logger plugin ``snakemake_logger_plugin_trainbench``
(selected by the default profile: ``logger: [trainbench]``), which feeds every log
record's event and fields to :class:`Console`. Everything here reads files the
jobs wrote (records, tables); nothing is computed.
"""

from __future__ import annotations

import csv
import json
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from trainbench.analysis.beside_verdicts import across_lines, samples_check_lines, target_lines

# INFO messages without an event worth a line (the rest is scheduler chatter).
PASSED_MESSAGES = (
    "Nothing to be done",
    "Complete log",
    "Building DAG of jobs",
    "Lints for",
    "Congratulations",
)
SUMMARY_VERDICTS = 12  # at most this many verdict lines in the closing summary


def _files(value) -> list[str]:
    """Snakemake's formatted file list (a string or a list, with flags) as paths."""
    items = value if isinstance(value, (list, tuple)) else re.split(r",\s*", str(value or ""))
    return [re.sub(r"\s*\(.*\)$", "", str(item)).strip() for item in items if str(item).strip()]


def cell_line(record_path: str | Path) -> str:
    """One cell's outcome from its record: ok with its throughput, failed with the
    class, unavailable with the reason; the quality flags that matter."""
    path = Path(record_path)
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return f"{_cell_name(path)}  no record written"
    name, status = _cell_name(path), record.get("status")
    if status == "unavailable":
        return f"{name}  unavailable: {record.get('reason')}"
    if status == "failed":
        error = record.get("error") or {}
        message = str(error.get("message") or "").splitlines()[0][:90]
        return f"{name}  failed: {error.get('class')} — {message}"
    return f"{name}  ok {_throughput(record.get('result') or {})}{_flags(record)}"


def _cell_name(path: Path) -> str:
    parts = path.parts
    return "/".join(parts[-5:-1]) if len(parts) >= 5 else str(path)


def _throughput(result: dict) -> str:
    if result.get("kind") == "microbenchmark":
        sizes = result.get("sizes") or []
        if not sizes:
            return "(no sizes)"
        from trainbench.analysis.tables import compact  # pandas: only once a cell has finished

        top = max(sizes, key=lambda s: s["n"])
        return f"{compact(top['gflops'])} GFLOP/s at n={top['n']}"
    rate = (result.get("timed") or {}).get("samples_per_s")
    return f"{rate:,.0f} samples/s" if rate else "(no throughput)"


def _flags(record: dict) -> str:
    result = record.get("result") or {}
    flags = []
    if (result.get("host") or {}).get("disturbed"):
        from trainbench.analysis.tables import compact  # pandas: only once a cell has finished

        why = result["host"].get("disturbed_reason")
        cores = result["host"].get("other_cpu_cores")
        flags.append(f"disturbed: {why or f'others used {compact(cores)} cores'}")
    if (result.get("timed") or {}).get("short_window"):
        flags.append("short window")
    if (result.get("steady_state") or {}).get("classification") == "no steady state":
        flags.append("no steady state")
    if (record.get("numerics") or {}).get("status") == "fail":
        flags.append("numerics fail: " + ", ".join(record["numerics"].get("failed_ops", [])))
    return f"  [{'; '.join(flags)}]" if flags else ""


def job_line(rule: str, outputs: list[str], wildcards: Mapping) -> str | None:
    """The line for a finished job of ``rule`` (None: nothing worth a line)."""
    if rule == "run_cell" and outputs:
        return cell_line(outputs[0])
    if rule == "prepare_data":
        return f"data set of {wildcards.get('workload')} ready"
    if rule == "plan_round" and outputs:
        try:
            cells = json.loads(Path(outputs[0]).read_text())["cells"]
        except (OSError, ValueError, KeyError):
            return None
        what = f"{len(cells)} cells get another repeat" if cells else "no cell needs another repeat"
        return f"round rep{wildcards.get('rep')} of {wildcards.get('workload')}: {what}"
    if rule in ("aggregate", "statistics", "figures"):
        return {"aggregate": "record tables", "statistics": "published tables",
                "figures": "figures"}[rule] + " written"  # fmt: skip
    if rule == "report" and outputs:
        return f"reports written: {outputs[0]}"
    return None


def _rows(path: Path) -> list[dict[str, str]]:
    """A small published table as rows of text (the standard library's csv: the logger
    plugin runs in every Snakemake process, which should not pay pandas' import)."""
    try:
        with open(path, newline="") as fh:
            return list(csv.DictReader(fh))
    except FileNotFoundError:
        return []


def _count(text: str) -> int:
    return int(float(text)) if text.strip() else 0


def _merge_lines(rows: list[dict]) -> list[str]:
    """How many records merged results folders reached twice (counted once), and how
    many conflicts were left out (``duplicates.csv``, rule aggregate)."""
    kinds = Counter(r.get("kind") for r in rows)
    lines = []
    if kinds["duplicate"]:
        lines.append(
            f"  {kinds['duplicate']} duplicate record{'s' * (kinds['duplicate'] != 1)} "
            "dropped: reached twice through the merged folders, counted once"
        )
    if kinds["conflict"]:
        lines.append(
            f"  ⚠️ {kinds['conflict']} conflict{'s' * (kinds['conflict'] != 1)}: records "
            "claiming one cell, repeat, run seed, code and start with different contents, "
            "left out (see the report)"
        )
    return lines


def summary_lines(report_path: str | Path) -> list[str]:
    """The closing summary: record counts, the verdicts, the warnings, the report."""
    tables = Path(report_path).parent / "tables"
    lines = []
    total = [r for r in _rows(tables / "overview.csv") if r.get("workload") == "(all)"]
    if total:
        row = total[0]
        counts = [
            f"{_count(row[k])} {k}" for k in ("ok", "failed", "unavailable") if _count(row[k])
        ]
        lines.append(f"{_count(row['records'])} run records: {', '.join(counts)}.")
    lines += _merge_lines(_rows(tables / "duplicates.csv"))
    shown = [r for r in _rows(tables / "verdicts.csv") if r["status"] != "unavailable"]
    for row in shown[:SUMMARY_VERDICTS]:
        line = f"  {row['symbol']} {row['workload']} on {row['device']}: {row['text']}"
        if row.get("bound"):
            line += f" [{row['bound']}]"
        lines.append(line)
    if len(shown) > SUMMARY_VERDICTS:
        lines.append(f"  … {len(shown) - SUMMARY_VERDICTS} more verdicts in the report")
    lines += [f"  {line}" for line in target_lines(_rows(tables / "best_setting.csv"))]
    # One setting against another on the same hardware (aggregate.compare): its ⇄ lines.
    lines += [f"  {r['line']}" for r in _rows(tables / "comparison.csv") if r.get("line")]
    for row in _rows(tables / "attention.csv"):
        if row["status"] == "unavailable":
            lines.append(f"  ⚪ {row['device']} unavailable: {row['detail']}")
    lines += [f"  {line}" for line in samples_check_lines(_rows(tables / "time_to_target.csv"))]
    lines += [f"  {line}" for line in across_lines(_rows(tables / "across_batch_sizes.csv"))]
    # Only what withholds or changes a verdict (every row of a table written before the
    # affects_verdict column); the rest is in the report's Measurement quality.
    warned = _rows(tables / "warnings.csv")
    kinds = Counter(
        r["kind"] for r in warned if (r.get("affects_verdict") or "").strip().lower() != "false"
    )
    if kinds:
        text = ", ".join(f"{n} {kind}" for kind, n in kinds.most_common())
        lines.append(f"⚠️  measurements to read with care: {text} (see the report)")
    lines.append(f"Report: {report_path}")
    return lines


@dataclass
class Console:
    """Turns Snakemake's log events into the lines above."""

    jobs: dict = field(default_factory=dict)
    done: int = 0
    total: int = 0

    def handle(self, event: str | None, fields: Mapping, message: str, level: int) -> list[str]:
        if event == "job_info":
            self.jobs[fields.get("jobid")] = (
                fields.get("rule_name"),
                _files(fields.get("output")),
                dict(fields.get("wildcards") or {}),
            )
            return []
        if event == "progress":
            self.done, self.total = int(fields.get("done") or 0), int(fields.get("total") or 0)
            return []
        if event == "job_finished":
            rule, outputs, wildcards = self.jobs.pop(fields.get("job_id"), (None, [], {}))
            line = job_line(rule, outputs, wildcards) if rule else None
            total = str(self.total) if self.total else "?"
            lines = [f"[{self.done + 1:>{len(total)}}/{total}] {rule:<13} {line}"]
            if rule == "report" and outputs:
                lines += summary_lines(outputs[0])
            return lines if line else []
        if level >= 30 or (message and message.startswith(PASSED_MESSAGES)):
            return [message] if message else []
        return []
