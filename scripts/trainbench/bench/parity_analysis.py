"""The parity rule applied to the runs of the parity-power benchmark
(:mod:`trainbench.bench.parity_power`), and its Markdown summary.

Every column's repeats are judged against the baseline's repeats of the same run
seeds by the report's own rule (:func:`trainbench.analysis.stats.parity.parity_table`, with
the float64 references and the config's ``report.parity`` settings): no second
implementation of it here. Per workload × batch size × column, :func:`compare` gives

* the decision on every repeat (**R-repeat**, 5 by default) and on the first three run
  seeds (**3-repeat**, what the default ``repeats: 3`` would have seen);
* the outcomes over every subset of 3 of the R run seeds (10 of 5): for the clean
  column these are the **clean splits** (a fail is a false alarm), for the others how
  often a 3-repeat run would have reached each outcome (the subsets share runs: an
  indication, not independent trials);
* the drift ratio (median and interval), the check that decided, the paired final
  metric and loss differences, the canary's outcome and the seconds per run.

:func:`summary` counts false alarms, benign passes and detections, and gives each
column's smallest and largest per-pair drift ratio; :mod:`.parity_markdown` writes the
Markdown.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
from trainbench.analysis.loss_tables import REFERENCE_COLUMNS
from trainbench.analysis.run_rows import EVAL_PARITY_COLUMNS
from trainbench.analysis.stats.parity import FAIL, IDENTICAL, PASS, ParitySettings, parity_table
from trainbench.bench.eval_power import eval_power

SUBSET = 3
BASELINE, REFERENCE = "baseline", "reference"
ORDER = ("clean", "threads2", "avx2", "bf16")  # then the faults by size
RUN_FIELDS = ("status", "final_metric", "final_loss", "primary_metric", "numerics_status",
              "numerics_failed_ops", "error_class", "error_message", "autocast_dtype",
              "tf32_matmul", "tf32_cudnn", "tf32_override", "float32_matmul_precision",
              "torch_threads", "samples_per_s", "window_phase",
              *EVAL_PARITY_COLUMNS)  # fmt: skip
KEPT = ("parity", "rule", "pairs", "precision", "compared_steps", "drift_multiplier", "drift_low",
        "drift_median", "drift_high", "device_error", "baseline_error", "drift_within",
        "metric_diff", "metric_low", "metric_high", "metric_margin", "metric_within",
        "loss_diff", "loss_low", "loss_high", "loss_margin", "loss_within", "interval",
        "eval_parity", "eval_repeats", "eval_precision", "eval_precision_reason", "eval_error",
        "eval_floor", "eval_envelope", "eval_error_ratio", "eval_decided_by",
        "eval_metric_diff")  # fmt: skip


def json_scalar(value: Any) -> Any:
    """A JSON-ready scalar (NaN, NA -> None)."""
    if value is None or value is pd.NA:
        return None
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (float, np.floating)):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, np.integer):
        return int(value)
    return value


# ----------------------------------------------------------------------------- the rule


def _tables(baseline: Sequence[dict], device: Sequence[dict], references: Sequence[dict]):
    runs, steps = [], []
    for label, group in ((BASELINE, baseline), ("device", device)):
        for run in group:
            record = f"{label}/{run['record']}"
            runs.append({**{k: run.get(k) for k in RUN_FIELDS}, "workload": run["workload"],
                         "batch_size": run["batch_size"], "device": label, "rep": run["rep"],
                         "run_seed": run.get("run_seed", run["rep"]), "record": record})  # fmt: skip
            steps += [{"record": record, "kind": "run", "step": t, "loss": v}
                      for t, v in enumerate(run.get("losses") or [])]  # fmt: skip
    refs = []
    for ref in references:
        refs.append({k: ref.get(k) for k in REFERENCE_COLUMNS})
        steps += [{"record": ref["record"], "kind": "reference", "step": t, "loss": v}
                  for t, v in enumerate(ref.get("losses") or [])]  # fmt: skip
    return (pd.DataFrame(runs), pd.DataFrame(steps, columns=["record", "kind", "step", "loss"]),
            pd.DataFrame(refs, columns=REFERENCE_COLUMNS))  # fmt: skip


def judge(
    baseline: Sequence[dict],
    device: Sequence[dict],
    references: Sequence[dict],
    settings: ParitySettings | None = None,
) -> dict:
    """The parity row of ``device`` runs against ``baseline`` runs (one workload and
    batch size, paired by run seed), with the float64 ``references``, as a plain dict
    with ``decided_by`` added."""
    runs, steps, refs = _tables(baseline, device, references)
    table = parity_table(runs, BASELINE, steps, refs, settings)
    if table.empty:
        return {"parity": "no ok runs", "rule": "no ok run on the device side",
                "decided_by": "no ok runs"}  # fmt: skip
    row = table.iloc[0].to_dict()
    found = {k: json_scalar(row.get(k)) for k in KEPT}
    found["decided_by"] = decided_by(found)
    return found


def decided_by(row: Mapping) -> str:
    """Which check gave the outcome: ``drift``, ``metric``, ``loss`` (the gross check),
    ``bit-identical``, or why nothing did."""
    outcome = row.get("parity")
    if outcome == IDENTICAL:
        return "bit-identical"
    if outcome == FAIL:
        failed = [("drift", row.get("drift_within")), ("metric", row.get("metric_within")),
                  ("loss", row.get("loss_within"))]  # fmt: skip
        names = [name for name, within in failed if within is False]
        names += ["eval"] if row.get("eval_parity") == FAIL else []
        return " + ".join(names)
    if outcome == PASS:
        return "drift"
    rule = row.get("rule") or ""
    if "straddle" in rule:
        return "none: drift straddles the envelope"
    if "no loss-drift judgement" in rule:
        return "none: no drift judgement"
    return f"none: {outcome}"


def _by_seed(runs: Iterable[dict], seeds: Sequence[int]) -> list[dict]:
    wanted = set(seeds)
    return [r for r in runs if r.get("run_seed", r["rep"]) in wanted]


def subset_outcomes(
    base: Sequence[dict], device: Sequence[dict], refs: Sequence[dict],
    settings: ParitySettings | None, size: int = SUBSET,
) -> dict:  # fmt: skip
    """The rule on every subset of ``size`` of the run seeds the device and the baseline
    share (both sides restricted to it): counts of each outcome."""
    seeds = sorted({r.get("run_seed", r["rep"]) for r in device}
                   & {r.get("run_seed", r["rep"]) for r in base})  # fmt: skip
    counts: dict[str, int] = {}
    lows, highs = [], []
    for subset in itertools.combinations(seeds, size):
        found = judge(_by_seed(base, subset), _by_seed(device, subset), refs, settings)
        counts[found["parity"]] = counts.get(found["parity"], 0) + 1
        if found.get("drift_low") is not None:  # below 5 pairs the rule's interval is their range
            lows.append(found["drift_low"])
            highs.append(found["drift_high"])
    return {"subsets": sum(counts.values()), "size": size, "outcomes": counts,
            "pair_drift_min": min(lows, default=None),
            "pair_drift_max": max(highs, default=None)}  # fmt: skip


def _tally(values: Iterable) -> str:
    counts: dict[str, int] = {}
    for v in values:
        counts[str(v or "none")] = counts.get(str(v or "none"), 0) + 1
    return ", ".join(f"{k} {n}" for k, n in sorted(counts.items()))


def same_final(base: Sequence[dict], device: Sequence[dict]) -> str:
    """ "k of n": the ok pairs whose final metric and final loss equal the baseline's
    bit for bit (the rule's ``identical`` reads the first reference steps' losses)."""
    ok = {r.get("run_seed", r["rep"]): r for r in base if r["status"] == "ok"}
    pairs = [(ok[r.get("run_seed", r["rep"])], r) for r in device
             if r["status"] == "ok" and r.get("run_seed", r["rep"]) in ok]  # fmt: skip
    same = sum(b.get("final_metric") == d.get("final_metric")
               and b.get("final_loss") == d.get("final_loss") for b, d in pairs)  # fmt: skip
    return f"{same} of {len(pairs)}"


def _mean_seconds(runs: Sequence[dict]) -> float | None:
    values = [r["seconds"] for r in runs if r.get("seconds") is not None]
    return float(np.mean(values)) if values else None


def compare(runs: Sequence[dict], columns: Mapping[str, Mapping], settings: ParitySettings,
            repeats: int) -> list[dict]:  # fmt: skip
    """Per workload × batch size × column (every column but the baseline and the
    references): the R-repeat and 3-repeat decisions, the 3-of-R subsets, the canary
    and the seconds per run (see the module docstring)."""
    out = []
    keys = dict.fromkeys((r["workload"], r["batch_size"]) for r in runs)
    first = list(range(min(SUBSET, repeats)))
    for workload, bs in keys:
        mine = [r for r in runs if (r["workload"], r["batch_size"]) == (workload, bs)]
        base = [r for r in mine if r["column"] == BASELINE]
        refs = [r for r in mine if r["column"] == REFERENCE]
        for name, column in ordered_columns(columns):
            device = [r for r in mine if r["column"] == name]
            if name in (BASELINE, REFERENCE) or not device:
                continue
            entry = {
                "workload": workload, "batch_size": bs, "column": name,
                "kind": column["kind"], "size": column.get("size") or 0.0,
                "runs": len(device), "ok_runs": sum(r["status"] == "ok" for r in device),
                "all": judge(base, device, refs, settings),
                "first3": judge(_by_seed(base, first), _by_seed(device, first), refs, settings),
                "subsets": subset_outcomes(base, device, refs, settings),
                "canary": _tally(r.get("numerics_status") for r in device),
                "same_final": same_final(base, device),
                "seconds_per_run": _mean_seconds(device),
                "errors": sorted({f"{r.get('error_class')}: {r.get('error_message')}"
                                  for r in device if r["status"] != "ok"}),
            }  # fmt: skip
            out.append(entry)
    return out


def ordered_columns(columns: Mapping[str, Mapping]) -> list[tuple[str, Mapping]]:
    """The columns in :data:`ORDER`, then the faults by size, then any other."""

    def rank(item):
        name, column = item
        known = ORDER.index(name) if name in ORDER else len(ORDER)
        return known, column.get("kind") != "fault", column.get("size") or 0.0, name

    return sorted(columns.items(), key=rank)


def cost(runs: Sequence[dict]) -> list[dict]:
    """Seconds per run (mean over the repeats) of the baseline and of the reference,
    per workload × batch size."""
    out = []
    for workload, bs in dict.fromkeys((r["workload"], r["batch_size"]) for r in runs):
        mine = [r for r in runs if (r["workload"], r["batch_size"]) == (workload, bs)]
        every = [r["seconds"] for r in mine if r.get("seconds") is not None]
        out.append({
            "workload": workload, "batch_size": bs,
            "baseline_seconds": _mean_seconds([r for r in mine if r["column"] == BASELINE]),
            "reference_seconds": _mean_seconds([r for r in mine if r["column"] == REFERENCE]),
            "runs": len(mine), "run_seconds_total": float(sum(every)),
        })  # fmt: skip
    return out


def summary(comparisons: Sequence[dict]) -> dict:
    """False alarms (clean pairs and clean splits), benign passes and detections by
    fault size, at R repeats, at 3, and over the 3-of-R subsets."""

    def count(entries: list[dict], outcome: str) -> dict:
        return {
            "cells": len(entries),
            "all": sum(e["all"]["parity"] == outcome for e in entries),
            "first3": sum(e["first3"]["parity"] == outcome for e in entries),
            "subsets": sum(e["subsets"]["outcomes"].get(outcome, 0) for e in entries),
            "subsets_total": sum(e["subsets"]["subsets"] for e in entries),
        }

    clean = [c for c in comparisons if c["kind"] == "clean"]
    out = {
        "clean_false_alarms": count(clean, FAIL),
        "clean_identical": count(clean, IDENTICAL),
        "benign_passes": {}, "benign_false_alarms": {}, "detected": {},
    }  # fmt: skip
    for name in dict.fromkeys(c["column"] for c in comparisons if c["kind"] == "benign"):
        entries = [c for c in comparisons if c["column"] == name]
        out["benign_passes"][name] = count(entries, PASS)
        out["benign_false_alarms"][name] = count(entries, FAIL)
    for name in dict.fromkeys(c["column"] for c in comparisons if c["kind"] == "fault"):
        out["detected"][name] = count([c for c in comparisons if c["column"] == name], FAIL)
    out["pair_drift"] = pair_drift_extremes(comparisons)
    return out


def pair_drift_extremes(comparisons: Sequence[dict]) -> dict[str, dict]:
    """Per column, its smallest and largest per-pair drift ratio over every cell and the
    cell each came from: the rule's own ranges over the 3-of-R subsets (below 5 pairs
    its interval is the pairs' range, and the subsets cover every pair). Columns whose
    every pair is bit-identical have none."""
    out = {}
    for name in dict.fromkeys(c["column"] for c in comparisons):
        found = [c for c in comparisons if c["column"] == name
                 and c["subsets"].get("pair_drift_min") is not None]  # fmt: skip
        if not found:
            continue
        low = min(found, key=lambda c: c["subsets"]["pair_drift_min"])
        high = max(found, key=lambda c: c["subsets"]["pair_drift_max"])
        out[name] = {"min": low["subsets"]["pair_drift_min"], "min_cell": _cell(low),
                     "max": high["subsets"]["pair_drift_max"], "max_cell": _cell(high),
                     "cells": len(found)}  # fmt: skip
    return out


def _cell(entry: Mapping) -> str:
    return f"{entry['workload']} {entry['batch_size']}"


def truncated(runs: Sequence[dict], steps: int) -> list[dict]:
    """``runs`` with every run's and reference's losses cut to the first ``steps``: what
    a reference of ``steps`` steps (``report.parity_reference.steps``) would have given
    (the reference's step t does not depend on how many steps it runs)."""
    return [{**r, "losses": (r.get("losses") or [])[:steps]} for r in runs]


def sensitivity(results: Mapping, steps: Sequence[int]) -> list[dict]:
    """The R-repeat and 3-repeat outcomes and the 3-of-R subsets of every column, with
    the drift measured over the first ``steps`` steps instead of the configured number:
    the same rule, only ``report.parity_reference.steps`` shorter."""
    settings = ParitySettings.from_config(results["config"].get("parity"))
    out = []
    for k in steps:
        found = compare(truncated(results["runs"], k), results["columns"], settings,
                        results["repeats"])  # fmt: skip
        out.append({"steps": int(k), "summary": summary(found), "cells": [
            {key: c[key] for key in ("workload", "batch_size", "column")}
            | {"all": c["all"]["parity"], "first3": c["first3"]["parity"],
               "drift_median": c["all"].get("drift_median"),
               "subsets": c["subsets"]["outcomes"]} for c in found]})  # fmt: skip
    return out


def analyse(results: dict, sensitivity_steps: Sequence[int] = ()) -> dict:
    """``results`` with its comparisons, cost and summary (re)computed from its runs;
    with ``sensitivity_steps``, the same at those shorter drift windows."""
    settings = ParitySettings.from_config(results["config"].get("parity"))
    results["comparisons"] = compare(results["runs"], results["columns"], settings,
                                     results["repeats"])  # fmt: skip
    results["cost"] = cost(results["runs"])
    results["summary"] = summary(results["comparisons"])
    results["eval_power"] = eval_power(results["runs"])
    if sensitivity_steps:
        results["sensitivity"] = sensitivity(results, sensitivity_steps)
    return results
