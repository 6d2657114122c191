"""Where a step's time goes, from the ``step_breakdown`` table: one panel per workload,
one stacked bar per device × batch size, of the timed window's median step: data wait,
host issue (not on the CPU, where issue and computation are one) and device busy (on the
CPU: the share of the cores busy during the step), each a median share over repeats; the
label (launch-bound, input-bound, device-bound, mixed) over each bar."""

from __future__ import annotations

import os
from collections.abc import Mapping

import numpy as np
import pandas as pd
from trainbench.analysis.figures import data
from trainbench.analysis.figures.style import (
    Style,
    device_order,
    grid,
    hide_unused,
    message,
    new_figure,
    render,
)

TITLE = "Where a step's time goes"
PARTS = (
    ("data_wait_share", "data wait", "#8da0cb"),
    ("host_issue_share", "host issue", "#fc8d62"),
    ("device_busy", "device busy", "#66c2a5"),
)
EMPTY = "no training cell with a diagnostic pass (timing.step_breakdown)"


def _rows(tables: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    frame = data.table(tables, "step_breakdown")
    if not data.has(frame, "workload", "device", "batch_size", "bound"):
        return pd.DataFrame()
    frame = data.numeric(frame, "batch_size", *(p[0] for p in PARTS))
    for column in ("workload", "device", "bound"):
        frame[column] = data.strings(frame, column)
    shares = frame[[p[0] for p in PARTS]]
    return frame[shares.notna().any(axis=1) & frame["batch_size"].notna()]


def build(tables: Mapping[str, pd.DataFrame], st: Style):
    rows = _rows(tables)
    if rows.empty:
        return message(TITLE, EMPTY, st)
    workloads = data.sorted_str(rows["workload"])
    ncols, nrows = grid(len(workloads), 2)
    fig = new_figure((6.0 * ncols, 3.6 * nrows), st)
    axes = np.atleast_1d(fig.subplots(nrows, ncols, squeeze=False)).ravel()
    for ax, workload in zip(axes, workloads, strict=False):
        g = rows[rows["workload"] == workload]
        order = {d: i for i, d in enumerate(device_order(g["device"].unique()))}
        g = g.assign(_d=g["device"].map(order)).sort_values(["_d", "batch_size"])
        labels = [f"{d}\nbs {int(b)}" for d, b in zip(g["device"], g["batch_size"], strict=True)]
        x = np.arange(len(g))
        bottom = np.zeros(len(g))
        for column, name, color in PARTS:
            values = np.nan_to_num(g[column].to_numpy(dtype=float), nan=0.0)
            ax.bar(x, values, 0.6, bottom=bottom, color=color, label=name)
            bottom += values
        for xi, top, bound in zip(x, bottom, g["bound"], strict=True):
            ax.text(xi, top + 0.03, bound, ha="center", va="bottom", fontsize=8)
        ax.set_xticks(x, labels, fontsize=8)
        ax.set_ylim(0, max(1.25, float(bottom.max()) + 0.25))
        ax.set_ylabel("share of the median step")
        ax.set_title(workload)
    hide_unused(list(axes), len(workloads))
    handles, names = axes[0].get_legend_handles_labels()
    fig.legend(handles, names, loc="outside lower center", ncols=len(PARTS), frameon=False)
    fig.suptitle(st.title or TITLE)
    return fig


def step_breakdown_figure(
    tables: Mapping[str, pd.DataFrame], out_path: str | os.PathLike, **style
) -> None:
    """Stacked shares per device × batch size, one panel per workload, each bar labelled
    with its bound. Style keywords: dpi, font_scale, title."""
    render(out_path, style, lambda st: build(tables, st))
