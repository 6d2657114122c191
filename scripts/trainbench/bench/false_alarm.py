"""Does the parity rule stay quiet on correct devices at sizes nobody tuned it at?
(``benchmarks/false_alarm.py``.)

A clean sweep: no fault anywhere, every training workload of a suite config (default
``benchmarks/suites/false-alarm.yaml``) at its batch sizes, 3 repeats, every precision
the device offers. Each column's repeats are judged against a one-thread CPU float32
baseline of the same run seeds, with each repeat's float64 reference, by the report's
own rule (:mod:`.parity_power` runs the cells, :mod:`.parity_analysis` applies
:func:`trainbench.analysis.stats.parity.parity_table`: training parity, and evaluation
parity against CPU float64):

* ``cpu``: ``clean`` (the baseline again, a fresh process), ``threads2`` (two threads:
  another reduction order), ``bf16`` (CPU bf16 autocast, where the CPU has the kernels);
* ``cuda``: float32, bf16 autocast and fp16 autocast (with its GradScaler), each with
  the data sets staged on the device and read from the host.

A row is one workload × batch size × column; it is a **false alarm** when its parity
outcome is anything but ``pass`` or ``identical`` (a ``fail``, or no decision). Each
row reports its margins: ``drift_ratio`` (the device's loss error ÷ its precision's
envelope, the interval's high end), ``eval_ratio`` (the worst evaluation output's
error ÷ its envelope, built on the network's float32 floor; with ``eval_precision``,
``eval_error``, ``eval_floor`` and ``eval_decided_by`` beside it), ``metric_ratio`` and ``loss_ratio`` (the paired difference's
largest magnitude ÷ the gross check's margin), and ``worst_ratio``, the largest: under
1 passes. Each row also gets a speed verdict against the baseline (samples/s, range of
the 3 × 3 pairwise ratios: ``faster`` above 1, ``slower`` below, else ``no clear
difference``), which :func:`agreement` compares between two runs of one suite.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from typing import Any

from trainbench.bench.eval_power import markdown as eval_power_markdown
from trainbench.bench.parity_power import BASELINE, CLEAN, EVAL_SWEEP, REFERENCE, Column

PASSING = ("pass", "identical")
# The benign columns also run the evaluation fault sweep (EVAL_SWEEP), on copies of
# their outputs after the clean comparison: what :mod:`.eval_power` reads; no row here.
CPU_COLUMNS = (
    Column(CLEAN, "clean"),
    Column("threads2", "benign", threads=2, eval_sweep=EVAL_SWEEP),
    Column("bf16", "benign", autocast="bf16", eval_sweep=EVAL_SWEEP),
)
CUDA_COLUMNS = tuple(
    Column(f"cuda-{precision}-{'staged' if staged else 'host'}", "benign", autocast=autocast,
           backend="cuda", staged=staged, eval_sweep=EVAL_SWEEP)
    for staged in (True, False)
    for precision, autocast in (("fp32", "off"), ("bf16", "bf16"), ("fp16", "fp16"))
)  # fmt: skip


# Run only when named (--columns): float32 with TF32 off in cuDNN and cuBLAS
# (NVIDIA_TF32_OVERRIDE=0 in the cell's environment): the float32 class on CUDA, and
# nn.MultiheadAttention's fast path (clip), which computes at about TF32's precision.
CUDA_ABLATION = (
    Column("cuda-fp32-notf32-staged", "benign", backend="cuda", staged=True,
           env={"NVIDIA_TF32_OVERRIDE": "0"}, eval_sweep=EVAL_SWEEP),
)  # fmt: skip


def columns_for(device: str) -> tuple[list[str], tuple[Column, ...]]:
    """(the parity-power columns to run, the extra columns) of the sweep on ``device``."""
    if device == "cpu":
        return [BASELINE, REFERENCE, *(c.name for c in CPU_COLUMNS)], ()
    if device == "cuda":
        return [BASELINE, REFERENCE, *(c.name for c in CUDA_COLUMNS)], CUDA_COLUMNS + CUDA_ABLATION
    raise ValueError(f"device {device!r}: the sweep runs on cpu or cuda")


def _ratio(value: Any, margin: Any) -> float | None:
    if value is None or margin in (None, 0):
        return None
    return abs(float(value)) / float(margin)


def _largest(*values: float | None) -> float | None:
    found = [v for v in values if v is not None and math.isfinite(v)]
    return max(found) if found else None


def speed_verdict(device: Sequence[dict], baseline: Sequence[dict]) -> dict:
    """samples/s of ``device`` over the baseline's: median ratio, the range of every
    pairwise ratio, and the verdict from that range."""
    got = [r["samples_per_s"] for r in device if r.get("status") == "ok" and r.get("samples_per_s")]
    base = [r["samples_per_s"] for r in baseline
            if r.get("status") == "ok" and r.get("samples_per_s")]  # fmt: skip
    if len(got) < 3 or len(base) < 3:
        return {"speedup": None, "speedup_low": None, "speedup_high": None,
                "speed_verdict": "insufficient data"}  # fmt: skip
    ratios = [a / b for a, b in itertools.product(got, base)]
    low, high = min(ratios), max(ratios)
    verdict = "faster" if low > 1 else "slower" if high < 1 else "no clear difference"
    median = sorted(got)[len(got) // 2] / sorted(base)[len(base) // 2]
    return {"speedup": median, "speedup_low": low, "speedup_high": high,
            "speed_verdict": verdict}  # fmt: skip


def rows(results: Mapping) -> list[dict]:
    """One row per workload × batch size × column of an analysed parity-power result."""
    runs = results["runs"]
    out = []
    for entry in results["comparisons"]:
        if entry.get("kind") == "fault":  # the parity-power benchmark's, in the same runs
            continue
        found = entry["all"]
        mine = [r for r in runs if (r["workload"], r["batch_size"]) == (entry["workload"],
                                                                       entry["batch_size"])]  # fmt: skip
        device = [r for r in mine if r["column"] == entry["column"]]
        phases = sorted({str(r["window_phase"]) for r in device if r.get("window_phase")})
        drift = found.get("drift_high")
        eval_ratio = found.get("eval_error_ratio")
        metric = _ratio(_largest(*(abs(found[k]) for k in ("metric_low", "metric_high")
                                   if found.get(k) is not None)), found.get("metric_margin"))  # fmt: skip
        loss = _ratio(_largest(*(abs(found[k]) for k in ("loss_low", "loss_high")
                                 if found.get(k) is not None)), found.get("loss_margin"))  # fmt: skip
        parity = found.get("parity")
        out.append({
            "workload": entry["workload"], "batch_size": entry["batch_size"],
            "column": entry["column"], "describe": results["columns"][entry["column"]]["describe"],
            "runs": entry["runs"], "ok_runs": entry["ok_runs"], "precision": found.get("precision"),
            "parity": parity, "eval_parity": found.get("eval_parity"),
            "decided_by": found.get("decided_by"),
            "false_alarm": parity not in PASSING,
            "eval_precision": found.get("eval_precision"), "eval_error": found.get("eval_error"),
            "eval_floor": found.get("eval_floor"), "eval_decided_by": found.get("eval_decided_by"),
            "drift_ratio": drift, "eval_ratio": eval_ratio, "metric_ratio": metric,
            "loss_ratio": loss, "worst_ratio": _largest(drift, eval_ratio, metric, loss),
            "canary": entry["canary"], "errors": entry["errors"],
            "window_phase": "; ".join(phases),
            **speed_verdict(device, [r for r in mine if r["column"] == BASELINE]),
        })  # fmt: skip
    return out


def summarize(results: Mapping) -> dict:
    """The sweep's summary: rows, false alarms, the largest worst_ratio, the smallest
    and largest batch size, and the rows themselves; a row with fewer runs than the
    sweep's repeats (an interrupted run) is listed under ``incomplete``, not judged."""
    repeats = int(results.get("repeats") or 3)
    every = rows(results)
    found = [r for r in every if r["runs"] >= repeats]
    incomplete = [f"{r['workload']}/{r['batch_size']}/{r['column']} ({r['runs']} of {repeats} runs)"
                  for r in every if r["runs"] < repeats]  # fmt: skip
    sizes = [r["batch_size"] for r in found]
    worst = _largest(*(r["worst_ratio"] for r in found))
    return {
        "rows": len(found),
        "false_alarms": sum(r["false_alarm"] for r in found),
        "worst_ratio": worst,
        "batch_sizes": [min(sizes), max(sizes)] if sizes else [],
        "incomplete": incomplete,
        "per_row": found,
        "eval_power": results.get("eval_power") or [],
    }


