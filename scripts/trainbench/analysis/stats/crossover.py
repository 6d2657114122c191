"""Crossover: from which size a device stays faster than the baseline, decided by the
interval verdicts (never by medians alone).

``crossover`` — one row per workload × device of a training workload (kind "training
batch size", from the speedup table; batch_size empty: it is the swept variable) and
per workload × device × matmul batch size (kind "matmul size", from matmul_summary):

* quantity: samples_per_s or median_s;
* crossover: the smallest size from which the verdict is ``faster`` at it and at every
  larger measured size (empty when the device is not faster at the largest);
* compared_at: that size, or the largest measured one when there is no crossover;
* device_value, baseline_value: the medians compared there; verdict_at: the verdict
  there; points_compared: the sizes with a verdict row;
* finding: a sentence ("n ≥ 256 (cuda 2.8x cpu, 2.5–3.1x, range of 3 vs 3 runs)",
  "not within the measured range (n ≤ 1024; at 1024: no clear difference)", "no verdict at
  n 1024: cuda has 2 ok repeats; a verdict needs 3").
"""

from __future__ import annotations

import pandas as pd
from trainbench.analysis.stats import frames as fr
from trainbench.analysis.stats.intervals import FASTER, NO_CLEAR, SLOWER
from trainbench.analysis.tables import interval_text, ratio_text

CROSSOVER_COLUMNS = [
    "kind", "workload", "device", "batch_size", "quantity", "crossover", "compared_at",
    "device_value", "baseline_value", "verdict_at", "points_compared", "finding",
]  # fmt: skip


def _finding(points: pd.DataFrame, x_name: str, start: int | None, at: int) -> str:
    row = points.iloc[at]
    x_values = points["x"].tolist()
    if start is not None:
        span = interval_text(row["speedup_low"], row["speedup_high"])
        text = (
            f"{x_name} ≥ {x_values[start]} ({row['device']} {ratio_text(row['speedup'])} "
            f"{row['baseline']}, {span}x, {row['speedup_interval']})"
        )
        if start == 0 and len(x_values) > 1:
            text += f"; faster at every measured {x_name}, the crossover may lie below"
        elif start == 0:
            text += f"; only one {x_name} measured"
        return text
    if row["verdict"] in (SLOWER, NO_CLEAR):
        return (
            f"not within the measured range ({x_name} ≤ {x_values[-1]}; at {x_values[-1]}: "
            f"{row['verdict']}, {interval_text(row['speedup_low'], row['speedup_high'])}x)"
        )
    return f"no verdict at {x_name} {x_values[-1]}: {row['reason']}"


def _crossover_row(kind, key, batch_size, quantity, x_name, points, value, base_value) -> dict:
    points = points.sort_values("x").reset_index(drop=True)
    faster = (points["verdict"] == FASTER).tolist()
    start = None
    if faster and faster[-1]:
        start = len(faster) - 1
        while start > 0 and faster[start - 1]:
            start -= 1
    at = start if start is not None else len(points) - 1
    row = points.iloc[at]
    return {
        "kind": kind, "workload": key[0], "device": key[1], "batch_size": batch_size,
        "quantity": quantity, "crossover": points["x"].iloc[start] if start is not None else pd.NA,
        "compared_at": row["x"], "device_value": row[value], "baseline_value": row[base_value],
        "verdict_at": row["verdict"], "points_compared": len(points),
        "finding": _finding(points, x_name, start, at),
    }  # fmt: skip


def crossover_table(
    speedup: pd.DataFrame | None, matmul_summary: pd.DataFrame | None
) -> pd.DataFrame:
    """The ``crossover`` table from the published ``speedup`` and ``matmul_summary``
    tables; see the module docstring."""
    rows = []
    if matmul_summary is not None and not matmul_summary.empty:
        mm = matmul_summary[matmul_summary["verdict"] != "baseline"]
        mm = mm.assign(x=mm["n"], base_s=mm["median_s"] * mm["speedup"])
        for key, points in mm.groupby(["workload", "device", "batch_size"], sort=True):
            rows.append(
                _crossover_row(
                    "matmul size", key, key[2], "median_s", "n", points, "median_s", "base_s"
                )
            )
    if speedup is not None and not speedup.empty:
        sp = speedup[speedup["verdict"] != "baseline"].assign(x=speedup["batch_size"])
        for key, points in sp.groupby(["workload", "device"], sort=True):
            rows.append(
                _crossover_row(
                    "training batch size",
                    key,
                    pd.NA,
                    "samples_per_s",
                    "batch size",
                    points,
                    "median",
                    "baseline_median",
                )  # fmt: skip
            )
    table = fr.frame(rows, CROSSOVER_COLUMNS)
    for column in ("batch_size", "crossover", "compared_at"):
        table[column] = pd.to_numeric(table[column]).astype("Int64")
    return table
