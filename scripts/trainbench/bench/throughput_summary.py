"""The throughput benchmark's summary: per workload x batch size x method x variant,
the median throughput over rounds and the paired ratios to the bare loop and the HF
Trainer with their intervals; and the targets, each judged from its interval.

Two methods (:mod:`.throughput_run`): ``interleaved`` (harness, bare and the bare
loop's A/A twin ``bare-aa`` in alternating blocks of one process) and ``runs`` (whole
runs per round; results files made before the interleaved method hold only these). The
interleaved comparison is information, not a verdict: its A/A interval is the host's
floor (on the lent GPU hosts blocks vary 7-15% per round, so ±:data:`AA_FLOOR` would
take hundreds of rounds a case), reported as such. Whether the harness taxes what it
times is decided deterministically by benchmarks/step_overhead.py (synchronizations per
step counted, per-step additions timed alone: :func:`trainbench.bench.step_overhead.verdict`)."""

from __future__ import annotations

import math

import numpy as np
from trainbench.analysis.stats.intervals import paired_ratio_interval

HARNESS_OVER_BARE_TARGET = 0.98
HARNESS_OVER_HF_TARGET = 1.1
HF_TARGET_BATCH_SIZES = (64, 256)
TIMING_AGREEMENT_TARGET = 0.01
# The A/A comparison (bare-aa / bare) would resolve a 1% tax only within 1 ± this; the
# report says whether the host's floor lies within it (information: it decides nothing).
AA_FLOOR = 0.01
INFORMATION = "information"
MIN_AA_ROUNDS = 5  # a bootstrap CI of the median from 5 rounds on
INTERLEAVED, RUNS = "interleaved", "runs"


def method_of(measurement: dict) -> str:
    return measurement.get("method", RUNS)


def _median(values: list[float]) -> float | None:
    return float(np.median(values)) if values else None


def summarize(measurements: list[dict]) -> list[dict]:
    """Per workload x batch size x variant: median throughput over rounds, ratios
    to the bare loop and the HF Trainer (ratio of medians, with the per-round
    ratios' range), and wall-clock vs CUDA-event agreement."""
    rows = []
    ok = [m for m in measurements if m["status"] == "ok"]
    keys = sorted({(m["workload"], m["batch_size"], method_of(m)) for m in measurements})
    for workload, batch_size, method in keys:
        key = (workload, batch_size, method)
        case = [m for m in ok if (m["workload"], m["batch_size"], method_of(m)) == key]
        by_variant: dict[str, list[dict]] = {}
        for m in case:
            by_variant.setdefault(m["variant"], []).append(m)
        medians = {v: _median([m["samples_per_s"] for m in ms]) for v, ms in by_variant.items()}
        failed = [
            m["variant"]
            for m in measurements
            if m["status"] == "failed" and (m["workload"], m["batch_size"], method_of(m)) == key
        ]
        for variant in sorted(set(by_variant) | set(failed)):
            ms = by_variant.get(variant, [])
            row = {
                "workload": workload,
                "batch_size": batch_size,
                "method": method,
                "variant": variant,
                "rounds_ok": len(ms),
                "rounds_failed": failed.count(variant),
                "median_samples_per_s": medians.get(variant),
            }
            row.update(_reference_ratios(case, variant, medians))
            row.update(_round_medians(ms))
            rows.append(row)
    return rows


def _reference_ratios(case: list[dict], variant: str, medians: dict) -> dict:
    """A variant's throughput over the bare loop's and the HF Trainer's, where both ran."""
    ratios = {}
    for reference in ("bare", "hf_trainer"):
        if variant != reference and medians.get(reference) and medians.get(variant):
            # Paired: each round's ratio is taken between runs made minutes apart,
            # which cancels the machine's drift between rounds; then the median of
            # the rounds' ratios with the statistics layer's interval (the range
            # below 5 rounds, a bootstrap CI from 5).
            per_round = _per_round_ratios(case, variant, reference)
            if per_round:
                interval = paired_ratio_interval(per_round)
                ratios[f"over_{reference}"] = interval.estimate
                ratios[f"over_{reference}_low"] = interval.low
                ratios[f"over_{reference}_high"] = interval.high
                ratios[f"over_{reference}_interval"] = interval.kind
            ratios[f"over_{reference}_of_medians"] = medians[variant] / medians[reference]
    return ratios


def _round_medians(ms: list[dict]) -> dict:
    """Event vs wall agreement (median and worst), and the medians of the first step,
    the data wait and the Trainer's own reported throughput over a variant's rounds."""
    out = {}
    gaps = [
        m["event_vs_wall"] if "event_vs_wall" in m else m["event_s"] / m["wall_s"] - 1.0
        for m in ms
        if "event_vs_wall" in m or m.get("event_s")
    ]
    if gaps:
        out["event_vs_wall_max_abs"] = max(abs(g) for g in gaps)
        out["event_vs_wall_median"] = _median(gaps)
    blocks = [m["block_steps"] for m in ms if m.get("block_steps")]
    if blocks:
        out["block_steps"] = blocks[0]
    firsts = [m["first_step_s"] for m in ms if m.get("first_step_s") is not None]
    if firsts:
        out["first_step_s_median"] = _median(firsts)
    waits = [m["data_wait_per_step_s"] for m in ms if m.get("data_wait_per_step_s") is not None]
    if waits:
        out["data_wait_per_step_s_median"] = _median(waits)
    reported = [m["reported_samples_per_s"] for m in ms if m.get("reported_samples_per_s")]
    if reported:
        out["reported_samples_per_s_median"] = _median(reported)
    return out


