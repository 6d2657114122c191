"""The throughput benchmark's Markdown: one results file's summary, and the index of
every results file's target checks (benchmarks/results/README.md)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
from trainbench.bench.throughput_summary import ratio_interval_of, target_checks
from trainbench.common.records import atomic_write_text


def check_value_text(check: dict) -> str:
    """A target check's measured value with its interval, as the tables show it."""
    if "CUDA events" in check["target"]:
        return f"{check['value']:.2%} ({check['interval']})"
    value = f"{check['value']:.3f}"
    if math.isfinite(check["low"]) and math.isfinite(check["high"]):
        value += f" ({check['low']:.3f}–{check['high']:.3f}, {check['interval']})"
    return value


def _met_text(check: dict) -> str:
    return check["met"] if check["met"] == "met" else f"**{check['met']}**"


def _ratio_cell(row: dict, key: str) -> str:
    if key not in row:
        return ""
    value, low, high, kind = ratio_interval_of(row, key)
    text = f"{value:.3f}"
    if math.isfinite(low) and math.isfinite(high):
        text += f" ({low:.3f}–{high:.3f})"
    return text


def _load_line(results: dict) -> str:
    loads = [m["load_average_1min"] for m in results["measurements"] if "load_average_1min" in m]
    if not loads:
        return "- machine load during the run: not recorded"
    cores = results["machine"].get("logical_cores") or 1
    return (
        f"- 1-minute load average after each measurement: median {np.median(loads):.2f}, "
        f"max {max(loads):.2f} on {cores} cores (above ~1 on a small machine means other "
        "processes competed for the host)"
    )


COLUMNS_NOTE = (
    "Columns: *method* = `interleaved` (harness, bare loop and the bare loop's A/A twin "
    "`bare-aa` alternating in blocks of *block* steps inside one process, each round a "
    "palindrome of blocks) or `runs` (whole runs, one per variant per round); *÷ bare* = "
    "median over rounds of the round's throughput ratio (variant ÷ bare loop), with its "
    "interval in brackets (the rounds' range below 5 rounds, a 95% bootstrap CI of the "
    "median from 5); *event vs wall* = summed CUDA-event step time over the synchronized "
    "wall time of the same steps, minus 1 (median over rounds); *first step* = step 0 "
    "alone, synchronized (includes compilation for compiled variants); *data wait* = host "
    "time blocked fetching the next batch, per timed step (harness only)."
)


def render_markdown(results: dict) -> str:
    """The Markdown summary of one results file; every number comes from it."""
    lines = [
        *_header_lines(results),
        "",
        *_target_lines(results),
        "",
        *_throughput_lines(results),
        *_reported_throughput_lines(results),
        *_failure_lines(results),
        "",
        COLUMNS_NOTE,
        "",
    ]
    return "\n".join(lines)


def _header_lines(results: dict) -> list[str]:
    """The title, the suite's description, and the device, host and software."""
    m = results["machine"]
    return [
        f"# Throughput benchmark `{results['suite']}` ({results['date']})",
        "",
        results.get("description", "").strip(),
        "",
        f"- device: **{results['device']}**"
        + (f" ({m['gpu']}, {m['gpu_memory_gib']} GiB, CUDA {m['cuda']})" if m.get("gpu") else ""),
        f"- host CPU: {m['cpu_model']} ({m['logical_cores']} logical cores, "
        f"{m['torch_threads']} torch threads)",
        f"- python {m['python']}, torch {m['torch']}"
        + (f", transformers {m['transformers']}" if m.get("transformers") else ""),
        _rounds_line(results),
        _load_line(results),
        _affinity_line(results),
    ]


def _affinity_line(results: dict) -> str:
    facts = results.get("cpu_affinity") or {}
    if facts.get("pinned"):
        return (
            f"- process pinned to logical CPUs {facts['cpus']} (pyperf's --affinity), "
            f"{facts['torch_threads']} torch threads"
        )
    return "- process not pinned to CPUs" + (f" ({facts['reason']})" if facts.get("reason") else "")


def _rounds_line(results: dict) -> str:
    if "block_seconds" not in results:  # results made before the interleaved method
        return (
            f"- rounds per variant: {results['rounds']} (order rotated each round); throughput "
            "= timed samples / wall seconds between device synchronizations, warm-up excluded"
        )
    return (
        f"- harness vs bare loop: {results['rounds']} interleaved rounds per case in one "
        f"process, each a palindrome of blocks (harness, bare, bare-aa, rotated, then "
        f"reversed) of about {results['block_seconds']:g} s; whole-run variants: "
        f"{results['run_rounds']} rounds (order rotated); throughput = timed samples / "
        "wall seconds between device synchronizations, warm-up excluded. The interleaved "
        "harness ÷ bare ratio and its A/A interval (bare-aa ÷ bare, the host's floor) are "
        "information, not targets: whether the harness taxes what it times is judged by "
        "benchmarks/step_overhead.py (synchronizations per step, per-step additions)"
    )


