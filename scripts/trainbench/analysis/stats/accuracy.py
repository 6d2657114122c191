"""Accuracy: the ``parity``, ``per_label`` and ``epoch_summary`` tables.

``parity`` — does a device train to the same result as its baseline, within a
stated margin? An equivalence test per workload; the table, its rule and columns are
in :mod:`.parity` (re-exported here).

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

import pandas as pd
from trainbench.analysis.stats import frames as fr
from trainbench.analysis.stats.intervals import summarize
from trainbench.analysis.stats.parity import PARITY_COLUMNS, parity_table  # noqa: F401  (re-exported)

TASK_COLUMNS = [
    "workload", "device", "batch_size", "n", "primary_metric", "best_metric", "best_low",
    "best_high", "interval", "final_metric", "micro_f1", "macro_f1", "best_epoch",
]  # fmt: skip
PER_LABEL_COLUMNS = [
    "workload", "device", "batch_size", "label", "n", "precision", "recall", "f1", "accuracy",
    "support", "baseline_f1", "f1_minus_baseline",
]  # fmt: skip
EPOCH_COLUMNS = [
    "workload", "device", "batch_size", "epoch", "n", "train_loss", "train_loss_min",
    "train_loss_max", "timed_seconds", "full_epoch", "samples_per_s", "eval_seconds", "eval_cold",
]  # fmt: skip
_NOT_METRICS = {"eval_seconds", "eval_cold", "train_loss", "train_seconds"}


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
        if c.startswith(("eval_", "train_", "memory_")) and c not in _NOT_METRICS
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
