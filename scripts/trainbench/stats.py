"""Statistics over the run tables: confidence intervals, speedups, stability, parity,
memory, crossovers and the MPS "swap instead of OOM" signature.

Every function here is pure (pandas in, pandas out) and every number is computed from
the tables built by :mod:`trainbench.analysis` (``runs``, ``epochs``, ``per_label``,
``matmul``). The only IO is :func:`write_table`, which writes a table as CSV and as
Markdown, each atomically.

Conventions
-----------
* A *cell* is one record: workload x device x batch size x repeat.
* Summaries are medians over repeats; uncertainty is a percentile bootstrap CI of the
  median (or of the ratio of two medians).
* Rows whose status is not ``ok`` never enter a throughput, metric or memory summary;
  they are counted by :func:`stability_table`.
* ``memory_limit_bytes`` is an optional column of ``runs`` (CUDA total memory, MPS
  recommended max working set, host RAM for cpu). Missing or NaN means the limit is
  unknown, and anything that needs it is not judged.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence

import numpy as np
import pandas as pd

from .records import atomic_write_text

KEYS = ["workload", "device", "batch_size"]

SPEEDUP_COLUMNS = [
    "workload", "batch_size", "device", "n", "median", "ci_low", "ci_high",
    "baseline_n", "baseline_median", "speedup", "speedup_ci_low", "speedup_ci_high", "verdict",
]  # fmt: skip
STABILITY_BASE_COLUMNS = [
    "workload", "device", "cells", "attempts", "ok_cells", "failed_cells", "unavailable_cells",
    "failed_by_class",
]  # fmt: skip
STABILITY_TAIL_COLUMNS = [
    "failed_attempts", "epoch_time_cv", "slowest_to_fastest", "unstable", "note",
]  # fmt: skip
PER_LABEL_COLUMNS = [
    "workload", "device", "batch_size", "label", "n", "precision", "recall", "f1", "accuracy",
    "support", "baseline_f1", "f1_minus_baseline",
]  # fmt: skip
PARITY_COLUMNS = [
    "workload", "device", "batch_size", "primary_metric", "n", "baseline_n",
    "final_metric", "baseline_metric", "baseline_metric_std", "metric_diff", "metric_band",
    "metric_pass",
    "final_loss", "baseline_loss", "baseline_loss_std", "loss_diff", "loss_band", "loss_pass",
    "parity", "rule",
]  # fmt: skip
MEMORY_COLUMNS = [
    "workload", "device", "batch_size", "n", "memory_initial_bytes", "memory_peak_bytes",
    "memory_limit_bytes", "peak_fraction_of_limit", "memory_method",
]  # fmt: skip
CROSSOVER_COLUMNS = [
    "kind", "workload", "device", "batch_size", "quantity", "crossover", "compared_at",
    "device_value", "baseline_value", "points_compared", "finding",
]  # fmt: skip
COLLAPSE_COLUMNS = [
    "workload", "device", "batch_size", "smaller_batch_size", "throughput", "smaller_throughput",
    "drop_fraction", "peak_memory_bytes", "memory_limit_bytes", "evidence",
]  # fmt: skip

VERDICT_BASELINE = "baseline"
VERDICT_FASTER = "faster"
VERDICT_SLOWER = "slower"
VERDICT_UNCLEAR = "no clear speedup"
VERDICT_FEW = "too few repeats"
VERDICT_NO_BASELINE = "no baseline"

PARITY_PASS = "pass"
PARITY_FAIL = "fail"
PARITY_INSUFFICIENT = "insufficient repeats"
PARITY_NOT_COMPARABLE = "not comparable"


# ----------------------------------------------------------------------------- helpers


def _clean(values) -> np.ndarray:
    """Finite floats only (None, NaN, inf and non-numeric strings dropped)."""
    arr = pd.to_numeric(pd.Series(values, dtype=object), errors="coerce").to_numpy(float)
    return arr[np.isfinite(arr)]


def _num(frame: pd.DataFrame, column: str) -> pd.Series:
    """A column as floats; an absent column is all NaN (tables built from records can
    hold None in object columns, CSV round trips can hold strings)."""
    if column not in frame.columns:
        return pd.Series(np.nan, index=frame.index, dtype=float)
    return pd.to_numeric(frame[column], errors="coerce").astype(float)


def _ok(runs: pd.DataFrame) -> pd.DataFrame:
    if runs is None or runs.empty or "status" not in runs.columns:
        return pd.DataFrame(columns=list(runs.columns) if runs is not None else [])
    return runs[runs["status"] == "ok"]


def _empty(columns: Sequence[str]) -> pd.DataFrame:
    return pd.DataFrame(columns=list(columns))


def _sig(x: float, digits: int = 3) -> str:
    """A number with ``digits`` significant digits, without exponent for 1e-4 <= |x| < 1e15."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "—"
    x = float(x)
    if math.isinf(x):
        return "∞" if x > 0 else "−∞"
    if x == 0:
        return "0"
    magnitude = math.floor(math.log10(abs(x)))
    if magnitude < -4 or magnitude >= 15:
        return f"{x:.{digits - 1}e}"
    rounded = round(x, digits - 1 - magnitude)
    # rounding can carry into the next power of ten (999.6 -> 1000)
    magnitude = math.floor(math.log10(abs(rounded))) if rounded else magnitude
    decimals = max(0, digits - 1 - magnitude)
    return f"{rounded:.{decimals}f}"


