"""Training samples/s vs batch size: the published median and interval (``speedup``
table) per device, each run's samples/s (``runs`` table) as a dot."""

from __future__ import annotations

import os
from collections.abc import Mapping

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from trainbench.analysis.figures import data
from trainbench.analysis.figures.style import (
    LEGEND_W,
    Style,
    base_device,
    device_order,
    finish_with_legend,
    grid,
    hide_unused,
    kinds_note,
    line_handle,
    line_style,
    log2_axis,
    message,
    new_figure,
    render,
    value_axis,
    whiskers,
)

PANEL = (4.3, 3.3)
DOT_SHIFT = 2**0.12  # run dots a little right of their batch size, clear of the whiskers
EMPTY = "no successful runs of a training workload to plot"


def _summary(tables: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    frame = data.table(tables, "speedup")
    if not data.has(frame, "workload", "device", "batch_size", "median"):
        return pd.DataFrame()
    frame = data.numeric(frame, "batch_size", "median", "low", "high")
    frame["workload"] = data.strings(frame, "workload")
    frame["device"] = data.strings(frame, "device")
    frame["interval"] = data.strings(frame, "interval")
    frame["dev_label"] = data.device_labels(frame, data.fallback_pairs(tables))
    return frame


def _dots(tables: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    runs = data.table(tables, "runs")
    if not data.has(runs, "workload", "device", "batch_size", "samples_per_s"):
        return pd.DataFrame(columns=["workload", "device", "batch_size", "samples_per_s"])
    runs = data.numeric(data.ok_runs(runs), "batch_size", "samples_per_s")
    runs = runs[(runs["samples_per_s"] > 0) & runs["batch_size"].notna()]
    runs["workload"] = data.strings(runs, "workload")
    runs["device"] = data.strings(runs, "device")
    return runs


def _no_ok_note(summary: pd.DataFrame) -> str | None:
    """Devices of a workload with a row in the table but no published median anywhere."""
    drawn = set(summary.loc[summary["median"] > 0, "device"])
    missing = [d for d in device_order(summary["device"]) if d not in drawn]
    return "no ok runs: " + ", ".join(missing) if missing else None


def _panel(ax: Axes, summary: pd.DataFrame, dots: pd.DataFrame, st: Style) -> list[float]:
    """One workload: a line through the medians, whiskers from low to high, run dots."""
    values: list[float] = []
    drawn = summary[summary["median"] > 0]
    for label in device_order(drawn["dev_label"]):
        rows = drawn[drawn["dev_label"] == label].sort_values("batch_size", kind="stable")
        style_ = line_style(label)
        ax.plot(rows["batch_size"], rows["median"], linewidth=1.8, markersize=5, zorder=3, **style_)
        whisk = rows[np.isfinite(rows["low"]) & np.isfinite(rows["high"])]
        if not whisk.empty:
            ax.errorbar(
                whisk["batch_size"], whisk["median"],
                yerr=whiskers(whisk["median"], whisk["low"], whisk["high"]),
                fmt="none", ecolor=style_["color"], elinewidth=1.2, capsize=3, zorder=3,
            )  # fmt: skip
        own = dots[dots["device"] == base_device(label)]
        ax.scatter(
            own["batch_size"] * DOT_SHIFT, own["samples_per_s"], s=14, color=style_["color"],
            alpha=0.7, edgecolors="white", linewidths=0.4, zorder=4,
        )  # fmt: skip
        values += [*rows["median"], *whisk["low"], *whisk["high"], *own["samples_per_s"]]
    log2_axis(ax, [*drawn["batch_size"], *dots["batch_size"]])
    ax.set_xlabel("batch size (log2 scale)")
    value_axis(ax, values, "training samples/s")
    return values


def build(tables: Mapping[str, pd.DataFrame], st: Style) -> Figure:
    """The figure, unsaved (tests read its texts)."""
    title = st.title or "Training throughput vs batch size"
    summary = _summary(tables)
    if summary.empty or not (summary["median"] > 0).any():
        return message(title, EMPTY, st)
    dots = _dots(tables)
    workloads = data.sorted_str(summary.loc[summary["median"] > 0, "workload"])
    cols, rows = grid(len(workloads))
    fig = new_figure((cols * PANEL[0] + LEGEND_W, rows * PANEL[1] + 0.5), st)
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    for ax, workload in zip(axes, workloads, strict=False):
        sub = summary[summary["workload"] == workload]
        _panel(ax, sub, dots[dots["workload"] == workload], st)
        note = _no_ok_note(sub)
        ax.set_title(workload + (f"\n{note}" if note else ""), fontsize=10.5 * st.font_scale)
    hide_unused(axes, len(workloads))
    drawn = summary[summary["median"] > 0]
    whiskered = drawn[np.isfinite(drawn["low"]) & np.isfinite(drawn["high"])]
    notes = [
        "line: median samples/s",
        kinds_note("whiskers", whiskered["interval"]),
        "dots (beside): single runs",
    ]
    handles = [line_handle(x) for x in device_order(drawn["dev_label"])]
    return finish_with_legend(fig, handles, notes, title)


def throughput_figure(
    tables: Mapping[str, pd.DataFrame], out_path: str | os.PathLike, **style
) -> None:
    """Training samples/s vs batch size (log2 x) per device: the ``speedup`` table's
    ``median`` as a line and ``low``–``high`` as whiskers (the table's ``interval`` in
    the legend), each ok run's ``samples_per_s`` from ``runs`` as a dot; one panel per
    workload. Style keywords: dpi, font_scale, title."""
    render(out_path, style, lambda st: build(tables, st))
