"""Parity: the ``parity`` table — does a device train the same way as its baseline?

Repeat k of a device and repeat k of its baseline start from the same weights and see
the same batches (the same ``run_seed``): they differ by arithmetic alone. Parity
compares them **pair by pair**, per workload × device × batch size, with two checks
(docs/statistics.md, "Parity"):

1. **Loss drift** (:mod:`.drift`, the check that can pass a device): each pair's
   per-step training losses against repeat k's float64 reference of the same steps;
   the pair's drift ratio is how far the device strayed from float64 relative to the
   envelope of a correct device of its precision (the baseline's own float32 error,
   scaled by the precision's unit roundoff and an allowance ``m``). Over the pairs the
   interval of the ratios is their range (fewer than 5 pairs) or the 90% bootstrap
   interval of their median (5 or more, SciPy BCa): **within** when it lies at or below
   1, **beyond** when it lies above 1, else inconclusive.
2. **Gross check** (can only fail a device): the paired differences of the final task
   metric (device − baseline, metric units) and of the final training loss (relative to
   the baseline's) — their range (fewer than 5 pairs) or 90% t interval of the mean (5
   or more) — against ± ``g`` times the 90% upper confidence bound of the baseline's
   own seed-to-seed standard deviation of that quantity (chi-square, n − 1 degrees of
   freedom: the SD of 3 seeds is itself uncertain; ``report.parity.gross_margin_sds``,
   default 3). An interval wholly
   beyond the margin means the device's training *result* moved more than a change of
   seed moves it. Within the margin proves little (seeds move results a lot): it never
   passes a device alone.

3. **Evaluation** (trainbench.measure.eval_parity, can fail a device and is needed to pass
   one): each ok repeat's last-epoch evaluation outputs on the device against the same
   weights evaluated by the CPU in float64, within the envelope its precision class
   builds on the network's own float32 error (the same weights evaluated by the CPU in
   float32; trainbench.common.eval_envelope). Columns ``eval_parity`` (pass, fail, error,
   not run), ``eval_repeats``, ``eval_precision`` (the coarsest class over the repeats:
   the evaluation's, from the model, trainbench.measure.tf32_reach) and
   ``eval_precision_reason``; of the repeat with the largest ratio: ``eval_error``
   (the device's relative RMSE against float64), ``eval_floor`` (CPU float32's),
   ``eval_envelope``, ``eval_error_ratio`` (error ÷ envelope; ≤ 1 within) and
   ``eval_decided_by`` (the floor, or the absolute term where the floor is below it);
   ``eval_metric_diff`` (the primary metric, device − reference, of largest size).

**Row outcome** (``parity``) of the training checks, first match wins:

1. ``not comparable`` — no final metric or loss on both sides;
2. ``identical`` — every pair bit-identical (per-step losses, else final metric and
   loss): proves nothing about the device's numerics;
3. ``insufficient data`` — fewer than 3 pairs (ok repeats sharing a run seed);
4. ``fail`` — the drift is beyond its envelope, or the gross check fails;
5. ``pass`` — the drift is within its envelope;
6. ``insufficient data`` — no drift judgement: no float64 reference (the rule says why),
   too few steps, or the pairs disagree.

Then the evaluation: any repeat's evaluation failing makes the row ``fail``; a ``pass``
or ``identical`` row whose repeats do not all have an evaluation pass becomes
``insufficient data``.

**Columns**: workload, device, batch_size, primary_metric; precision (the training
rule's class: the device's autocast dtype, TF32 where torch's flags allow it, else
float32), unit_roundoff, precision_reason (why, in words: CUDA float32 training keeps the
TF32 class whatever its model runs, trainbench.common.precision_classes); pairs;
reference_steps (median steps with a loss on every side); compared_steps (median of
the first steps compared: those before the baseline diverges, :mod:`.drift`);
drift_multiplier (m); drift_low,
drift_median, drift_high (the drift ratios' interval and median; ≤ 1 within);
device_error, baseline_error (median per-step relative loss error against float64,
medians over the pairs); drift_within (true, false, empty: inconclusive or not
judged); final_metric, baseline_metric (means over the pairs); metric_diff (mean
paired difference), metric_low, metric_high, metric_margin, metric_within (false: the
gross check fails); the same for the loss (relative: 0.05 = device 5% higher);
interval (``range of n pairs`` or the CI's name); parity; rule.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats
from trainbench.analysis.stats import frames as fr
from trainbench.analysis.stats.drift import PairDrift, identical_pair, multiplier_for, pair_drift
from trainbench.analysis.tables import compact
from trainbench.common.precision_classes import (
    UNIT_ROUNDOFF,
    coarsest,
    precision_of,
    training_reason,
)

ALPHA = 0.05
MIN_PAIRS = 3
RANGE_BELOW = 5  # fewer pairs: the interval is their range
DEFAULT_GROSS_SDS = 3.0
SD_CONFIDENCE = 0.90  # the gross margin uses this upper confidence bound of the seed SD

PASS, FAIL, IDENTICAL = "pass", "fail", "identical"
EVAL_NOT_RUN = "not run"
INSUFFICIENT, NOT_COMPARABLE = "insufficient data", "not comparable"

PARITY_COLUMNS = [
    "workload", "device", "batch_size", "primary_metric", "precision", "unit_roundoff",
    "precision_reason", "pairs", "reference_steps", "compared_steps", "drift_multiplier", "drift_low", "drift_median",
    "drift_high", "device_error", "baseline_error", "drift_within",
    "final_metric", "baseline_metric", "metric_diff", "metric_low", "metric_high",
    "metric_margin", "metric_within", "final_loss", "baseline_loss", "loss_diff",
    "loss_low", "loss_high", "loss_margin", "loss_within", "interval",
    "eval_parity", "eval_repeats", "eval_precision", "eval_precision_reason", "eval_error",
    "eval_floor", "eval_envelope", "eval_error_ratio", "eval_decided_by", "eval_metric_diff",
    "parity", "rule",
]  # fmt: skip


@dataclass(frozen=True)
class ParitySettings:
    """``report.parity``: the drift allowance m per precision class and g."""

    drift_multiplier: Mapping[str, float] | None = None
    gross_margin_sds: float = DEFAULT_GROSS_SDS

    @classmethod
    def from_config(cls, parity: Mapping | None) -> ParitySettings:
        parity = parity or {}
        return cls(
            parity.get("drift_multiplier"),
            float(parity.get("gross_margin_sds", DEFAULT_GROSS_SDS)),
        )


def interval_of(values: np.ndarray, center: str = "median") -> tuple[float, float, str]:
    """(low, high, kind) of ``values``: their range below :data:`RANGE_BELOW` values,
    else the 90% interval of their median (BCa bootstrap) or mean (t)."""
    if values.size < RANGE_BELOW:
        return float(values.min()), float(values.max()), f"range of {values.size} pairs"
    if center == "mean":
        from scipy.special import stdtrit

        half = (
            float(stdtrit(values.size - 1, 1 - ALPHA)) * values.std(ddof=1) / math.sqrt(values.size)
        )
        mean = float(values.mean())
        return mean - half, mean + half, f"{100 * (1 - 2 * ALPHA):g}% t interval of the mean"
    from scipy.stats import bootstrap

    res = bootstrap((values,), np.median, confidence_level=1 - 2 * ALPHA, method="BCa",
                    random_state=np.random.default_rng(0))  # fmt: skip
    low, high = float(res.confidence_interval.low), float(res.confidence_interval.high)
    if not (np.isfinite(low) and np.isfinite(high)):
        low, high = (float(v) for v in np.percentile(values, [100 * ALPHA, 100 * (1 - ALPHA)]))
    return low, high, f"{100 * (1 - 2 * ALPHA):g}% bootstrap interval of the median"


# ----------------------------------------------------------------------------- inputs


def _losses_by_record(step_losses: pd.DataFrame | None) -> dict[str, np.ndarray]:
    if step_losses is None or step_losses.empty:
        return {}
    frame = step_losses.sort_values(["record", "step"])
    return {str(rec): g["loss"].to_numpy(float) for rec, g in frame.groupby("record", sort=False)}


def _references(references: pd.DataFrame | None, losses: Mapping[str, np.ndarray]) -> dict:
    """(workload, batch_size, pair key) -> (losses or None, why not, loss dtype)."""
    out = {}
    if references is None or references.empty:
        return out
    for r in references.to_dict("records"):
        key = (r["workload"], int(r["batch_size"]), _pair_key(r))
        values = losses.get(str(r["record"])) if r.get("status") == "ok" else None
        why = None if values is not None else (r.get("reason") or f"reference {r.get('status')}")
        out[key] = (values, why, r.get("loss_dtype"))
    return out


def _pair_key(row: Mapping) -> int:
    seed = row.get("run_seed")
    return int(seed) if seed is not None and pd.notna(seed) else int(row["rep"])


def _known(value):
    """A record-table value, None where missing (NaN, NA)."""
    return None if value is None or (not isinstance(value, str) and pd.isna(value)) else value


def _facts(row: Mapping) -> dict:
    """A runs row's settings in force, as :func:`precision_of` reads them."""
    keys = ("tf32_matmul", "tf32_cudnn", "tf32_override", "float32_matmul_precision")
    facts = {k: _known(row.get(k)) for k in keys}
    reach = _known(row.get("tf32_reach"))
    if reach is not None:
        facts["tf32_reach"] = {"reaches": bool(reach)}
    return facts


