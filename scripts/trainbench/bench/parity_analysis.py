"""The parity rule applied to the runs of the parity-power benchmark
(:mod:`trainbench.bench.parity_power`), and its Markdown summary.

The two columns it compares are fixed here: the baseline (device ``cpu-t1``, base seed
:data:`BASELINE_SEED`) and the device column (``cpu-t2``, base seed :data:`DEVICE_SEED`),
:data:`REPEATS` runs each. :func:`compare` judges every workload × batch size (the clean
pair, every split of the clean runs, each fault size), :func:`summary` counts false
alarms and detections, :func:`render` writes the Markdown, and :func:`simulate` gives
the rule's outcome frequencies under the normal model.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import pandas as pd

from ..numeric_fault import FAULT
from ..stats.parity import FAIL, PASS, Margins, margins_for, parity_table
from ..tables import compact

REPEATS = 3
BASELINE_DEVICE, DEVICE = "cpu-t1", "cpu-t2"
BASELINE_SEED, DEVICE_SEED = 0, 100
RUN_FIELDS = ("status", "final_metric", "final_loss", "primary_metric", "numerics_status",
              "numerics_failed_ops", "error_class", "error_message")  # fmt: skip


def json_scalar(value: Any) -> Any:
    """A JSON-ready scalar (NaN -> None)."""
    if isinstance(value, (float, np.floating)):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, np.integer):
        return int(value)
    return value


# ----------------------------------------------------------------------------- the rule


def _runs_frame(baseline: Sequence[dict], device: Sequence[dict]) -> pd.DataFrame:
    """A runs table of two groups: ``baseline`` as cpu-t1, ``device`` as cpu-t2, reps
    numbered within each group."""
    rows = []
    for name, group in ((BASELINE_DEVICE, baseline), (DEVICE, device)):
        for rep, run in enumerate(group):
            rows.append({**{k: run.get(k) for k in RUN_FIELDS}, "workload": run["workload"],
                         "batch_size": run["batch_size"], "device": name, "rep": rep})  # fmt: skip
    return pd.DataFrame(rows)


def judge(baseline: Sequence[dict], device: Sequence[dict], margins: Margins | None) -> dict:
    """The parity row of ``device`` runs against ``baseline`` runs (one workload and
    batch size), as a plain dict."""
    table = parity_table(_runs_frame(baseline, device), BASELINE_DEVICE, margins)
    if table.empty:
        return {"parity": "no ok runs", "rule": "no ok run with a result on the device side"}
    row = table.iloc[0].to_dict()
    keep = ("parity", "rule", "n", "baseline_n", "final_metric", "baseline_metric", "metric_diff",
            "metric_low", "metric_high", "final_loss", "baseline_loss", "loss_diff", "loss_low",
            "loss_high", "metric_margin", "loss_margin")  # fmt: skip
    return {k: json_scalar(None if pd.isna(row[k]) else row[k]) for k in keep}


def split_false_alarms(
    clean: Sequence[dict], margins: Margins | None, group: int = REPEATS
) -> dict:
    """The rule over every split of the ``clean`` runs into two groups of ``group``
    (each unordered split once): counts of each outcome."""
    runs = [r for r in clean if r["status"] == "ok"][: 2 * group]
    counts: dict[str, int] = {}
    if len(runs) < 2 * group:
        return {"splits": 0, "outcomes": counts}
    seen = set()
    for first in itertools.combinations(range(len(runs)), group):
        rest = tuple(i for i in range(len(runs)) if i not in first)
        if (rest, first) in seen:
            continue
        seen.add((first, rest))
        outcome = judge([runs[i] for i in first], [runs[i] for i in rest], margins)["parity"]
        counts[outcome] = counts.get(outcome, 0) + 1
    return {"splits": sum(counts.values()), "outcomes": counts}


def _spread(runs: Sequence[dict], key: str) -> float | None:
    values = [r[key] for r in runs if r["status"] == "ok" and r.get(key) is not None]
    return float(np.std(values, ddof=1)) if len(values) >= 2 else None


def compare(runs: Sequence[dict], margins: Margins | None) -> list[dict]:
    """Per workload × batch size: the clean pair, the split false alarms, each fault
    size's outcome and canary, and the seed-to-seed spread of the clean runs."""
    out = []
    keys = dict.fromkeys((r["workload"], r["batch_size"]) for r in runs)
    for workload, bs in keys:
        mine = [r for r in runs if (r["workload"], r["batch_size"]) == (workload, bs)]
        base = [r for r in mine if r["role"] == "baseline"]
        clean = [r for r in mine if r["role"] == "clean"]
        entry = {
            "workload": workload, "batch_size": bs, "margins": margins_for(margins, workload),
            "clean_pair": judge(base, clean, margins),
            "clean_splits": split_false_alarms(base + clean, margins, max(len(base), 1)),
            "seed_std_metric": _spread(base + clean, "final_metric"),
            "seed_std_loss_rel": _relative_spread(base + clean),
            "faults": [],
        }  # fmt: skip
        for size in sorted({r["size"] for r in mine if r["role"] == "fault"}):
            faulted = [r for r in mine if r["role"] == "fault" and r["size"] == size]
            found = judge(base, faulted, margins)
            canary = [r.get("numerics_status") for r in faulted]
            entry["faults"].append({
                "size": size, **found, "detected": found["parity"] == FAIL,
                "canary": _tally(canary), "runs": len(faulted),
                "ok_runs": sum(r["status"] == "ok" for r in faulted),
            })  # fmt: skip
        out.append(entry)
    return out


