"""Training loss per epoch: the ``epoch_summary`` table's median with its min–max band."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from trainbench.analysis.figures import data
from trainbench.analysis.figures.style import (
    LEGEND_W,
    Style,
    device_order,
    finish_with_legend,
    line_handle,
    line_style,
    message,
    new_figure,
    render,
    wrap,
)

MAX_BATCH_SIZES = 4  # columns per workload
EMPTY = "no successful runs of a training workload with epochs"


def pick_batch_sizes(sizes: Sequence, limit: int = MAX_BATCH_SIZES) -> list[int]:
    """All sizes when few; else the smallest, the largest and evenly spaced ones between."""
    sizes = sorted({int(s) for s in sizes})
    if len(sizes) <= limit:
        return sizes
    picks = {round(k * (len(sizes) - 1) / (limit - 1)) for k in range(limit)}
    return [sizes[i] for i in sorted(picks)]


def _summary(tables: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    frame = data.table(tables, "epoch_summary")
    if not data.has(frame, "workload", "device", "batch_size", "epoch", "train_loss"):
        return pd.DataFrame()
    frame = data.numeric(
        frame, "batch_size", "epoch", "n", "train_loss", "train_loss_min", "train_loss_max"
    )
    frame = frame[np.isfinite(frame["train_loss"]) & frame["epoch"].notna()]
    frame = frame[frame["batch_size"].notna()].copy()
    frame["workload"] = data.strings(frame, "workload")
    frame["device"] = data.strings(frame, "device")
    frame["dev_label"] = data.device_labels(frame, data.fallback_pairs(tables))
    return frame


def _panel(ax: Axes, cell: pd.DataFrame, st: Style) -> None:
    for label in device_order(cell["dev_label"]):
        rows = cell[cell["dev_label"] == label].sort_values("epoch", kind="stable")
        style_ = line_style(label)
        ax.plot(rows["epoch"], rows["train_loss"], linewidth=1.6, markersize=4, **style_)
        ax.fill_between(
            rows["epoch"], rows["train_loss_min"], rows["train_loss_max"],
            color=style_["color"], alpha=0.2, linewidth=0,
        )  # fmt: skip
    epochs = sorted({int(e) for e in cell["epoch"]})
    if len(epochs) <= 12:
        ax.set_xticks(epochs)
    span = epochs[-1] - epochs[0]
    pad = 0.5 if span == 0 else max(0.08 * span, 0.15)
    ax.set_xlim(epochs[0] - pad, epochs[-1] + pad)
    ax.set_xlabel("epoch")


def _same_y(axes: Sequence[Axes]) -> None:
    """One y range per workload row, so batch sizes compare at a glance."""
    low = min(ax.get_ylim()[0] for ax in axes)
    high = max(ax.get_ylim()[1] for ax in axes)
    for ax in axes:
        ax.set_ylim(low, high)


def _band_note(summary: pd.DataFrame) -> str:
    counts = sorted({int(n) for n in summary["n"] if np.isfinite(n)})
    runs = f" of {' or '.join(map(str, counts))} runs" if counts else " of the runs"
    return f"band: range (min–max){runs}"


def build(tables: Mapping[str, pd.DataFrame], st: Style) -> Figure:
    """The figure, unsaved (tests read its texts)."""
    title = st.title or "Training loss per epoch"
    summary = _summary(tables)
    if summary.empty:
        return message(title, EMPTY, st)
    workloads = data.sorted_str(summary["workload"])
    picked = {
        w: pick_batch_sizes(summary.loc[summary["workload"] == w, "batch_size"]) for w in workloads
    }
    ncols = max(len(v) for v in picked.values())
    fig = new_figure((ncols * 3.5 + LEGEND_W, len(workloads) * 2.9 + 0.5), st)
    axes = fig.subplots(len(workloads), ncols, squeeze=False)
    subsets = []
    for r, workload in enumerate(workloads):
        sub = summary[summary["workload"] == workload]
        for c, size in enumerate(picked[workload]):
            _panel(axes[r][c], sub[sub["batch_size"] == size], st)
            axes[r][c].set_title(f"{workload} · batch {size}", fontsize=10 * st.font_scale)
        axes[r][0].set_ylabel("training loss")
        for c in range(len(picked[workload]), ncols):
            axes[r][c].set_axis_off()
        _same_y(axes[r][: len(picked[workload])])
        n_sizes = len({int(b) for b in sub["batch_size"]})
        if len(picked[workload]) < n_sizes:
            shown = ", ".join(map(str, picked[workload]))
            subsets.append(wrap(f"{workload}: batch sizes {shown} of {n_sizes}", 34))
    notes = ["line: median train loss", _band_note(summary), *subsets]
    handles = [line_handle(x) for x in device_order(summary["dev_label"])]
    return finish_with_legend(fig, handles, notes, title)


def loss_figure(tables: Mapping[str, pd.DataFrame], out_path: str | os.PathLike, **style) -> None:
    """Per workload (rows) and batch size (columns, at most four): ``epoch_summary``'s
    ``train_loss`` per epoch as a line, ``train_loss_min``–``train_loss_max`` as a band
    (``n`` runs in the legend). Style keywords: dpi, font_scale, title."""
    render(out_path, style, lambda st: build(tables, st))