def _precision(rows: list[dict]) -> tuple[str, str]:
    """The training rule's class of a device's repeats (the coarsest where they differ)
    and why, in words (:func:`training_reason`)."""
    found = {precision_of(_known(r.get("autocast_dtype")), _facts(r)) for r in rows}
    reason = fr.distinct_text(training_reason(_known(r.get("autocast_dtype")), _facts(r))
                              for r in rows)  # fmt: skip
    return coarsest(found), reason  # mixed settings across repeats: judge by the coarsest


# ----------------------------------------------------------------------------- checks


def _gross(row: dict, prefix: str, dev: np.ndarray, base: np.ndarray, spread: np.ndarray,
           g: float, relative: bool) -> str | None:  # fmt: skip
    """Fill the gross check of ``prefix`` (metric or loss); its text, or None."""
    ok = np.isfinite(dev) & np.isfinite(base)
    dev, base, spread = dev[ok], base[ok], spread[np.isfinite(spread)]
    if dev.size < MIN_PAIRS or spread.size < 2:
        return None
    scale = abs(float(np.mean(spread))) if relative else 1.0
    if scale == 0:
        return None
    diffs = (dev - base) / (np.abs(base) if relative else 1.0)
    margin = g * seed_sd_upper(spread) / scale
    low, high, _ = interval_of(diffs, center="mean")
    row.update({f"final_{prefix}": float(dev.mean()), f"baseline_{prefix}": float(base.mean()), f"{prefix}_diff": float(diffs.mean()),
                f"{prefix}_low": low, f"{prefix}_high": high, f"{prefix}_margin": margin})  # fmt: skip
    if margin == 0:
        return f"{prefix}: the baseline's repeats agree exactly (no seed spread to judge by)"
    beyond = low > margin or high < -margin
    row[f"{prefix}_within"] = (
        False if beyond else (True if -margin <= low and high <= margin else pd.NA)
    )
    span = f"[{_signed(low, relative)}, {_signed(high, relative)}]"
    bound = f"±{compact(100 * margin)}%" if relative else f"±{compact(margin)}"
    verdict = "beyond: fails" if beyond else "not beyond"
    sd = f"the {SD_CONFIDENCE:.0%} upper bound of the baseline's seed SD, {spread.size} repeats"
    return f"{prefix} {span} vs {bound} ({compact(g)} × {sd}): {verdict}"