def _relative_spread(runs: Sequence[dict]) -> float | None:
    std = _spread(runs, "final_loss")
    losses = [r["final_loss"] for r in runs if r["status"] == "ok" and r.get("final_loss")]
    return std / abs(float(np.mean(losses))) if std is not None and losses else None


def _tally(values: Iterable) -> str:
    counts: dict[str, int] = {}
    for v in values:
        counts[str(v or "none")] = counts.get(str(v or "none"), 0) + 1
    return ", ".join(f"{k} {n}" for k, n in sorted(counts.items()))


def summary(comparisons: Sequence[dict]) -> dict:
    """False alarms over the clean pairs and over the clean splits, detections by size."""
    pairs = [c["clean_pair"]["parity"] for c in comparisons]
    splits = [c["clean_splits"] for c in comparisons]
    n_splits = sum(s["splits"] for s in splits)
    split_fails = sum(s["outcomes"].get(FAIL, 0) for s in splits)
    by_size: dict[str, list] = {}
    for c in comparisons:
        for f in c["faults"]:
            by_size.setdefault(compact(f["size"]), []).append(f["detected"])
    return {
        "clean_pairs": len(pairs),
        "clean_pair_false_alarms": pairs.count(FAIL),
        "clean_pair_passes": pairs.count(PASS),
        "clean_splits": n_splits,
        "clean_split_false_alarms": split_fails,
        "clean_split_passes": sum(s["outcomes"].get(PASS, 0) for s in splits),
        "false_alarm_rate_splits": split_fails / n_splits if n_splits else None,
        "detected_by_size": {k: f"{sum(v)}/{len(v)}" for k, v in by_size.items()},
    }


def analyse(results: dict, margins: Margins | None) -> dict:
    """``results`` with its comparisons and summary (re)computed from its runs."""
    results["comparisons"] = compare(results["runs"], margins)
    results["summary"] = summary(results["comparisons"])
    return results


# ----------------------------------------------------------------------------- markdown


def _num(x, percent: bool = False) -> str:
    if x is None:
        return "–"
    sign, unit = "+" if x >= 0 else "−", "%" if percent else ""
    return f"{sign}{compact(abs(100 * x if percent else x))}{unit}"


def _cell(found: dict, clean: bool = False) -> str:
    """ "**detected** (−0.21, loss +35%)", "missed (pass) (…)", "not detected
    (inconclusive) (…)"; for a clean pair "pass", "**false alarm** (fail)", "inconclusive"."""
    words = {FAIL: "**false alarm** (fail)", PASS: "pass"} if clean else {
        FAIL: "**detected**", PASS: "missed (pass)"}  # fmt: skip
    word = words.get(found["parity"], found["parity"])
    if found["parity"] == "insufficient data" and "inconclusive" in (found.get("rule") or ""):
        word = "inconclusive" if clean else "not detected (inconclusive)"
    return f"{word} ({_num(found.get('metric_diff'))}, loss {_num(found.get('loss_diff'), True)})"


