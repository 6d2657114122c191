"""Parity: the ``parity`` table — does a device train to the same result as its
baseline, within a stated margin?

**The rule: an equivalence test** (TOST, two one-sided Welch t-tests; Schuirmann
1987) per workload × device × batch size, on the device's ok repeats against the
baseline's ok repeats at the same batch size, for two quantities:

* the final task metric (the workload's primary metric after the last epoch), as the
  difference of means device − baseline, in the metric's units, against ± the
  workload's metric margin;
* the final training loss (the last epoch's mean), as the *relative* difference of
  means (device − baseline) / |baseline mean|, against ± the workload's loss margin
  (the baseline mean in the denominator is taken as known).

For each, the interval is the (1 − 2α) = 90% Welch interval of the difference
(α = :data:`ALPHA` = 0.05 for each one-sided test; Welch–Satterthwaite degrees of
freedom), and

* ``pass`` — the interval lies inside ± margin: both one-sided tests reject a
  difference of at least the margin (equivalence shown at level α);
* ``fail`` — the interval lies entirely beyond + margin or beyond − margin: the
  difference is shown to exceed the margin (one-sided, level α);
* inconclusive — neither: not shown equivalent, not shown different. More repeats
  narrow the interval.

A check is made where both sides have at least :data:`MIN_REPEATS` (3) finite values.
The band is two-sided: a device much *better* than the baseline fails too — it did
not train the same way.

**Margins** come from the config, ``report.parity_margins``: per workload
``{metric: <absolute, metric units>, loss: <relative, 0.1 = 10%>}``, and ``default``
for workloads without their own (without a config, :data:`FALLBACK_MARGINS`). The
bundled workloads' defaults are 3× the seed-to-seed standard deviation σ of each
quantity on the default config: with 3 repeats a side the interval's half-width is
about 1.7σ, so a narrower margin can rarely be shown (a device equal to the baseline
passes 75% of the time at 3σ, 31% at 2σ; normal model). How well the rule detects a
wrong device at these margins, and how often it fails a right one, is measured by
``benchmarks/parity_power.py`` (docs/statistics.md, "Parity").

**Row outcome** (``parity``), first match wins:

1. ``not comparable`` — no final metric or loss on both the device and the baseline;
2. ``identical`` — the final metric and loss equal the baseline's exactly in every
   repeat, matched by rep: bit-identical runs prove nothing about the device's numerics
   (e.g. two thread counts of the CPU where its kernels give the same bits at both);
3. ``insufficient data`` — fewer than 3 ok repeats with a result on either side (the
   rule says which);
4. ``fail`` — a check fails;
5. ``pass`` — every check made passes;
6. ``insufficient data`` — otherwise: a check is inconclusive (the rule says
   "inconclusive" and which).

**Columns**, one row per workload × device × batch size for non-baseline devices with
ok runs that report a final metric or loss:

* primary_metric; n, baseline_n: ok repeats with a result, device and baseline;
* final_metric, baseline_metric: means over those repeats; metric_std,
  baseline_metric_std: sample standard deviations (ddof=1); metric_diff: device −
  baseline (signed); metric_low, metric_high: its 90% Welch interval; metric_margin:
  the margin (absolute); metric_pass: true (pass), false (fail), empty (inconclusive
  or not judged);
* final_loss … loss_pass: the same for the final training loss, with loss_diff,
  loss_low, loss_high relative to the baseline mean (0.05 = device 5% higher) and
  loss_margin relative;
* parity: the outcome above; rule: the test written out with its numbers.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..tables import compact
from . import frames as fr

ALPHA = 0.05
MIN_REPEATS = 3
# Used only where no margins are given (the API without a config); the config's
# `report.parity_margins.default` holds the same values (a test checks they agree).
FALLBACK_MARGINS = {"metric": 0.05, "loss": 0.10}

PASS, FAIL, IDENTICAL = "pass", "fail", "identical"
INSUFFICIENT, NOT_COMPARABLE = "insufficient data", "not comparable"
INCONCLUSIVE = "inconclusive"

PARITY_COLUMNS = [
    "workload", "device", "batch_size", "primary_metric", "n", "baseline_n",
    "final_metric", "baseline_metric", "metric_std", "baseline_metric_std", "metric_diff",
    "metric_low", "metric_high", "metric_margin", "metric_pass",
    "final_loss", "baseline_loss", "loss_std", "baseline_loss_std", "loss_diff",
    "loss_low", "loss_high", "loss_margin", "loss_pass", "parity", "rule",
]  # fmt: skip
Margins = Mapping[str, Mapping[str, float]]


@dataclass(frozen=True)
class Equivalence:
    """One equivalence test: the difference of means (relative when the margin is),
    its (1 − 2α) Welch interval, the margin and the outcome (pass, fail, inconclusive)."""

    diff: float
    low: float
    high: float
    margin: float
    outcome: str
    df: float

    @property
    def passed(self) -> bool | None:
        return {PASS: True, FAIL: False}.get(self.outcome)


def welch_interval(device, baseline, alpha: float = ALPHA) -> tuple[float, float, float, float]:
    """(mean difference device − baseline, low, high, degrees of freedom): the
    (1 − 2α) Welch interval. Zero variance on both sides gives a point interval."""
    from scipy.special import stdtrit  # the t quantile; lighter than scipy.stats

    x, y = np.asarray(device, float), np.asarray(baseline, float)
    diff = float(x.mean() - y.mean())
    vx, vy = x.var(ddof=1) / x.size, y.var(ddof=1) / y.size
    se = math.sqrt(vx + vy)
    if se == 0:
        return diff, diff, diff, float(x.size + y.size - 2)
    df = (vx + vy) ** 2 / (vx**2 / (x.size - 1) + vy**2 / (y.size - 1))
    half = float(stdtrit(df, 1 - alpha)) * se
    return diff, diff - half, diff + half, float(df)


def equivalence(
    device, baseline, margin: float, relative: bool = False, alpha: float = ALPHA
) -> Equivalence:
    """The TOST of device against baseline at ± ``margin`` (see the module docstring);
    ``relative``: the difference and interval divided by |baseline mean|."""
    diff, low, high, df = welch_interval(device, baseline, alpha)
    if relative:
        scale = abs(float(np.mean(baseline)))
        diff, low, high = (v / scale if scale else math.nan for v in (diff, low, high))
    if not np.isfinite([low, high]).all():
        outcome = INCONCLUSIVE
    elif -margin < low and high < margin:
        outcome = PASS
    elif low > margin or high < -margin:
        outcome = FAIL
    else:
        outcome = INCONCLUSIVE
    return Equivalence(diff, low, high, float(margin), outcome, df)


def margins_for(margins: Margins | None, workload: str) -> dict[str, float]:
    """``{"metric", "loss"}`` margins of ``workload``: its own entry over ``default``
    over :data:`FALLBACK_MARGINS`."""
    found = dict(FALLBACK_MARGINS)
    for key in ("default", workload):
        found.update({k: float(v) for k, v in ((margins or {}).get(key) or {}).items()})
    return found


def _signed(x: float, relative: bool) -> str:
    if relative:
        return f"{'+' if x >= 0 else '−'}{compact(abs(100 * x))}%"
    return f"{'+' if x >= 0 else '−'}{compact(abs(x))}"


def check_text(name: str, test: Equivalence, relative: bool) -> str:
    """ "accuracy: +0.004, 90% interval [−0.01, +0.018] within ±0.03: equivalent"."""
    margin = f"±{compact(100 * test.margin)}%" if relative else f"±{compact(test.margin)}"
    what = {
        PASS: f"within {margin}: equivalent",
        FAIL: f"beyond {margin}: differs by more than the margin",
        INCONCLUSIVE: f"neither within nor beyond {margin}: inconclusive",
    }[test.outcome]
    span = f"[{_signed(test.low, relative)}, {_signed(test.high, relative)}]"
    return (
        f"{name}: {_signed(test.diff, relative)}, {100 * (1 - 2 * ALPHA):g}% interval {span} {what}"
    )


# ----------------------------------------------------------------------------- table


def _identical(dev: dict, ref: dict) -> bool:
    """The device's final metric and loss equal the baseline's in every repeat (by rep)."""
    base = dict(zip(ref["rep"], zip(ref["metric"], ref["loss"], strict=True), strict=True))
    for r, m, x in zip(dev["rep"], dev["metric"], dev["loss"], strict=True):
        if r not in base:
            return False
        bm, bx = base[r]
        same_metric = (np.isnan(m) and np.isnan(bm)) or m == bm
        same_loss = (np.isnan(x) and np.isnan(bx)) or x == bx
        if not (same_metric and same_loss):
            return False
    return len(dev["rep"]) > 0


def _finite(x: np.ndarray) -> np.ndarray:
    return x[np.isfinite(x)]


def _mean(x: np.ndarray) -> float:
    return float(np.mean(x)) if x.size else np.nan


def _std(x: np.ndarray) -> float:
    return float(np.std(x, ddof=1)) if x.size >= 2 else np.nan


def _too_few(base, n_dev: int, n_base: int) -> str:
    """The rule of a row with too few repeats: each side's count."""
    return (
        f"fewer than {MIN_REPEATS} ok repeats with a final metric/loss: device {n_dev}, "
        f"baseline {base} {n_base}; the equivalence test needs ≥ {MIN_REPEATS} on each side"
    )