def seed_sd_upper(values: np.ndarray, confidence: float = SD_CONFIDENCE) -> float:
    """The one-sided ``confidence`` upper bound of the standard deviation of ``values``
    (chi-square, n − 1 degrees of freedom, normal values): a margin from 3 seeds is
    itself a guess, whose SD falls below half the true one about 1 time in 5; the
    bound keeps that luck from failing a correct device."""
    n = values.size
    sd = float(np.std(values, ddof=1))
    return sd * math.sqrt((n - 1) / float(stats.chi2.ppf(1 - confidence, n - 1)))


def _signed(x: float, relative: bool) -> str:
    value = compact(abs(100 * x)) + "%" if relative else compact(abs(x))
    return f"{'+' if x >= 0 else '−'}{value}"


def _nanmedian(values: list[float]) -> float:
    finite = [v for v in values if np.isfinite(v)]
    return float(np.median(finite)) if finite else np.nan


def _drift(row: dict, drifts: list[PairDrift], precision: str, m: float) -> str | None:
    if not drifts:
        return None
    ratios = np.array([d.ratio for d in drifts])
    low, high, kind = interval_of(ratios)
    within = high <= 1.0
    beyond = low > 1.0
    row.update({
        "reference_steps": int(np.median([d.steps for d in drifts])),
        "compared_steps": int(np.median([d.compared for d in drifts])), "drift_low": low,
        "drift_median": float(np.median(ratios)), "drift_high": high,
        "device_error": _nanmedian([d.device_error for d in drifts]),
        "baseline_error": _nanmedian([d.baseline_error for d in drifts]),
        "drift_within": True if within else (False if beyond else pd.NA), "interval": kind,
    })  # fmt: skip
    scale = UNIT_ROUNDOFF[precision] / UNIT_ROUNDOFF["float32"]
    envelope = f"{compact(m)} × " + (f"2^{round(math.log2(scale))} × " if scale > 1 else "")
    words = "within" if within else "beyond" if beyond else "neither within nor beyond"
    return (
        f"loss drift against float64 over the first {row['compared_steps']} of "
        f"{row['reference_steps']} steps (before the baseline diverges): device error / "
        f"({precision} envelope = {envelope}the baseline's float32 error) "
        f"{compact(low)}–{compact(high)} ({kind}): {words}; training judged in {precision}"
        + (f": {row['precision_reason']}" if row.get("precision_reason") else "")
    )