def _g(x: float) -> str:
    """Compact number for prose (rule and evidence texts): 3 significant digits, no
    trailing zeros ("2", "0.01", "0.912")."""
    text = _sig(x)
    if "." in text and "e" not in text:
        text = text.rstrip("0").rstrip(".")
    return text


def _bytes_text(x) -> str:
    if x is None or pd.isna(x):
        return "—"
    x = float(x)
    if abs(x) >= 1024**3:
        return f"{_sig(x / 1024**3)} GiB"
    return f"{_sig(x / 1024**2)} MiB"


def _is_bytes_column(name) -> bool:
    name = str(name)
    return name == "bytes" or name.endswith("_bytes")


# ----------------------------------------------------------------------------- bootstrap


def bootstrap_median_ci(
    values, confidence: float = 0.95, n_resamples: int = 2000, seed: int = 0
) -> tuple[float, float, float]:
    """(median, low, high): percentile-bootstrap CI of the median of ``values``.

    NaN/None are dropped first. Fewer than 2 values -> (median, nan, nan): one repeat
    says nothing about run-to-run spread.

    Why the percentile method and not BCa (scipy's default): with the 2-5 repeats a
    benchmark cell has, the bootstrap distribution of the median takes only a handful of
    distinct values. BCa's bias correction is the normal quantile of the fraction of
    resamples below the observed median, and its acceleration comes from a jackknife of
    the median; on such lumpy distributions both are unstable (the interval can jump to
    the sample extremes, come out not containing the median, or be NaN with a
    DegenerateDataWarning when all values are equal). The percentile interval is always
    within [min, max] of the sample and contains the median, which is the honest answer
    for tiny samples: wide.
    """
    x = _clean(values)
    if x.size == 0:
        return (math.nan, math.nan, math.nan)
    median = float(np.median(x))
    if x.size < 2:
        return (median, math.nan, math.nan)
    if np.all(x == x[0]):
        return (median, median, median)
    from scipy import stats as _scipy_stats  # ~1 s to import: only where a CI is computed

    result = _scipy_stats.bootstrap(
        (x,),
        np.median,
        n_resamples=n_resamples,
        vectorized=True,
        axis=-1,
        confidence_level=confidence,
        method="percentile",
        rng=np.random.default_rng(seed),
    )
    ci = result.confidence_interval
    return (median, float(ci.low), float(ci.high))


def _ratio_of_medians(num, den, axis=-1):
    return np.median(num, axis=axis) / np.median(den, axis=axis)


def bootstrap_ratio_ci(
    numerator_values,
    denominator_values,
    confidence: float = 0.95,
    n_resamples: int = 2000,
    seed: int = 0,
) -> tuple[float, float, float]:
    """(median(num) / median(den), low, high): percentile-bootstrap CI of the ratio of
    medians, the two samples resampled independently (``paired=False``: repeat i of one
    device has nothing to do with repeat i of the other). Percentile method for the
    reason given in :func:`bootstrap_median_ci`. Either sample with fewer than 2 values
    -> (ratio, nan, nan); an empty sample or a zero denominator median -> ratio nan."""
    num = _clean(numerator_values)
    den = _clean(denominator_values)
    if num.size == 0 or den.size == 0:
        return (math.nan, math.nan, math.nan)
    den_median = float(np.median(den))
    if den_median == 0:
        return (math.nan, math.nan, math.nan)
    ratio = float(np.median(num)) / den_median
    if num.size < 2 or den.size < 2:
        return (ratio, math.nan, math.nan)
    if np.all(num == num[0]) and np.all(den == den[0]):
        return (ratio, ratio, ratio)
    from scipy import stats as _scipy_stats

    with np.errstate(divide="ignore", invalid="ignore"):
        result = _scipy_stats.bootstrap(
            (num, den),
            _ratio_of_medians,
            n_resamples=n_resamples,
            vectorized=True,
            paired=False,
            axis=-1,
            confidence_level=confidence,
            method="percentile",
            rng=np.random.default_rng(seed),
        )
    ci = result.confidence_interval
    return (ratio, float(ci.low), float(ci.high))