def _per_round_ratios(case: list[dict], variant: str, reference: str) -> list[float]:
    rounds = {}
    for m in case:
        rounds.setdefault(m["round"], {})[m["variant"]] = m["samples_per_s"]
    return [r[variant] / r[reference] for r in rounds.values() if variant in r and reference in r]


def ratio_interval_of(row: dict, key: str) -> tuple[float, float, float, str]:
    """(estimate, low, high, kind) of a paired ratio in a summary row; results files
    written before the intervals kept the rounds' range instead (the same thing below
    5 rounds)."""
    if f"{key}_low" in row:
        return row[key], row[f"{key}_low"], row[f"{key}_high"], row[f"{key}_interval"]
    if f"{key}_range" in row:
        low, high = row[f"{key}_range"]
        return row[key], low, high, "range of the paired rounds"
    return row[key], math.nan, math.nan, "no interval"


def judge(low: float, high: float, target: float) -> str:
    """A lower bound target is "met" when the whole interval lies at or above it,
    "missed" when the whole interval lies below it, else "not resolved"."""
    if not (math.isfinite(low) and math.isfinite(high)):
        return "not resolved"
    if low >= target:
        return "met"
    if high < target:
        return "missed"
    return "not resolved"


def _check(target: str, where: str, value: float, low: float, high: float, kind: str,
           met: str) -> dict:  # fmt: skip
    return {"target": target, "where": where, "value": value, "low": low, "high": high,
            "interval": kind, "met": met}  # fmt: skip


def _ratio_check(row: dict, key: str, text: str, goal: float, where: str) -> dict:
    value, low, high, kind = ratio_interval_of(row, key)
    return _check(text, where, value, low, high, kind, judge(low, high, goal))


def aa_check(row: dict, where: str) -> dict:
    """The host's floor: the A/A ratio (bare-aa / bare) with its interval (a bootstrap
    CI from MIN_AA_ROUNDS rounds on), as information: how wide it is, and whether it lies
    within 1 ± AA_FLOOR. It decides no verdict."""
    value, low, high, kind = ratio_interval_of(row, "over_bare")
    finite = math.isfinite(low) and math.isfinite(high)
    # Below MIN_AA_ROUNDS the "interval" is the rounds' range, not a confidence interval.
    if row.get("rounds_ok", 0) >= MIN_AA_ROUNDS and finite:
        floor = max(1 - low, high - 1)
        within = "within" if floor <= AA_FLOOR else "wider than"
        note = f"{INFORMATION}: the host's floor is ±{floor:.1%} ({within} ±{AA_FLOOR:.0%})"
    else:
        note = f"{INFORMATION}: fewer than {MIN_AA_ROUNDS} rounds, no interval"
    text = "A/A (bare loop / itself): the host's floor (information, not a target)"
    return _check(text, where, value, low, high, kind, note)


def _case_checks(rows: dict[tuple[str, str], dict], device: str, where: str,
                 batch_size: int) -> list[dict]:  # fmt: skip
    """The checks of one workload x batch size from its summary rows by (method, variant)."""
    checks = []
    bare_text = f"harness / bare loop >= {HARNESS_OVER_BARE_TARGET}"
    aa = rows.get((INTERLEAVED, "bare-aa"))
    interleaved = rows.get((INTERLEAVED, "harness"))
    whole = rows.get((RUNS, "harness"))
    if aa is not None and "over_bare" in aa:
        checks.append(aa_check(aa, where))
    if interleaved is not None and "over_bare" in interleaved:
        # Information beside the deterministic verdict (benchmarks/step_overhead.py).
        text = "harness / bare loop, interleaved (information: the tax is judged by step overhead)"
        value, low, high, kind = ratio_interval_of(interleaved, "over_bare")
        checks.append(_check(text, where, value, low, high, kind, INFORMATION))
    elif whole is not None and "over_bare" in whole:
        checks.append(_ratio_check(whole, "over_bare", bare_text, HARNESS_OVER_BARE_TARGET, where))
    hf_case = device == "cuda" and batch_size in HF_TARGET_BATCH_SIZES
    if whole is not None and hf_case and "over_hf_trainer" in whole:
        text = f"harness / HF Trainer (steady state) >= {HARNESS_OVER_HF_TARGET}"
        checks.append(_ratio_check(whole, "over_hf_trainer", text, HARNESS_OVER_HF_TARGET, where))
    timed = interleaved if interleaved is not None else whole
    if timed is not None and "event_vs_wall_max_abs" in timed:
        # The worst round against the bound: no interval needed for a maximum.
        worst = timed["event_vs_wall_max_abs"]
        text = f"harness step times vs CUDA events within {TIMING_AGREEMENT_TARGET:.0%}"
        met = "met" if worst <= TIMING_AGREEMENT_TARGET else "missed"
        checks.append(_check(text, where, worst, math.nan, math.nan, "the worst round", met))
    return checks


def target_checks(results: dict) -> list[dict]:
    """The targets, each with the measured value, its interval and the verdict from the
    interval ("met", "missed", "not resolved"): never from the point estimate alone. The
    interleaved comparison and its A/A floor are information (their "met" says so)."""
    cases: dict[tuple[str, int], dict[tuple[str, str], dict]] = {}
    for row in results.get("summary", []):
        key = (row["workload"], row["batch_size"])
        cases.setdefault(key, {})[(row.get("method", RUNS), row["variant"])] = row
    checks = []
    for (workload, batch_size), rows in cases.items():
        where = f"{workload} bs {batch_size}"
        checks.extend(_case_checks(rows, results["device"], where, batch_size))
    return checks