def _identical(drifts: list[PairDrift], dev: dict, base: dict, keys: list[int]) -> bool:
    if drifts and len(drifts) == len(keys):
        return all(d.bit_identical for d in drifts)
    same = [
        dev[k].get("final_metric") == base[k].get("final_metric")
        and dev[k].get("final_loss") == base[k].get("final_loss")
        for k in keys
    ]
    return bool(same) and all(same)


def _status(value) -> str | None:
    return value if isinstance(value, str) and value else None


def eval_comparison(rows: list[dict]) -> dict:
    """The evaluation comparison of a device's ok repeats (trainbench.measure.eval_parity, the
    runs' ``eval_parity_*`` columns): ``fail`` when any repeat failed, ``error`` when
    one could not be compared, ``not run`` when a repeat has none, else ``pass``; the
    numbers of the repeat with the largest error ÷ envelope, and the metric difference
    of largest size."""
    statuses = [_status(r.get("eval_parity_status")) for r in rows]
    judged = [r for r in rows if _finite_number(r.get("eval_parity_error_ratio")) is not None]
    worst = max(judged, key=lambda r: float(r["eval_parity_error_ratio"]), default={})
    diffs = [_known(r.get("eval_parity_metric_difference")) for r in rows]
    diffs = [float(x) for x in diffs if x is not None]
    if FAIL in statuses:
        status = FAIL
    elif "error" in statuses:
        status = "error"
    elif not statuses or None in statuses:
        status = EVAL_NOT_RUN
    else:
        status = PASS
    classes = {_status(r.get("eval_parity_precision")) for r in rows} - {None}
    reasons = fr.distinct_text(_known(r.get("eval_parity_precision_reason")) for r in rows)
    return {
        "eval_parity": status,
        "eval_repeats": sum(x in (PASS, FAIL) for x in statuses),
        "eval_precision": coarsest(classes) if classes else None,
        "eval_precision_reason": reasons or None,
        **{f"eval_{name}": _finite_number(worst.get(f"eval_parity_{name}"), np.nan)
           for name in ("error", "floor", "envelope")},
        "eval_error_ratio": _finite_number(worst.get("eval_parity_error_ratio"), np.nan),
        "eval_decided_by": _known(worst.get("eval_parity_decided_by")),
        "eval_metric_diff": max(diffs, key=abs) if diffs else np.nan,
    }  # fmt: skip


