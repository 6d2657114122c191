"""The throughput benchmark's summary: per workload x batch size x variant, the
median throughput over rounds and the paired ratios to the bare loop and the HF
Trainer with their intervals; and the targets, each judged from its interval."""

from __future__ import annotations

import math

import numpy as np

from ..stats.intervals import paired_ratio_interval

HARNESS_OVER_BARE_TARGET = 0.98
HARNESS_OVER_HF_TARGET = 1.1
HF_TARGET_BATCH_SIZES = (64, 256)
TIMING_AGREEMENT_TARGET = 0.02


def _median(values: list[float]) -> float | None:
    return float(np.median(values)) if values else None


def summarize(measurements: list[dict]) -> list[dict]:
    """Per workload x batch size x variant: median throughput over rounds, ratios
    to the bare loop and the HF Trainer (ratio of medians, with the per-round
    ratios' range), and wall-clock vs CUDA-event agreement."""
    rows = []
    ok = [m for m in measurements if m["status"] == "ok"]
    keys = sorted({(m["workload"], m["batch_size"]) for m in measurements})
    for workload, batch_size in keys:
        case = [m for m in ok if m["workload"] == workload and m["batch_size"] == batch_size]
        by_variant: dict[str, list[dict]] = {}
        for m in case:
            by_variant.setdefault(m["variant"], []).append(m)
        medians = {v: _median([m["samples_per_s"] for m in ms]) for v, ms in by_variant.items()}
        failed = [
            m["variant"]
            for m in measurements
            if m["status"] == "failed"
            and (m["workload"], m["batch_size"]) == (workload, batch_size)
        ]
        for variant in sorted(set(by_variant) | set(failed)):
            ms = by_variant.get(variant, [])
            row = {
                "workload": workload,
                "batch_size": batch_size,
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


def target_checks(results: dict) -> list[dict]:
    """The issue's targets, each with the measured value, its interval and the
    verdict from the interval ("met", "missed", "not resolved"): never from the
    point estimate alone."""
    checks = []
    for row in results.get("summary", []):
        where = f"{row['workload']} bs {row['batch_size']}"
        if row["variant"] != "harness":
            continue
        targets = [("over_bare", f"harness / bare loop >= {HARNESS_OVER_BARE_TARGET}",
                    HARNESS_OVER_BARE_TARGET)]  # fmt: skip
        if results["device"] == "cuda" and row["batch_size"] in HF_TARGET_BATCH_SIZES:
            targets.append(
                (
                    "over_hf_trainer",
                    f"harness / HF Trainer (steady state) >= {HARNESS_OVER_HF_TARGET}",
                    HARNESS_OVER_HF_TARGET,
                )  # fmt: skip
            )
        for key, text, goal in targets:
            if key not in row:
                continue
            value, low, high, kind = ratio_interval_of(row, key)
            checks.append(
                {
                    "target": text,
                    "where": where,
                    "value": value,
                    "low": low,
                    "high": high,
                    "interval": kind,
                    "met": judge(low, high, goal),
                }  # fmt: skip
            )
        if "event_vs_wall_max_abs" in row:
            # The worst round against the bound: no interval needed for a maximum.
            worst = row["event_vs_wall_max_abs"]
            checks.append(
                {
                    "target": f"harness step times vs CUDA events within {TIMING_AGREEMENT_TARGET:.0%}",
                    "where": where,
                    "value": worst,
                    "low": math.nan,
                    "high": math.nan,
                    "interval": "the worst round",
                    "met": "met" if worst <= TIMING_AGREEMENT_TARGET else "missed",
                }
            )
    return checks
