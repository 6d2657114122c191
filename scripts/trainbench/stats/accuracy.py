"""Accuracy: the ``parity``, ``per_label`` and ``epoch_summary`` tables.

``parity`` — does a device train to the same result as its baseline? One row per
workload × device × batch size for non-baseline devices with ok runs that report a
final metric or loss:

* primary_metric; n, baseline_n: ok repeats of the device and of the baseline;
* final_metric, baseline_metric: medians over repeats; baseline_metric_std: the
  baseline's sample std (ddof=1); metric_diff: |final_metric − baseline_metric|;
  metric_band: max(2 · baseline_metric_std, 0.01); metric_pass: diff ≤ band (empty
  where not judged);
* final_loss … loss_pass: the same for the final training loss, band
  max(2 · std, 2% of |baseline loss|);
* parity: ``pass`` (every check made passes), ``fail`` (one fails), ``identical`` (the
  final metric and loss equal the baseline's exactly in every repeat, matched by rep:
  bit-identical runs prove nothing about the device's numerics), ``insufficient
  data`` (the baseline has fewer than 3 ok repeats with a result: no spread to judge
  against), ``not comparable`` (no metric or loss on both sides);
* rule: the comparison written out with its numbers.

The band is two-sided: a device much *better* than the baseline fails too, since it
did not train the same way.

``per_label`` — per workload × device × batch size × label (multi-label workloads,
at the best epoch): n (repeats), medians of precision, recall, f1, accuracy, support;
baseline_f1 (the baseline's median f1 at the same batch size and label) and
f1_minus_baseline.

``epoch_summary`` — per workload × device × batch size × epoch over the ok repeats:
n (repeats with the epoch), train_loss (median), train_loss_min, train_loss_max,
timed_seconds (median of the epoch's window steps), full_epoch (the epoch is full in
every repeat), samples_per_s and eval_seconds (medians), eval_cold (the cold first
pass, in any repeat), then the median of every eval_<metric> and train_<metric>
column of epochs.csv (same names).

``task`` — the seed-000 "aggregate metrics", per workload × device × batch size over
the ok repeats: n, primary_metric, best_metric (median of each run's best-epoch
value) with best_low, best_high and interval (as every interval here: the range
below 5 runs, a bootstrap CI from 5), final_metric, micro_f1, macro_f1 and
best_epoch (medians).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..tables import compact
from . import frames as fr
from .intervals import summarize

MIN_BASELINE_REPEATS = 3
SIGMA = 2.0
METRIC_FLOOR = 0.01
LOSS_REL = 0.02

PASS, FAIL, IDENTICAL = "pass", "fail", "identical"
INSUFFICIENT, NOT_COMPARABLE = "insufficient data", "not comparable"

TASK_COLUMNS = [
    "workload", "device", "batch_size", "n", "primary_metric", "best_metric", "best_low",
    "best_high", "interval", "final_metric", "micro_f1", "macro_f1", "best_epoch",
]  # fmt: skip
PER_LABEL_COLUMNS = [
    "workload", "device", "batch_size", "label", "n", "precision", "recall", "f1", "accuracy",
    "support", "baseline_f1", "f1_minus_baseline",
]  # fmt: skip
PARITY_COLUMNS = [
    "workload", "device", "batch_size", "primary_metric", "n", "baseline_n",
    "final_metric", "baseline_metric", "baseline_metric_std", "metric_diff", "metric_band",
    "metric_pass", "final_loss", "baseline_loss", "baseline_loss_std", "loss_diff", "loss_band",
    "loss_pass", "parity", "rule",
]  # fmt: skip
EPOCH_COLUMNS = [
    "workload", "device", "batch_size", "epoch", "n", "train_loss", "train_loss_min",
    "train_loss_max", "timed_seconds", "full_epoch", "samples_per_s", "eval_seconds", "eval_cold",
]  # fmt: skip
_NOT_METRICS = {"eval_seconds", "eval_cold", "train_loss", "train_seconds"}


# ----------------------------------------------------------------------------- parity


def _check(value, base, std, floor, floor_text) -> tuple[float, float, bool, str]:
    """(|diff|, band, pass, text) of one two-sided band check."""
    diff = abs(value - base)
    band = max(SIGMA * std, floor)
    passed = bool(diff <= band)
    sign = "≤" if passed else ">"
    text = (
        f"|{compact(value)} − {compact(base)}| = {compact(diff)} {sign} "
        f"max({compact(SIGMA)}σ={compact(SIGMA * std)}, {floor_text})"
    )
    return diff, band, passed, text


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


def _median(x: np.ndarray) -> float:
    return float(np.median(x)) if x.size else np.nan


def _std(x: np.ndarray) -> float:
    return float(np.std(x, ddof=1)) if x.size >= 2 else np.nan


def _finite(x: np.ndarray) -> np.ndarray:
    return x[np.isfinite(x)]


def _insufficient(base, n_base: int) -> str:
    return (
        f"baseline {base} has {fr.plural(n_base, 'ok repeat')} with a final metric/loss; "
        f"≥ {MIN_BASELINE_REPEATS} are needed to estimate its run-to-run spread"
    )


def _checks(row: dict, primary, judged: bool, dm, bm, dl, bl) -> tuple[list, list]:
    """Fill the diff/band/pass columns; (texts, passes) of the checks made."""
    texts, passes = [], []
    if dm.size and bm.size:
        row["metric_diff"] = abs(row["final_metric"] - row["baseline_metric"])
        if judged:
            _, band, ok, text = _check(
                row["final_metric"], row["baseline_metric"], row["baseline_metric_std"],
                METRIC_FLOOR, compact(METRIC_FLOOR),
            )  # fmt: skip
            row.update(metric_band=band, metric_pass=ok)
            texts.append(f"{primary or 'metric'}: {text}")
            passes.append(ok)
    if dl.size and bl.size:
        row["loss_diff"] = abs(row["final_loss"] - row["baseline_loss"])
        if judged:
            base_loss = abs(row["baseline_loss"])
            floor = LOSS_REL * base_loss
            floor_text = f"{compact(100 * LOSS_REL)}%·{compact(base_loss)}={compact(floor)}"
            _, band, ok, text = _check(
                row["final_loss"], row["baseline_loss"], row["baseline_loss_std"], floor, floor_text
            )
            row.update(loss_band=band, loss_pass=ok)
            texts.append(f"loss: {text}")
            passes.append(ok)
    return texts, passes


def _parity_row(key, dev: dict, ref: dict | None, base: str | None) -> dict:
    workload, batch_size, device = key
    empty = np.empty(0)
    dm, dl = _finite(dev["metric"]), _finite(dev["loss"])
    bm = _finite(ref["metric"]) if ref else empty
    bl = _finite(ref["loss"]) if ref else empty
    primary = fr.distinct_text(dev["primary"]) or None
    row = {
        "workload": workload, "device": device, "batch_size": batch_size,
        "primary_metric": primary, "n": len(dev["rep"]), "baseline_n": len(ref["rep"]) if ref else 0,
        "final_metric": _median(dm), "baseline_metric": _median(bm), "baseline_metric_std": _std(bm),
        "metric_diff": np.nan, "metric_band": np.nan, "metric_pass": pd.NA,
        "final_loss": _median(dl), "baseline_loss": _median(bl), "baseline_loss_std": _std(bl),
        "loss_diff": np.nan, "loss_band": np.nan, "loss_pass": pd.NA,
    }  # fmt: skip
    n_base = max(bm.size, bl.size)
    judged = n_base >= MIN_BASELINE_REPEATS
    texts, passes = _checks(row, primary, judged, dm, bm, dl, bl)
    if not ((dm.size and bm.size) or (dl.size and bl.size)):
        row["parity"] = NOT_COMPARABLE if judged else INSUFFICIENT
        row["rule"] = (
            "no final metric or loss on both the device and the baseline"
            if judged
            else _insufficient(base, n_base)
        )
    elif ref and _identical(dev, ref):
        row["parity"] = IDENTICAL
        row["rule"] = (
            f"final metric and loss equal {base}'s exactly in all {fr.plural(len(dev['rep']), 'repeat')} "
            "(bit-identical: proves nothing about the device's numerics)"
        )
    elif not judged:
        row["parity"], row["rule"] = INSUFFICIENT, _insufficient(base, n_base)
    else:
        row["parity"] = PASS if all(passes) else FAIL
        row["rule"] = "; ".join(texts)
    return row


def parity_table(runs: pd.DataFrame, baselines: fr.Baselines) -> pd.DataFrame:
    """The ``parity`` table; see the module docstring."""
    runs = fr.prepare_runs(runs)
    ok = fr.ok_rows(runs)
    metric, loss = fr.num(ok, "final_metric"), fr.num(ok, "final_loss")
    ok = fr.select(ok, ["workload", "batch_size", "device", "rep"])[metric.notna() | loss.notna()]
    if ok.empty:
        return fr.empty(PARITY_COLUMNS)
    arrays = {
        "rep": ok["rep"].to_numpy(), "metric": metric[ok.index].to_numpy(),
        "loss": loss[ok.index].to_numpy(), "primary": fr.text(runs, "primary_metric")[ok.index].to_numpy(),
    }  # fmt: skip
    cells = {
        key: {name: values[idx] for name, values in arrays.items()}
        for key, idx in fr.groups(ok, ["workload", "batch_size", "device"]).items()
    }
    rows = []
    for key, dev in cells.items():
        base = fr.baseline_of(baselines, key[0])
        if key[2] != base:
            rows.append(_parity_row(key, dev, cells.get((key[0], key[1], base)), base))
    table = fr.frame(rows, PARITY_COLUMNS)
    for column in ("metric_pass", "loss_pass"):
        table[column] = table[column].astype("boolean")
    return table.sort_values(["workload", "device", "batch_size"], ignore_index=True)


# ----------------------------------------------------------------------------- per label


def per_label_table(per_label: pd.DataFrame | None, baselines: fr.Baselines) -> pd.DataFrame:
    """The ``per_label`` table; see the module docstring."""
    if per_label is None or per_label.empty or "label" not in per_label.columns:
        return fr.empty(PER_LABEL_COLUMNS)
    data = fr.prepare(per_label)
    for column in ("precision", "recall", "f1", "accuracy", "support"):
        data[column] = fr.num(data, column)
    keys = [*fr.KEYS, "label"]
    table = (
        data.groupby(keys, sort=True)
        .agg(
            n=("label", "size"),
            precision=("precision", "median"),
            recall=("recall", "median"),
            f1=("f1", "median"),
            accuracy=("accuracy", "median"),
            support=("support", "median"),
        )  # fmt: skip
        .reset_index()
    )
    base = table["workload"].map(lambda w: fr.baseline_of(baselines, w))
    ref = table[table["device"] == base][["workload", "batch_size", "label", "f1"]]
    table = table.merge(ref.rename(columns={"f1": "baseline_f1"}), how="left",
                        on=["workload", "batch_size", "label"])  # fmt: skip
    table["f1_minus_baseline"] = table["f1"] - table["baseline_f1"]
    return table[PER_LABEL_COLUMNS]


# ----------------------------------------------------------------------------- epochs


def epoch_summary_table(epochs: pd.DataFrame | None) -> pd.DataFrame:
    """The ``epoch_summary`` table; see the module docstring."""
    if epochs is None or epochs.empty or "epoch" not in epochs.columns:
        return fr.empty(EPOCH_COLUMNS)
    data = fr.prepare(epochs)
    metrics = [
        c for c in data.columns
        if c.startswith(("eval_", "train_")) and c not in _NOT_METRICS
    ]  # fmt: skip
    for column in ["train_loss", "timed_seconds", "samples_per_s", "eval_seconds", *metrics]:
        data[column] = fr.num(data, column)
    data["full_epoch"] = fr.flag(data, "full_epoch")
    data["eval_cold"] = fr.flag(data, "eval_cold")
    aggs = {
        "n": ("epoch", "size"), "train_loss": ("train_loss", "median"),
        "train_loss_min": ("train_loss", "min"), "train_loss_max": ("train_loss", "max"),
        "timed_seconds": ("timed_seconds", "median"), "full_epoch": ("full_epoch", "all"),
        "samples_per_s": ("samples_per_s", "median"), "eval_seconds": ("eval_seconds", "median"),
        "eval_cold": ("eval_cold", "any"),
    }  # fmt: skip
    aggs.update({m: (m, "median") for m in metrics})
    table = data.groupby([*fr.KEYS, "epoch"], sort=True).agg(**aggs).reset_index()
    return table[EPOCH_COLUMNS + metrics]


def task_table(runs: pd.DataFrame, workloads) -> pd.DataFrame:
    """The ``task`` table; see the module docstring."""
    data = fr.ok_rows(fr.prepare_runs(runs))
    data = data[data["workload"].isin(list(workloads))]
    for column in ("best_metric", "final_metric", "micro_f1", "macro_f1", "best_epoch"):
        data[column] = fr.num(data, column)
    data = data[data["best_metric"].notna() | data["final_metric"].notna()]
    rows = []
    for (workload, device, batch_size), group in data.groupby(fr.KEYS, sort=True):
        best = summarize(group["best_metric"].dropna().to_numpy(float))
        medians = group[["final_metric", "micro_f1", "macro_f1", "best_epoch"]].median()
        rows.append(
            {
                "workload": workload,
                "device": device,
                "batch_size": batch_size,
                "n": len(group),
                "primary_metric": fr.text(group, "primary_metric").iloc[0],
                "best_metric": best.estimate,
                "best_low": best.low,
                "best_high": best.high,
                "interval": best.kind,
                **medians.to_dict(),
            }
        )
    return fr.frame(rows, TASK_COLUMNS)