def _finite_number(value, default=None):
    value = _known(value)
    try:
        number = float(value)
    except (TypeError, ValueError):
        return default
    return number if math.isfinite(number) else default


def _eval_text(found: dict, n: int) -> str:
    status, ratio = found["eval_parity"], found["eval_error_ratio"]
    if status in (PASS, FAIL):
        verb = "matches" if status == PASS else "differs from"
        text = (f"evaluation {verb} CPU float64 in {found['eval_repeats']} of "
                f"{fr.plural(n, 'repeat')} ({eval_numbers(found)})")  # fmt: skip
        if pd.isna(ratio) and status == FAIL:
            text += "; outputs not finite, or an integer output differs"
        return text
    if status == "error":
        return "evaluation parity could not be computed in a repeat (its record says why)"
    return "no evaluation parity in every repeat (records made without it, or a baseline)"


def eval_numbers(found: Mapping) -> str:
    """What decided the evaluation comparison, in words: the worst repeat's error, the
    network's float32 floor, the precision's envelope and the ratio, which term decided,
    the metric difference, and why the precision class is what it is."""
    if pd.isna(found.get("eval_error_ratio")):
        return "no finite error"
    precision = found.get("eval_precision") or "float32"
    text = (f"worst repeat: error {compact(found['eval_error'])} (relative RMSE), float32 floor "
            f"{compact(found['eval_floor'])}, {precision} envelope "
            f"{compact(found['eval_envelope'])}, ratio {compact(found['eval_error_ratio'])}")  # fmt: skip
    if found.get("eval_decided_by") == "the absolute term":
        text += ", the floor below the absolute term: the absolute term decided"
    diff = found.get("eval_metric_diff")
    if diff is not None and pd.notna(diff):
        text += f"; metric difference {compact(diff)}"
    reason = found.get("eval_precision_reason")
    return f"{text}; evaluation judged in {precision}" + (f": {reason}" if reason else "")


def _row(key, dev: dict, base: dict, base_all: list[dict], context: dict) -> dict:
    """The training comparison (:func:`_training_row`), then the evaluation's: a failed
    evaluation fails the row; a pass or identical row without an evaluation pass in
    every repeat is insufficient data."""
    row = _training_row(key, dev, base, base_all, context)
    found = eval_comparison(list(dev.values()))
    row.update(found)
    text = _eval_text(found, len(dev))
    if found["eval_parity"] == FAIL:
        row["parity"], row["rule"] = FAIL, f"{text}; {row['rule']}"
    elif row["parity"] in (PASS, IDENTICAL) and found["eval_parity"] != PASS:
        row["parity"], row["rule"] = INSUFFICIENT, f"{text}. {row['rule']}"
    else:
        row["rule"] = f"{row['rule']}; {text}"
    return row