def _detection_rows(comparisons: Sequence[dict], sizes: list[float]) -> list[str]:
    rows = []
    for c in comparisons:
        by_size = {f["size"]: f for f in c["faults"]}
        pair, splits = c["clean_pair"], c["clean_splits"]
        alarms = f"{splits['outcomes'].get(FAIL, 0)}/{splits['splits']}"
        passes = f"{splits['outcomes'].get(PASS, 0)}/{splits['splits']}"
        cells = [_cell(pair, clean=True), alarms, passes]
        cells += [_cell(by_size[s]) if s in by_size else "" for s in sizes]
        rows.append(
            f"| {c['workload']} | {c['batch_size']} | ±{compact(c['margins']['metric'])} | "
            f"±{compact(100 * c['margins']['loss'])}% | {_num(c['seed_std_metric'])[1:]} | "
            f"{_num(c['seed_std_loss_rel'], True)[1:]} | " + " | ".join(cells) + " |"
        )
    return rows


def render(results: dict) -> str:
    """The Markdown summary of a results JSON."""
    comparisons, total = results["comparisons"], results["summary"]
    sizes = sorted({f["size"] for c in comparisons for f in c["faults"]})
    facts, machine = results["config"], results.get("machine", {})
    column = (results.get("device") or {}).get("device", DEVICE)
    lines = [
        f"# Parity detection power ({facts['date']})",
        "",
        "The parity rule (equivalence test, `trainbench/stats/parity.py`) applied to a "
        f"baseline `{BASELINE_DEVICE}` (base seed {BASELINE_SEED}) and a device column "
        f"`{column}` (base seed {DEVICE_SEED}), {results['repeats']} repeats each, clean and "
        f"with the test fault `{FAULT}` at each error size. Config `{facts['path']}` "
        f"(sha256 {facts['sha256'][:12]}), every workload setting as configured; "
        f"{machine.get('cpu_model', 'CPU')} ({machine.get('logical_cores', '?')} cores), "
        f"torch {machine.get('torch', '?')}.",
        "",
        *[f"- {note}" for note in results.get("notes", [])],
        *([""] if results.get("notes") else []),
        "| workload | batch | metric margin | loss margin | seed σ metric | seed σ loss | "
        "clean pair (seed 0 vs 100) | false alarms, clean splits | passes, clean splits | "
        + " | ".join(f"error {compact(100 * s)}%" for s in sizes)
        + " |",
        "|---|---|---|---|---|---|---|---|---|" + "---|" * len(sizes),
        *_detection_rows(comparisons, sizes),
        "",
        f"**False alarms**: {total['clean_pair_false_alarms']}/{total['clean_pairs']} clean "
        f"pairs, {total['clean_split_false_alarms']}/{total['clean_splits']} clean splits. "
        f"**Detected** (per size, over workload × batch size): "
        + ", ".join(f"{k}: {v}" for k, v in total["detected_by_size"].items())
        + ".",
        "",
        "Cells: the outcome, then (device − baseline mean of the final task metric, "
        "relative difference of the final training loss). *detected* = `fail` (the 90% "
        "interval lies beyond the margin); *missed (pass)* = shown equivalent; *not "
        "detected (inconclusive)* = `insufficient data`. Seed σ: the standard deviation "
        "over the clean runs of both columns (loss: relative to its mean). Clean splits: "
        "every split of the clean runs into two groups of equal size (they share runs).",
        "",
        "## Canary in the faulted runs",
        "",
        "| workload | batch | " + " | ".join(f"error {compact(100 * s)}%" for s in sizes) + " |",
        "|---|---|" + "---|" * len(sizes),
    ]
    for c in comparisons:
        by_size = {f["size"]: f for f in c["faults"]}
        cells = [by_size[s]["canary"] if s in by_size else "" for s in sizes]
        lines.append(f"| {c['workload']} | {c['batch_size']} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def simulate(
    margin: float, delta: float, n: int = REPEATS, trials: int = 20000, seed: int = 0
) -> dict[str, float]:
    """The rule's outcome frequencies under the normal model, in units of the seed σ:
    ``n`` device values from N(delta, 1) against ``n`` baseline values from N(0, 1),
    margin ``margin`` (docs/statistics.md quotes these for n = 3)."""
    from ..stats.parity import INCONCLUSIVE, equivalence

    rng = np.random.default_rng(seed)
    counts = {PASS: 0, FAIL: 0, INCONCLUSIVE: 0}
    for _ in range(trials):
        counts[equivalence(rng.normal(delta, 1, n), rng.normal(0, 1, n), margin).outcome] += 1
    return {k: v / trials for k, v in counts.items()}