# ----------------------------------------------------------------------------- speedup


def speedup_table(
    runs: pd.DataFrame,
    baseline: str | None,
    value: str = "samples_per_s",
    confidence: float = 0.95,
    n_resamples: int = 2000,
    seed: int = 0,
) -> pd.DataFrame:
    """One row per workload x batch size x device over ok rows where ``value`` is
    present (training workloads): n, median and its CI, the baseline device's n and
    median at the same workload and batch size, the speedup (ratio of medians) and its
    CI, and a verdict:

    * ``baseline``: this is the baseline device;
    * ``no baseline``: the baseline has no ok value at this workload and batch size;
    * ``too few repeats``: fewer than 2 values on either side (no CI);
    * ``faster``: the speedup CI's low end > 1; ``slower``: its high end < 1;
    * ``no clear speedup``: the CI contains 1.

    ``value="eval_samples_per_s"`` gives the eval-speed table.
    """
    if runs is None or runs.empty or value not in runs.columns:
        return _empty(SPEEDUP_COLUMNS)
    ok = _ok(runs).copy()
    ok["_v"] = _num(ok, value)
    ok = ok[ok["_v"].notna()]
    if ok.empty:
        return _empty(SPEEDUP_COLUMNS)
    samples = {key: g["_v"].to_numpy(float) for key, g in ok.groupby(KEYS, sort=True)}
    rows = []
    for (workload, device, batch_size), vals in samples.items():
        median, low, high = bootstrap_median_ci(vals, confidence, n_resamples, seed)
        base = samples.get((workload, baseline, batch_size)) if baseline is not None else None
        row = {
            "workload": workload,
            "batch_size": batch_size,
            "device": device,
            "n": len(vals),
            "median": median,
            "ci_low": low,
            "ci_high": high,
            "baseline_n": len(base) if base is not None else 0,
            "baseline_median": float(np.median(base)) if base is not None else math.nan,
            "speedup": math.nan,
            "speedup_ci_low": math.nan,
            "speedup_ci_high": math.nan,
        }
        if device == baseline:
            row["speedup"] = 1.0  # by definition; a CI of the baseline against itself means nothing
        elif base is not None:
            ratio, rlow, rhigh = bootstrap_ratio_ci(vals, base, confidence, n_resamples, seed)
            row.update(speedup=ratio, speedup_ci_low=rlow, speedup_ci_high=rhigh)
        row["verdict"] = _verdict(row, device == baseline)
        rows.append(row)
    table = pd.DataFrame(rows, columns=SPEEDUP_COLUMNS)
    return table.sort_values(["workload", "batch_size", "device"]).reset_index(drop=True)


def _verdict(row: dict, is_baseline: bool) -> str:
    if is_baseline:
        return VERDICT_BASELINE
    if row["baseline_n"] == 0:
        return VERDICT_NO_BASELINE
    if row["n"] < 2 or row["baseline_n"] < 2:
        return VERDICT_FEW
    low, high = row["speedup_ci_low"], row["speedup_ci_high"]
    if low > 1:
        return VERDICT_FASTER
    if high < 1:
        return VERDICT_SLOWER
    return VERDICT_UNCLEAR


# ----------------------------------------------------------------------------- stability


def _class_summary(counts: pd.Series) -> str:
    return ", ".join(f"{cls} ×{int(n)}" for cls, n in counts.items() if n)