def _training_row(key, dev: dict, base: dict, base_all: list[dict], context: dict) -> dict:
    workload, batch_size, device = key
    settings, losses, refs = context["settings"], context["losses"], context["references"]
    precision, reason = _precision(list(dev.values()))
    m = multiplier_for(precision, settings.drift_multiplier)
    keys = sorted(set(dev) & set(base))
    row = {"workload": workload, "device": device, "batch_size": batch_size,
           "primary_metric": fr.distinct_text(r.get("primary_metric") for r in dev.values()) or None,
           "precision": precision, "unit_roundoff": UNIT_ROUNDOFF[precision],
           "precision_reason": reason or None, "pairs": len(keys),
           "drift_multiplier": m, "drift_within": pd.NA, "metric_within": pd.NA,
           "loss_within": pd.NA}  # fmt: skip
    drifts, missing = [], []
    for k in keys:
        ref, why, _ = refs.get((workload, batch_size, k), (None, "no float64 reference made", None))
        d, b = losses.get(str(dev[k].get("record"))), losses.get(str(base[k].get("record")))
        found = None
        if d is not None and b is not None and np.array_equal(d, b):
            found = identical_pair(len(d), precision, m)  # within any envelope: no reference needed
        elif ref is not None and d is not None and b is not None:
            found = pair_drift(d, b, ref, precision, m)
        if found is None:
            missing.append(why or "fewer than 4 steps with a loss on every side")
        else:
            drifts.append(found)
    dev_rows, base_rows = [dev[k] for k in keys], [base[k] for k in keys]

    def col(rows, name):
        return np.array([float(r.get(name)) if pd.notna(r.get(name)) else np.nan for r in rows])

    spread = {n: col(base_all, n) for n in ("final_metric", "final_loss")}
    if not keys or (np.isnan(col(dev_rows, "final_metric")).all()
                    and np.isnan(col(dev_rows, "final_loss")).all() and not drifts):  # fmt: skip
        row["parity"], row["rule"] = NOT_COMPARABLE, "no pair with a final metric or loss"
        return row
    if _identical(drifts, dev, base, keys):
        row["parity"] = IDENTICAL
        row["rule"] = (f"bit-identical to {context['baseline']} in all {fr.plural(len(keys), 'pair')}: "
                       "proves nothing about the device's numerics")  # fmt: skip
        return row
    g = settings.gross_margin_sds
    checks = [
        _gross(row, "metric", col(dev_rows, "final_metric"), col(base_rows, "final_metric"),
               spread["final_metric"], g, False),
        _gross(row, "loss", col(dev_rows, "final_loss"), col(base_rows, "final_loss"),
               spread["final_loss"], g, True),
    ]  # fmt: skip
    drift_text = _drift(row, drifts, precision, m) if len(drifts) >= MIN_PAIRS else None
    _outcome(row, keys, drift_text, [c for c in checks if c], missing, context["baseline"])
    return row


def _outcome(row, keys, drift_text, gross, missing, baseline) -> None:
    head = f"paired with {baseline} by run seed, {fr.plural(len(keys), 'pair')}"
    parts = [t for t in [drift_text, *gross] if t]
    body = f"{head}; " + "; ".join(parts) if parts else head
    gross_fail = row.get("metric_within") is False or row.get("loss_within") is False
    if len(keys) < MIN_PAIRS:
        row["parity"] = INSUFFICIENT
        row["rule"] = f"fewer than {MIN_PAIRS} pairs (ok repeats sharing a run seed): {body}"
    elif row.get("drift_within") is False or gross_fail:
        row["parity"], row["rule"] = FAIL, body
    elif row.get("drift_within") is True:
        row["parity"], row["rule"] = PASS, body
    else:
        why = (
            "no loss-drift judgement: " + "; ".join(sorted(set(missing)))
            if drift_text is None
            else "the pairs' drift ratios straddle the envelope (more repeats narrow it)"
        )
        row["parity"], row["rule"] = INSUFFICIENT, f"{why}. {body}"


# ----------------------------------------------------------------------------- table


def parity_table(
    runs: pd.DataFrame,
    baselines: fr.Baselines,
    step_losses: pd.DataFrame | None = None,
    references: pd.DataFrame | None = None,
    settings: ParitySettings | None = None,
) -> pd.DataFrame:
    """The ``parity`` table (see the module docstring) from the record tables ``runs``,
    ``step_losses`` and ``references``; ``settings``: the config's ``report.parity``."""
    runs = fr.prepare_runs(runs)
    ok = fr.ok_rows(runs)
    if ok.empty:
        return fr.empty(PARITY_COLUMNS)
    losses = _losses_by_record(step_losses)
    context = {"settings": settings or ParitySettings(), "losses": losses,
               "references": _references(references, losses)}  # fmt: skip
    cells: dict[tuple, dict[int, dict]] = {}
    for r in ok.to_dict("records"):
        cells.setdefault((r["workload"], int(r["batch_size"]), r["device"]), {})[_pair_key(r)] = r
    rows = []
    for key, dev in sorted(cells.items(), key=lambda kv: (kv[0][0], kv[0][2], kv[0][1])):
        baseline = fr.baseline_of(baselines, key[0])
        if key[2] == baseline:
            continue
        base = cells.get((key[0], key[1], baseline), {})
        context["baseline"] = baseline
        rows.append(_row(key, dev, base, list(base.values()), context))
    table = fr.frame(rows, PARITY_COLUMNS)
    for column in ("drift_within", "metric_within", "loss_within"):
        table[column] = table[column].astype("boolean")
    return table.reset_index(drop=True)