def _judge(row: dict, prefix: str, name: str, dev, ref, margin: float, relative: bool):
    """Fill ``prefix``'s diff/low/high/margin/pass columns; the check's text, outcome."""
    test = equivalence(dev, ref, margin, relative)
    row.update({f"{prefix}_diff": test.diff, f"{prefix}_low": test.low,
                f"{prefix}_high": test.high, f"{prefix}_pass": test.passed})  # fmt: skip
    return check_text(name, test, relative), test.outcome


def _outcome(row: dict, base, checks: list[tuple[str, str]]) -> None:
    """The row's parity and rule from its checks [(text, outcome)]."""
    head = (
        f"equivalence test (two one-sided Welch t-tests, α={compact(ALPHA)} each; "
        f"{100 * (1 - 2 * ALPHA):g}% Welch interval of the difference of means, device − "
        f"baseline {base}), "
        f"n={row['n']} vs {row['baseline_n']}"
    )
    outcomes = [o for _, o in checks]
    texts = "; ".join(t for t, _ in checks)
    if FAIL in outcomes:
        row["parity"], row["rule"] = FAIL, f"{head}: {texts}"
    elif all(o == PASS for o in outcomes):
        row["parity"], row["rule"] = PASS, f"{head}: {texts}"
    else:
        which = ", ".join(t.split(":")[0] for t, o in checks if o == INCONCLUSIVE)
        row["parity"] = INSUFFICIENT
        row["rule"] = (
            f"inconclusive ({which}): not shown equivalent within the margin and not shown "
            f"to differ by more; more repeats narrow the interval. {head}: {texts}"
        )