def agreement(first: Sequence[dict], second: Sequence[dict]) -> dict:
    """Two runs of one suite, row by row: the parity outcomes must be equal; a speed
    verdict may differ only where one run's interval straddles 1 (the bound)."""
    key = lambda r: (r["workload"], r["batch_size"], r["column"])  # noqa: E731
    before = {key(r): r for r in first}
    compared, parity_same, speed_same, explained, unexplained = 0, 0, 0, 0, []
    for row in second:
        other = before.get(key(row))
        if other is None:
            continue
        compared += 1
        parity_same += row["parity"] == other["parity"]
        if row["speed_verdict"] == other["speed_verdict"]:
            speed_same += 1
            continue
        straddles = any(r["speedup_low"] is not None and r["speedup_low"] <= 1 <= r["speedup_high"]
                        for r in (row, other))  # fmt: skip
        if straddles:
            explained += 1
        else:
            unexplained.append("/".join(map(str, key(row))))
    return {
        "rows_compared": compared,
        "parity_same": parity_same,
        "speed_same": speed_same,
        "speed_differs_straddling": explained,
        "speed_differs_otherwise": unexplained,
        "agrees": compared > 0 and parity_same == compared and not unexplained,
    }


def markdown(summary: Mapping, facts: Mapping, agreed: Mapping | None = None) -> str:
    """The sweep's results as Markdown."""
    lines = [
        f"# False-alarm sweep: {facts['device']}, {facts['made_at']}",
        "",
        f"Command: `{facts['command']}`. Code: `{facts['commit']}`. Machine: {facts['machine']}.",
        f"Wall time: {facts['wall_seconds']:.0f} s. Config: `{facts['config']}`.",
        "",
        f"**{summary['rows']} rows, {summary['false_alarms']} false alarms**; batch sizes "
        f"{summary['batch_sizes'][0]}–{summary['batch_sizes'][-1]}; the worst row's largest "
        f"ratio {_fmt(summary['worst_ratio'])} (a drift or evaluation ratio passes under 1; a "
        "metric or loss ratio above 1 fails only where the whole interval lies beyond its margin).",
        "",
    ]
    if agreed:
        lines += [
            f"Agreement with the first run (`{agreed['first']}`): parity the same in "
            f"{agreed['parity_same']} of {agreed['rows_compared']} rows; speed verdicts the "
            f"same in {agreed['speed_same']}, different where an interval straddles 1 in "
            f"{agreed['speed_differs_straddling']}, otherwise in "
            f"{len(agreed['speed_differs_otherwise'])}"
            + (f" ({', '.join(agreed['speed_differs_otherwise'])})" if agreed["speed_differs_otherwise"] else "")
            + ".",
            "",
        ]  # fmt: skip
    lines += [
        "| workload | batch | column | precision | parity | eval | drift ÷ envelope | eval precision "
        "| eval error | float32 floor | eval error ÷ envelope | metric ÷ margin | loss ÷ margin "
        "| worst | speedup (range) | speed | window |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in summary["per_row"]:
        speed = (f"{_fmt(r['speedup'])} ({_fmt(r['speedup_low'])}–{_fmt(r['speedup_high'])})"
                 if r["speedup"] is not None else "")  # fmt: skip
        lines.append(
            f"| {r['workload']} | {r['batch_size']} | {r['column']} | {r['precision']} | "
            f"{r['parity']} | {r['eval_parity']} | {_fmt(r['drift_ratio'])} | "
            f"{r.get('eval_precision') or '–'} | {_fmt(r.get('eval_error'))} | "
            f"{_fmt(r.get('eval_floor'))} | {_fmt(r['eval_ratio'])} | {_fmt(r['metric_ratio'])} | {_fmt(r['loss_ratio'])} | "
            f"**{_fmt(r['worst_ratio'])}** | {speed} | {r['speed_verdict']} | "
            f"{r['window_phase'] or 'whole run'} |"
        )
    lines += ["", "Columns: " + "; ".join(
        f"`{name}`: {c['describe']}" for name, c in facts["columns"].items()) + "."]  # fmt: skip
    if summary.get("incomplete"):
        lines += [
            "",
            "Not judged (interrupted before every repeat ran): "
            + ", ".join(summary["incomplete"])
            + ".",
        ]
    if facts.get("note"):
        lines += ["", facts["note"]]
    power = eval_power_markdown(summary.get("eval_power") or [])
    if power:
        lines += ["", *power]
    return "\n".join(lines) + "\n"


def _fmt(value: float | None) -> str:
    if value is None or not math.isfinite(value):
        return "–"
    return f"{value:.3g}"