def _epoch_spread(epochs: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    """epoch_time_cv and slowest_to_fastest per workload x device (see stability_table)."""
    columns = ["workload", "device", "epoch_time_cv", "slowest_to_fastest"]
    needed = {"workload", "device", "batch_size", "rep", "timed_seconds"}
    if epochs is None or epochs.empty or not needed <= set(epochs.columns):
        return _empty(columns)
    ep = epochs[list(needed)].copy()
    ep["timed_seconds"] = _num(ep, "timed_seconds")
    ep = ep[ep["timed_seconds"].notna()]
    # only epochs of ok records (epoch_rows already guarantees it; a hand-made table may not)
    ok_keys = _ok(runs)[KEYS + ["rep"]].drop_duplicates()
    ep = ep.merge(ok_keys, on=KEYS + ["rep"], how="inner")
    if ep.empty:
        return _empty(columns)
    per_bs = []
    for (workload, device, batch_size), g in ep.groupby(KEYS, sort=True):
        t = g["timed_seconds"].to_numpy(float)
        mean = t.mean()
        cv = float(np.std(t, ddof=1) / mean) if t.size >= 2 and mean > 0 else math.nan
        rep_medians = g.groupby("rep")["timed_seconds"].median()
        spread = (
            float(rep_medians.max() / rep_medians.min())
            if len(rep_medians) >= 2 and rep_medians.min() > 0
            else math.nan
        )
        per_bs.append((workload, device, batch_size, cv, spread))
    frame = pd.DataFrame(per_bs, columns=KEYS + ["epoch_time_cv", "slowest_to_fastest"])
    # median over batch sizes, skipping batch sizes where the quantity is undefined
    return (
        frame.groupby(["workload", "device"], sort=True)[["epoch_time_cv", "slowest_to_fastest"]]
        .median()
        .reset_index()
    )


def stability_table(runs: pd.DataFrame, epochs: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per workload x device: how often the runs failed and how steady the epoch times were.

    Columns: workload, device, cells (records), attempts (sum over records), ok_cells,
    failed_cells, unavailable_cells, failed_by_class (e.g. "oom ×1, signal ×2", counted
    over failed records; a failed record without a class counts as "unknown"), one integer
    column ``failed_<class>`` per class that occurs anywhere in the table, failed_attempts
    (sum: an ok cell that needed a retry counts here), epoch_time_cv, slowest_to_fastest,
    unstable, note.

    * epoch_time_cv: for each batch size, std (ddof=1) / mean of ``timed_seconds`` over
      all epochs and all repeats of ok cells — so it mixes epoch-to-epoch jitter within a
      run with run-to-run differences; then the median across batch sizes (batch sizes
      differ in epoch time by construction, so they are not pooled). NaN with fewer than
      2 epochs.
    * slowest_to_fastest: for each batch size, the median epoch time of each repeat, then
      slowest / fastest repeat; then the median across batch sizes. NaN with fewer than 2
      repeats (1.0 would claim a stability nobody measured).
    * unstable: True when any attempt failed (failed_attempts > 0 or failed_cells > 0).
    * A device whose records are all ``unavailable``: cells and unavailable_cells are
      counted, every other number is NA, unstable is False and note is "unavailable".
    """
    if runs is None or runs.empty:
        return _empty(STABILITY_BASE_COLUMNS + STABILITY_TAIL_COLUMNS)
    runs = runs.copy()
    runs["_attempts"] = _num(runs, "attempts")
    runs["_failed_attempts"] = _num(runs, "failed_attempts")
    failed_class = (
        runs["error_class"].where(runs["error_class"].notna(), "unknown")
        if "error_class" in runs.columns
        else pd.Series("unknown", index=runs.index)
    )
    runs["_class"] = failed_class.where(runs["status"] == "failed")
    classes = sorted(runs["_class"].dropna().unique())
    spread = _epoch_spread(epochs, runs)

    rows = []
    for (workload, device), g in runs.groupby(["workload", "device"], sort=True):
        status = g["status"]
        all_unavailable = bool((status == "unavailable").all())
        row: dict = {
            "workload": workload,
            "device": device,
            "cells": len(g),
            "unavailable_cells": int((status == "unavailable").sum()),
        }
        if all_unavailable:
            row.update(
                attempts=pd.NA,
                ok_cells=pd.NA,
                failed_cells=pd.NA,
                failed_by_class=None,
                failed_attempts=pd.NA,
                epoch_time_cv=math.nan,
                slowest_to_fastest=math.nan,
                unstable=False,
                note="unavailable",
            )
            row.update({f"failed_{cls}": pd.NA for cls in classes})
        else:
            counts = g["_class"].value_counts().reindex(classes, fill_value=0)
            failed_cells = int((status == "failed").sum())
            failed_attempts = int(g["_failed_attempts"].fillna(0).sum())
            match = spread[(spread["workload"] == workload) & (spread["device"] == device)]
            row.update(
                attempts=int(g["_attempts"].fillna(0).sum()),
                ok_cells=int((status == "ok").sum()),
                failed_cells=failed_cells,
                failed_by_class=_class_summary(counts),
                failed_attempts=failed_attempts,
                epoch_time_cv=float(match["epoch_time_cv"].iloc[0]) if len(match) else math.nan,
                slowest_to_fastest=(
                    float(match["slowest_to_fastest"].iloc[0]) if len(match) else math.nan
                ),
                unstable=bool(failed_attempts > 0 or failed_cells > 0),
                note="",
            )
            row.update({f"failed_{cls}": int(counts[cls]) for cls in classes})
        rows.append(row)
    columns = STABILITY_BASE_COLUMNS + [f"failed_{cls}" for cls in classes] + STABILITY_TAIL_COLUMNS
    table = pd.DataFrame(rows, columns=columns)
    int_columns = [
        "cells", "attempts", "ok_cells", "failed_cells", "unavailable_cells", "failed_attempts",
    ] + [f"failed_{cls}" for cls in classes]  # fmt: skip
    for column in int_columns:
        table[column] = table[column].astype("Int64")
    table["unstable"] = table["unstable"].astype(bool)
    return table


# ----------------------------------------------------------------------------- per label


def per_label_table(per_label: pd.DataFrame, baseline: str | None) -> pd.DataFrame:
    """Per workload x device x batch size x label: medians over repeats of precision,
    recall, f1, accuracy and support, n (repeats), the baseline device's median f1 for the
    same workload, batch size and label, and f1_minus_baseline (NaN without a baseline)."""
    needed = {"workload", "device", "batch_size", "label"}
    if per_label is None or per_label.empty or not needed <= set(per_label.columns):
        return _empty(PER_LABEL_COLUMNS)
    frame = per_label.copy()
    for column in ["precision", "recall", "f1", "accuracy", "support"]:
        frame[column] = _num(frame, column)
    keys = KEYS + ["label"]
    table = (
        frame.groupby(keys, sort=True)
        .agg(
            n=("label", "size"),
            precision=("precision", "median"),
            recall=("recall", "median"),
            f1=("f1", "median"),
            accuracy=("accuracy", "median"),
            support=("support", "median"),
        )
        .reset_index()
    )
    base = table[table["device"] == baseline][["workload", "batch_size", "label", "f1"]]
    base = base.rename(columns={"f1": "baseline_f1"})
    table = table.merge(base, on=["workload", "batch_size", "label"], how="left")
    table["f1_minus_baseline"] = table["f1"] - table["baseline_f1"]
    return table[PER_LABEL_COLUMNS]


# ----------------------------------------------------------------------------- parity


def _check(
    value: float, base: float, std: float, sigma: float, floor: float, floor_text: str
) -> tuple[float, float, bool | None, str]:
    """(|diff|, band, pass, text) of one two-sided band check; pass None when not judged."""
    diff = abs(value - base)
    band = max(sigma * std, floor)
    ok = bool(diff <= band)
    sign = "≤" if ok else ">"
    text = (
        f"|{_g(value)} − {_g(base)}| = {_g(diff)} {sign} "
        f"max({_g(sigma)}σ={_g(sigma * std)}, {floor_text})"
    )
    return diff, band, ok, text


def parity_table(
    runs: pd.DataFrame,
    baseline: str | None,
    sigma: float = 2.0,
    metric_floor: float = 0.01,
    loss_rel: float = 0.02,
) -> pd.DataFrame:
    """Does a device train to the same result as the baseline?

    Per workload x device x batch size, for non-baseline devices with ok runs: the
    device's median final_metric is compared with the baseline's median at the same
    workload and batch size; the allowed band is max(sigma · std, metric_floor), std being
    the baseline's sample std (ddof=1) of final_metric over its repeats — i.e. "the
    device lands within the baseline's own run-to-run scatter". The same for final_loss
    with band max(sigma · std, loss_rel · |baseline median|).

    The band is two-sided on |device − baseline|, so whether higher or lower is better
    (accuracy vs error rate, metric vs loss) does not matter: a device that is much
    *better* than the baseline also fails parity, because that too means it did not
    train the same way.

    parity: "pass" when every check that can be made passes, "fail" when one fails,
    "insufficient repeats" when the baseline has fewer than 2 ok repeats (no spread to
    judge against — never a pass), "not comparable" when neither metric nor loss exists
    on both sides. ``rule`` spells out the comparison with the numbers used.
    """
    if runs is None or runs.empty or baseline is None:
        return _empty(PARITY_COLUMNS)
    ok = _ok(runs).copy()
    ok["_metric"] = _num(ok, "final_metric")
    ok["_loss"] = _num(ok, "final_loss")
    ok = ok[ok["_metric"].notna() | ok["_loss"].notna()]
    if ok.empty:
        return _empty(PARITY_COLUMNS)
    groups = dict(iter(ok.groupby(KEYS, sort=True)))
    rows = []
    for (workload, device, batch_size), g in groups.items():
        if device == baseline:
            continue
        b = groups.get((workload, baseline, batch_size))
        bm = b["_metric"].dropna().to_numpy(float) if b is not None else np.array([])
        bl = b["_loss"].dropna().to_numpy(float) if b is not None else np.array([])
        dm = g["_metric"].dropna().to_numpy(float)
        dl = g["_loss"].dropna().to_numpy(float)
        primary = (
            g["primary_metric"].dropna().iloc[0]
            if "primary_metric" in g.columns and g["primary_metric"].notna().any()
            else None
        )
        row = {
            "workload": workload,
            "device": device,
            "batch_size": batch_size,
            "primary_metric": primary,
            "n": len(g),
            "baseline_n": len(b) if b is not None else 0,
            "final_metric": float(np.median(dm)) if dm.size else math.nan,
            "baseline_metric": float(np.median(bm)) if bm.size else math.nan,
            "baseline_metric_std": float(np.std(bm, ddof=1)) if bm.size >= 2 else math.nan,
            "final_loss": float(np.median(dl)) if dl.size else math.nan,
            "baseline_loss": float(np.median(bl)) if bl.size else math.nan,
            "baseline_loss_std": float(np.std(bl, ddof=1)) if bl.size >= 2 else math.nan,
            "metric_diff": math.nan,
            "metric_band": math.nan,
            "metric_pass": None,
            "loss_diff": math.nan,
            "loss_band": math.nan,
            "loss_pass": None,
        }
        texts, verdicts = [], []
        comparable = False
        if dm.size and bm.size:
            comparable = True
            if bm.size >= 2:
                diff, band, passed, text = _check(
                    row["final_metric"],
                    row["baseline_metric"],
                    row["baseline_metric_std"],
                    sigma,
                    metric_floor,
                    _g(metric_floor),
                )
                row.update(metric_diff=diff, metric_band=band, metric_pass=passed)
                texts.append(f"{primary or 'metric'}: {text}")
                verdicts.append(passed)
            else:
                row["metric_diff"] = abs(row["final_metric"] - row["baseline_metric"])
        if dl.size and bl.size:
            comparable = True
            if bl.size >= 2:
                floor = loss_rel * abs(row["baseline_loss"])
                diff, band, passed, text = _check(
                    row["final_loss"],
                    row["baseline_loss"],
                    row["baseline_loss_std"],
                    sigma,
                    floor,
                    f"{_g(100 * loss_rel)}%·{_g(abs(row['baseline_loss']))}={_g(floor)}",
                )
                row.update(loss_diff=diff, loss_band=band, loss_pass=passed)
                texts.append(f"loss: {text}")
                verdicts.append(passed)
            else:
                row["loss_diff"] = abs(row["final_loss"] - row["baseline_loss"])
        n_base = max(bm.size, bl.size)
        if not comparable and n_base >= 2:
            row["parity"] = PARITY_NOT_COMPARABLE
            row["rule"] = "no final metric or loss on both the device and the baseline"
        elif n_base < 2:
            row["parity"] = PARITY_INSUFFICIENT
            row["rule"] = (
                f"baseline {baseline} has {n_base} ok repeat(s) with a final metric/loss; "
                "≥ 2 are needed to estimate its run-to-run spread"
            )
        else:
            row["parity"] = PARITY_PASS if all(verdicts) else PARITY_FAIL
            row["rule"] = "; ".join(texts)
        rows.append(row)
    if not rows:
        return _empty(PARITY_COLUMNS)
    table = pd.DataFrame(rows, columns=PARITY_COLUMNS)
    for column in ["metric_pass", "loss_pass"]:
        table[column] = table[column].astype("boolean")
    return table.reset_index(drop=True)


# ----------------------------------------------------------------------------- memory


def _join_methods(values: pd.Series) -> str | None:
    methods = sorted({str(v) for v in values.dropna() if str(v)})
    return "; ".join(methods) if methods else None


def memory_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Per workload x device x batch size over ok runs: n (ok repeats), medians of
    memory_initial_bytes, memory_peak_bytes and memory_limit_bytes (NaN when the column
    is absent), peak_fraction_of_limit (median peak / limit) and memory_method (the
    distinct methods joined with "; ")."""
    ok = _ok(runs).copy()
    if ok.empty:
        return _empty(MEMORY_COLUMNS)
    for column in ["memory_initial_bytes", "memory_peak_bytes", "memory_limit_bytes"]:
        ok[column] = _num(ok, column)
    if "memory_method" not in ok.columns:
        ok["memory_method"] = None
    table = (
        ok.groupby(KEYS, sort=True)
        .agg(
            n=("status", "size"),
            memory_initial_bytes=("memory_initial_bytes", "median"),
            memory_peak_bytes=("memory_peak_bytes", "median"),
            memory_limit_bytes=("memory_limit_bytes", "median"),
            memory_method=("memory_method", _join_methods),
        )
        .reset_index()
    )
    limit = table["memory_limit_bytes"].where(table["memory_limit_bytes"] > 0)
    table["peak_fraction_of_limit"] = table["memory_peak_bytes"] / limit
    return table[MEMORY_COLUMNS]


# ----------------------------------------------------------------------------- crossover


def _crossover(points: pd.DataFrame, device_faster) -> tuple[int | None, int]:
    """Index into ``points`` (sorted by x) where the final run of device-faster points
    begins, provided that run reaches the largest x; None when the device is not faster
    at the largest x. Also the index of the point whose values are reported."""
    faster = [bool(device_faster(d, b)) for d, b in zip(points["dev"], points["base"], strict=True)]
    if not faster or not faster[-1]:
        return None, len(faster) - 1
    start = len(faster) - 1
    while start > 0 and faster[start - 1]:
        start -= 1
    return start, start


def _crossover_row(kind, workload, device, batch_size, quantity, x_name, points, faster, unit):
    points = points.sort_values("x").reset_index(drop=True)
    start, at = _crossover(points, faster)
    x_values = points["x"].tolist()
    dev, base = float(points["dev"].iloc[at]), float(points["base"].iloc[at])
    numbers = f"{device} {_g(dev)} {unit} vs baseline {_g(base)} {unit} at {x_name} {x_values[at]}"
    if start is None:
        finding = (
            f"not within the measured range ({x_name} ≤ {x_values[-1]}); at the largest: {numbers}"
        )
        crossover = None
    else:
        crossover = x_values[start]
        finding = f"{x_name} ≥ {crossover} ({numbers})"
        if start == 0 and len(x_values) > 1:
            finding += f"; faster at every measured {x_name}, the crossover may lie below"
        elif start == 0:
            finding += f"; only one {x_name} measured"
    return {
        "kind": kind,
        "workload": workload,
        "device": device,
        "batch_size": batch_size,
        "quantity": quantity,
        "crossover": crossover,
        "compared_at": x_values[at],
        "device_value": dev,
        "baseline_value": base,
        "points_compared": len(x_values),
        "finding": finding,
    }


def crossover_table(
    matmul: pd.DataFrame | None, runs: pd.DataFrame | None, baseline: str | None
) -> pd.DataFrame:
    """Where a device starts beating the baseline, from medians over repeats.

    kind "matmul size" (per matmul workload x device x matmul batch size, ``quantity``
    median_s): the smallest n from which the device's median time is below the
    baseline's at that n and at every larger n measured on both. kind "training batch
    size" (per workload x device, ``batch_size`` empty since it is the swept variable,
    ``quantity`` samples_per_s): the smallest batch size from which the device's median
    throughput exceeds the baseline's at that and every larger batch size measured on
    both. A device that is faster at a small size but slower again at a larger one has
    its crossover at the start of the final faster run. ``crossover`` is None and
    ``finding`` says "not within the measured range" when the device is not faster at
    the largest size. ``compared_at``, ``device_value`` and ``baseline_value`` are the
    numbers compared at the crossover (or at the largest size when there is none).
    """
    rows = []
    if baseline is not None and matmul is not None and not matmul.empty:
        mm = matmul.copy()
        mm["median_s"] = _num(mm, "median_s")
        if "workload" not in mm.columns:
            mm["workload"] = "matmul"
        med = (
            mm[mm["median_s"].notna()]
            .groupby(["workload", "device", "batch_size", "n"], sort=True)["median_s"]
            .median()
            .reset_index()
        )
        base = med[med["device"] == baseline].rename(columns={"median_s": "base"})
        base = base.drop(columns="device")
        other = med[med["device"] != baseline].rename(columns={"median_s": "dev"})
        both = other.merge(base, on=["workload", "batch_size", "n"], how="inner")
        both = both.rename(columns={"n": "x"})
        for (workload, device, batch_size), g in both.groupby(
            ["workload", "device", "batch_size"], sort=True
        ):
            rows.append(
                _crossover_row(
                    "matmul size",
                    workload,
                    device,
                    batch_size,
                    "median_s",
                    "n",
                    g,
                    lambda d, b: d < b,
                    "s",
                )  # fmt: skip
            )
    if baseline is not None and runs is not None and not runs.empty:
        ok = _ok(runs).copy()
        ok["_v"] = _num(ok, "samples_per_s")
        ok = ok[ok["_v"].notna()]
        med = ok.groupby(KEYS, sort=True)["_v"].median().reset_index()
        base = med[med["device"] == baseline].rename(columns={"_v": "base"})
        base = base.drop(columns="device")
        other = med[med["device"] != baseline].rename(columns={"_v": "dev"})
        both = other.merge(base, on=["workload", "batch_size"], how="inner")
        both = both.rename(columns={"batch_size": "x"})
        for (workload, device), g in both.groupby(["workload", "device"], sort=True):
            rows.append(
                _crossover_row(
                    "training batch size",
                    workload,
                    device,
                    None,
                    "samples_per_s",
                    "batch size",
                    g,
                    lambda d, b: d > b,
                    "samples/s",
                )  # fmt: skip
            )
    if not rows:
        return _empty(CROSSOVER_COLUMNS)
    table = pd.DataFrame(rows, columns=CROSSOVER_COLUMNS)
    table["crossover"] = table["crossover"].astype("Int64")
    table["batch_size"] = table["batch_size"].astype("Int64")
    return table


# ----------------------------------------------------------------------------- collapse


def collapse_table(runs: pd.DataFrame, threshold: float = 0.8) -> pd.DataFrame:
    """Cells whose throughput collapsed near the memory limit — what MPS does when it
    pages to swap instead of raising OOM.

    Per workload x device x batch size over ok runs with a throughput: flagged when the
    median throughput is lower than at the next smaller measured batch size of the same
    workload and device AND the median peak memory is ≥ threshold x memory_limit_bytes.
    Both conditions are needed: a throughput dip alone is noise or a cache effect, high
    memory alone is just a big batch. Empty (with these columns) when nothing is flagged
    or the limit is unknown (column absent or NaN).
    """
    if runs is None or runs.empty or "memory_limit_bytes" not in runs.columns:
        return _empty(COLLAPSE_COLUMNS)
    ok = _ok(runs).copy()
    ok["_v"] = _num(ok, "samples_per_s")
    ok["_peak"] = _num(ok, "memory_peak_bytes")
    ok["_limit"] = _num(ok, "memory_limit_bytes")
    ok = ok[ok["_v"].notna()]
    if ok.empty:
        return _empty(COLLAPSE_COLUMNS)
    med = ok.groupby(KEYS, sort=True)[["_v", "_peak", "_limit"]].median().reset_index()
    rows = []
    for (workload, device), g in med.groupby(["workload", "device"], sort=True):
        g = g.sort_values("batch_size").reset_index(drop=True)
        for i in range(1, len(g)):
            cur, prev = g.iloc[i], g.iloc[i - 1]
            limit, peak = cur["_limit"], cur["_peak"]
            if not (np.isfinite(limit) and limit > 0 and np.isfinite(peak)):
                continue
            if not (cur["_v"] < prev["_v"] and peak >= threshold * limit):
                continue
            drop = 1.0 - cur["_v"] / prev["_v"]
            evidence = (
                f"throughput fell {_g(100 * drop)}% from {_g(prev['_v'])} samples/s at "
                f"batch size {int(prev['batch_size'])} to {_g(cur['_v'])} samples/s at "
                f"batch size {int(cur['batch_size'])} while peak memory "
                f"{_bytes_text(peak)} was {_g(100 * peak / limit)}% of the "
                f"{_bytes_text(limit)} limit (threshold {_g(100 * threshold)}%)"
            )
            rows.append(
                {
                    "workload": workload,
                    "device": device,
                    "batch_size": int(cur["batch_size"]),
                    "smaller_batch_size": int(prev["batch_size"]),
                    "throughput": float(cur["_v"]),
                    "smaller_throughput": float(prev["_v"]),
                    "drop_fraction": float(drop),
                    "peak_memory_bytes": float(peak),
                    "memory_limit_bytes": float(limit),
                    "evidence": evidence,
                }
            )
    if not rows:
        return _empty(COLLAPSE_COLUMNS)
    return pd.DataFrame(rows, columns=COLLAPSE_COLUMNS)


# ----------------------------------------------------------------------------- output


def _cell_text(value, is_bytes: bool) -> str:
    if value is None or value is pd.NA:
        return "—"
    if isinstance(value, (bool, np.bool_)):
        return "yes" if value else "no"
    if isinstance(value, (int, np.integer)):
        return _bytes_text(value) if is_bytes else str(int(value))
    if isinstance(value, (float, np.floating)):
        if math.isnan(value):
            return "—"
        if is_bytes:
            return _bytes_text(value)
        return _sig(value)
    text = str(value)
    return text.replace("|", "\\|").replace("\n", " ") if text else ""


def to_markdown(frame: pd.DataFrame) -> str:
    """A Markdown (pipe) table: floats with 3 significant digits, ``*_bytes`` columns in
    MiB/GiB, booleans as yes/no, missing values as "—". The numbers in the CSV stay
    unrounded; this is for reading."""
    if frame is None or frame.columns.empty:
        return "_(no rows)_"
    text = pd.DataFrame(
        {
            column: [_cell_text(v, _is_bytes_column(column)) for v in frame[column].tolist()]
            for column in frame.columns
        },
        columns=frame.columns,
    )
    if text.empty:
        return (
            "| "
            + " | ".join(map(str, frame.columns))
            + " |\n"
            + ("|" + "|".join("---" for _ in frame.columns) + "|")
        )
    return text.to_markdown(index=False, disable_numparse=True)


def write_table(
    frame: pd.DataFrame, csv_path: str | os.PathLike, md_path: str | os.PathLike
) -> None:
    """Write ``frame`` as CSV (full precision) and as Markdown (:func:`to_markdown`),
    each atomically (a reader sees the old file or the whole new one)."""
    atomic_write_text(csv_path, frame.to_csv(index=False))
    atomic_write_text(md_path, to_markdown(frame) + "\n")