def _parity_row(key, dev: dict, ref: dict | None, base, margins: dict[str, float]) -> dict:
    workload, batch_size, device = key
    empty = np.empty(0)
    dm, dl = _finite(dev["metric"]), _finite(dev["loss"])
    bm = _finite(ref["metric"]) if ref else empty
    bl = _finite(ref["loss"]) if ref else empty
    primary = fr.distinct_text(dev["primary"]) or None
    row = {
        "workload": workload, "device": device, "batch_size": batch_size,
        "primary_metric": primary, "n": max(dm.size, dl.size), "baseline_n": max(bm.size, bl.size),
        "final_metric": _mean(dm), "baseline_metric": _mean(bm), "metric_std": _std(dm),
        "baseline_metric_std": _std(bm), "metric_margin": margins["metric"], "metric_pass": pd.NA,
        "final_loss": _mean(dl), "baseline_loss": _mean(bl), "loss_std": _std(dl),
        "baseline_loss_std": _std(bl), "loss_margin": margins["loss"], "loss_pass": pd.NA,
    }  # fmt: skip
    pairs = [(d, b) for d, b in ((dm, bm), (dl, bl)) if d.size and b.size]
    if not pairs and row["baseline_n"]:
        row["parity"] = NOT_COMPARABLE
        row["rule"] = "no final metric or loss on both the device and the baseline"
    elif ref and _identical(dev, ref):
        row["parity"] = IDENTICAL
        row["rule"] = (
            f"final metric and loss equal {base}'s exactly in all "
            f"{fr.plural(len(dev['rep']), 'repeat')} (bit-identical: proves nothing about the "
            "device's numerics)"
        )
    elif not pairs or any(min(d.size, b.size) < MIN_REPEATS for d, b in pairs):
        row["parity"], row["rule"] = INSUFFICIENT, _too_few(base, row["n"], row["baseline_n"])
    else:
        checks = []
        if dm.size and bm.size:
            checks.append(
                _judge(row, "metric", primary or "metric", dm, bm, margins["metric"], False)
            )
        if dl.size and bl.size:
            checks.append(_judge(row, "loss", "loss", dl, bl, margins["loss"], True))
        _outcome(row, base, checks)
    return row


def parity_table(
    runs: pd.DataFrame, baselines: fr.Baselines, margins: Margins | None = None
) -> pd.DataFrame:
    """The ``parity`` table; see the module docstring. ``margins``: the config's
    ``report.parity_margins`` (default :data:`FALLBACK_MARGINS` for every workload)."""
    runs = fr.prepare_runs(runs)
    ok = fr.ok_rows(runs)
    metric, loss = fr.num(ok, "final_metric"), fr.num(ok, "final_loss")
    ok = fr.select(ok, ["workload", "batch_size", "device", "rep"])[metric.notna() | loss.notna()]
    if ok.empty:
        return fr.empty(PARITY_COLUMNS)
    arrays = {
        "rep": ok["rep"].to_numpy(), "metric": metric[ok.index].to_numpy(),
        "loss": loss[ok.index].to_numpy(),
        "primary": fr.text(runs, "primary_metric")[ok.index].to_numpy(),
    }  # fmt: skip
    cells = {
        key: {name: values[idx] for name, values in arrays.items()}
        for key, idx in fr.groups(ok, ["workload", "batch_size", "device"]).items()
    }
    rows = []
    for key, dev in cells.items():
        base = fr.baseline_of(baselines, key[0])
        if key[2] != base:
            ref = cells.get((key[0], key[1], base))
            rows.append(_parity_row(key, dev, ref, base, margins_for(margins, key[0])))
    table = fr.frame(rows, PARITY_COLUMNS)
    for column in ("metric_pass", "loss_pass"):
        table[column] = table[column].astype("boolean")
    return table.sort_values(["workload", "device", "batch_size"], ignore_index=True)