def _target_lines(results: dict) -> list[str]:
    """The Targets section: each target check with its interval and verdict."""
    lines = [
        "## Targets",
        "",
        "A target is met only when the whole interval of the paired ratio lies at or above "
        "it, missed when the whole interval lies below it, and not resolved otherwise.",
        "",
        "| target | where | measured (interval) | verdict |",
        "|---|---|---|---|",
    ]
    checks = target_checks(results)
    for c in checks:
        lines.append(f"| {c['target']} | {c['where']} | {check_value_text(c)} | {_met_text(c)} |")
    if not checks:
        lines.append("| (no target applies to this run) | | | |")
    return lines


def _throughput_lines(results: dict) -> list[str]:
    """The throughput table, one row per summary row."""
    lines = [
        "## Throughput (median over rounds)",
        "",
        "| workload | batch | method | block | variant | samples/s | ÷ bare (interval) | "
        "÷ HF Trainer | event vs wall | first step s | data wait ms/step |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in results.get("summary", []):
        lines.append("| " + " | ".join(_throughput_cells(row)) + " |")
    return lines


def _throughput_cells(row: dict) -> list[str]:
    sps = row["median_samples_per_s"]
    return [
        row["workload"],
        str(row["batch_size"]),
        row.get("method", "runs"),
        str(row.get("block_steps", "")),
        row["variant"] + (f" ({row['rounds_failed']} failed)" if row["rounds_failed"] else ""),
        f"{sps:,.0f}" if sps else "failed",
        _ratio_cell(row, "over_bare"),
        _ratio_cell(row, "over_hf_trainer"),
        f"{row['event_vs_wall_median']:+.2%}" if "event_vs_wall_median" in row else "",
        f"{row['first_step_s_median']:.2f}" if "first_step_s_median" in row else "",
        f"{row['data_wait_per_step_s_median'] * 1e3:.2f}"
        if "data_wait_per_step_s_median" in row
        else "",
    ]


def _reported_throughput_lines(results: dict) -> list[str]:
    """The HF Trainer's own reported throughput, where it ran."""
    hf = [r for r in results.get("summary", []) if r.get("reported_samples_per_s_median")]
    if not hf:
        return []
    return ["", "HF Trainer's own reported throughput (start-up included): "] + [
        f"- {r['workload']} bs {r['batch_size']}: {r['reported_samples_per_s_median']:,.0f} samples/s"
        for r in hf
    ]


def _failure_lines(results: dict) -> list[str]:
    """Every failed measurement with the start of its error."""
    failures = [x for x in results["measurements"] if x["status"] == "failed"]
    if not failures:
        return []
    return ["", "## Failed measurements", ""] + [
        f"- {x['workload']} bs {x['batch_size']} {x['variant']} round {x['round']}: "
        f"`{x['error'][:300]}`"
        for x in failures
    ]


def write_markdown(results: dict, path: str | Path) -> None:
    """Write :func:`render_markdown` of ``results`` to ``path`` (atomically)."""
    atomic_write_text(path, render_markdown(results))


def render_index(result_files: list[Path]) -> str:
    """Every target check of every results file, one table (benchmarks/results/README)."""
    lines = [
        "# Throughput benchmark results",
        "",
        "Generated by `python benchmarks/throughput.py --index` from the JSON files here; "
        "each file's own Markdown has the full tables.",
        "",
        "| results | device | date | target | where | measured (interval) | verdict |",
        "|---|---|---|---|---|---|---|",
    ]
    for path in sorted(result_files):
        results = json.loads(path.read_text())
        machine = results["machine"]
        device = results["device"] + (f" ({machine['gpu']})" if machine.get("gpu") else "")
        if results["device"] == "cpu":
            device += f" ({machine['cpu_model']}, {machine['torch_threads']} threads)"
        md = path.with_suffix(".md").name
        for c in target_checks(results):
            lines.append(
                f"| [{path.stem}]({md}) | {device} | {results['date']} | {c['target']} | "
                f"{c['where']} | {check_value_text(c)} | {_met_text(c)} |"
            )
    return "\n".join(lines) + "\n"
