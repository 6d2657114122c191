"""Timed epoch seconds: every full epoch of every run (``epochs`` table) as a dot and the
published median of each epoch (``epoch_summary`` table) as a tick, per device and
batch size. No box: a box would compute quartiles here."""

from __future__ import annotations

import os
from collections.abc import Mapping

import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from trainbench.analysis.figures import data
from trainbench.analysis.figures.style import (
    LEGEND_W,
    Style,
    device_color,
    device_order,
    finish_with_legend,
    hide_unused,
    line_style,
    message,
    new_figure,
    patch_handle,
    render,
    value_axis,
)

MAX_ROW_W = 15.0  # inches of panels side by side before wrapping
SLOT_W = 0.42  # inches per device x batch size
KEYS = ("workload", "device", "batch_size", "epoch")
EMPTY = "no full epochs of a training workload to plot"


def _frame(tables: Mapping[str, pd.DataFrame], name: str) -> pd.DataFrame:
    """Full epochs with a positive ``timed_seconds``, labelled by device."""
    frame = data.table(tables, name)
    if not data.has(frame, *KEYS, "timed_seconds", "full_epoch"):
        return pd.DataFrame(columns=[*KEYS, "rep", "timed_seconds", "dev_label"])
    frame = data.numeric(frame, "batch_size", "epoch", "rep", "timed_seconds")
    frame = frame[data.truthy(frame["full_epoch"]) & (frame["timed_seconds"] > 0)].copy()
    frame = frame[frame["batch_size"].notna() & frame["epoch"].notna()]
    frame["workload"] = data.strings(frame, "workload")
    frame["device"] = data.strings(frame, "device")
    frame["dev_label"] = data.device_labels(frame, data.fallback_pairs(tables))
    return frame


def _slots(dots: pd.DataFrame, ticks: pd.DataFrame) -> tuple[list[int], list[str], list[float]]:
    """Batch sizes, device labels and epochs drawn in one panel."""
    columns = ["batch_size", "dev_label", "epoch"]
    both = pd.concat([dots[columns], ticks[columns]])
    sizes = sorted({int(b) for b in both["batch_size"]})
    labels = device_order(both["dev_label"])
    epochs = sorted(set(both["epoch"]))
    return sizes, labels, epochs


def _x(i: int, j: int, n_labels: int, k: int, n_epochs: int) -> tuple[float, float]:
    """Centre of epoch ``k`` in device slot ``j`` of batch size ``i``, and its width."""
    slot = 0.8 / max(n_labels, 1)
    step = slot * 0.8 / max(n_epochs, 1)
    return i - 0.4 + slot * (j + 0.1) + step * (k + 0.5), step


def _panel(ax: Axes, dots: pd.DataFrame, ticks: pd.DataFrame, st: Style) -> None:
    sizes, labels, epochs = _slots(dots, ticks)
    reps = sorted(set(dots["rep"].dropna())) if "rep" in dots else []
    for i, size in enumerate(sizes):
        for j, label in enumerate(labels):
            color, marker = device_color(label), line_style(label)["marker"]
            for k, epoch in enumerate(epochs):
                x, step = _x(i, j, len(labels), k, len(epochs))
                cell = (dots["batch_size"] == size) & (dots["dev_label"] == label)
                here = dots[cell & (dots["epoch"] == epoch)]
                tick = ticks[
                    (ticks["batch_size"] == size)
                    & (ticks["dev_label"] == label)
                    & (ticks["epoch"] == epoch)
                ]
                for value in tick["timed_seconds"]:
                    ax.hlines(
                        value, x - step * 0.45, x + step * 0.45, color="black", lw=1.6, zorder=5
                    )
                if here.empty:
                    continue
                # each repeat a little apart, in a fixed order, so equal values stay visible
                offsets = [
                    (reps.index(r) - (len(reps) - 1) / 2) * step * 0.5 / max(len(reps), 1)
                    if r in reps else 0.0
                    for r in here["rep"]
                ]  # fmt: skip
                ax.scatter(
                    [x + o for o in offsets], here["timed_seconds"], s=11, color=color,
                    marker=marker, edgecolors="black", linewidths=0.3, zorder=4,
                )  # fmt: skip
    value_axis(ax, [*dots["timed_seconds"], *ticks["timed_seconds"]], "timed epoch (s)")
    ax.set_xticks(range(len(sizes)), [str(s) for s in sizes])
    ax.set_xlim(-0.6, len(sizes) - 0.4)
    ax.grid(axis="x", visible=False)
    ax.set_xlabel("batch size")


def _widths(workloads: list[str], dots: pd.DataFrame, ticks: pd.DataFrame) -> list[float]:
    widths = []
    for workload in workloads:
        sizes, labels, _ = _slots(
            dots[dots["workload"] == workload], ticks[ticks["workload"] == workload]
        )
        widths.append(min(max(3.2, SLOT_W * len(sizes) * len(labels)) + 0.7, 7.5))
    return widths


def _row_width(widths: list[float], cols: int) -> float:
    """The widest row of panels when ``cols`` panels share a row."""
    return max(sum(widths[i : i + cols]) for i in range(0, len(widths), cols))


def build(tables: Mapping[str, pd.DataFrame], st: Style) -> Figure:
    """The figure, unsaved (tests read its texts)."""
    title = st.title or "Timed epoch duration (full epochs)"
    dots, ticks = _frame(tables, "epochs"), _frame(tables, "epoch_summary")
    if dots.empty and ticks.empty:
        return message(title, EMPTY, st)
    workloads = data.sorted_str([*dots["workload"], *ticks["workload"]])
    widths = _widths(workloads, dots, ticks)
    cols = len(widths)
    while cols > 1 and _row_width(widths, cols) > MAX_ROW_W:
        cols -= 1
    rows = -(-len(widths) // cols)
    row_w = _row_width(widths, cols)
    fig = new_figure((row_w + LEGEND_W, rows * 3.5 + 0.5), st)
    ratios = widths if rows == 1 else None
    axes = fig.subplots(rows, cols, squeeze=False, width_ratios=ratios).ravel()
    for ax, workload in zip(axes, workloads, strict=False):
        _panel(ax, dots[dots["workload"] == workload], ticks[ticks["workload"] == workload], st)
        ax.set_title(workload)
    hide_unused(axes, len(workloads))
    labels = device_order([*dots["dev_label"], *ticks["dev_label"]])
    notes = [
        "dots: full epochs of each run,\nepoch 1, 2, … left to right",
        "tick: median of the runs\nper epoch" if not ticks.empty else None,
    ]
    return finish_with_legend(fig, [patch_handle(x) for x in labels], notes, title)


def epoch_time_figure(
    tables: Mapping[str, pd.DataFrame], out_path: str | os.PathLike, **style
) -> None:
    """Per workload, batch size and device: ``timed_seconds`` of every epoch of ``epochs``
    with ``full_epoch`` true as a dot (epochs side by side), and ``epoch_summary``'s
    ``timed_seconds`` (the published median per epoch, rows with ``full_epoch`` true)
    as a tick. Style keywords: dpi, font_scale, title."""
    render(out_path, style, lambda st: build(tables, st))
