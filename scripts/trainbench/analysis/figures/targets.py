"""Time to a quality target, drawn from the published tables alone.

``quality``: the ``quality_curve`` table — per workload, the target metric's median over
repeats against the median training seconds, one line per device and batch size (the
repeats' range as a band), the target as a dashed line.

``time_to_target``: the ``time_to_target`` table — per workload, each cell's median
training time to the target as a dot with its interval as a whisker (an open end where
censored repeats make it unbounded), the verdict beside it; a cell whose median did not
reach the target is written, not drawn.
"""

from __future__ import annotations

import math
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
    device_key,
    device_order,
    finish_with_legend,
    grid,
    hide_unused,
    kinds_note,
    line_handle,
    line_style,
    message,
    new_figure,
    render,
)
from trainbench.analysis.tables import compact

LINESTYLES = ("-", "--", ":", "-.")
ROW_H = 0.32


def _curves(tables: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    frame = data.table(tables, "quality_curve")
    if not data.has(frame, "workload", "device", "batch_size", "train_seconds", "value"):
        return pd.DataFrame()
    frame = data.numeric(
        frame, "batch_size", "point", "train_seconds", "value", "value_min", "value_max", "target"
    )
    frame = frame[np.isfinite(frame["value"]) & np.isfinite(frame["train_seconds"])].copy()
    for column in ("workload", "device", "metric"):
        frame[column] = data.strings(frame, column)
    return frame


def _curve_panel(ax: Axes, rows: pd.DataFrame) -> None:
    sizes = sorted({int(b) for b in rows["batch_size"]})
    for device in device_order(rows["device"]):
        for i, size in enumerate(sizes):
            cell = rows[(rows["device"] == device) & (rows["batch_size"] == size)]
            if cell.empty:
                continue
            cell = cell.sort_values("point")
            style = {**line_style(device), "linestyle": LINESTYLES[i % len(LINESTYLES)]}
            ax.plot(cell["train_seconds"], cell["value"], linewidth=1.5, markersize=3.5, **style)
            ax.fill_between(
                cell["train_seconds"], cell["value_min"], cell["value_max"],
                color=style["color"], alpha=0.15, linewidth=0,
            )  # fmt: skip
            last = cell.iloc[-1]
            ax.annotate(f"bs {size}", (last["train_seconds"], last["value"]), fontsize=7,
                        xytext=(3, 0), textcoords="offset points", va="center")  # fmt: skip
    target = rows["target"].dropna()
    if not target.empty:
        ax.axhline(float(target.iloc[0]), color="black", linestyle="--", linewidth=1)
    ax.set_xlabel("training seconds (timed regions)")
    ax.set_ylabel(rows["metric"].iloc[0])


def build_quality(tables: Mapping[str, pd.DataFrame], st: Style) -> Figure:
    """The quality-curve figure, unsaved."""
    title = st.title or "Quality against training time"
    rows = _curves(tables)
    if rows.empty:
        return message(title, "no quality curve: the quality_curve table has no rows", st)
    workloads = data.sorted_str(rows["workload"])
    cols, nrows = grid(len(workloads))
    fig = new_figure((4.2 * cols + LEGEND_W, 3.2 * nrows + 0.6), st)
    axes = fig.subplots(nrows, cols, squeeze=False).ravel()
    for ax, workload in zip(axes, workloads, strict=False):
        _curve_panel(ax, rows[rows["workload"] == workload])
        ax.set_title(workload)
    hide_unused(axes, len(workloads))
    notes = [
        "line: median over repeats of the\ntarget metric at each evaluation",
        "band: the repeats' range",
        "line style: batch size (labelled)",
        "dashed black: the target",
    ]
    handles = [line_handle(d) for d in device_order(rows["device"])]
    return finish_with_legend(fig, handles, notes, title)


def _times(tables: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    frame = data.table(tables, "time_to_target")
    if not data.has(frame, "workload", "device", "batch_size", "median_s"):
        return pd.DataFrame()
    frame = data.numeric(frame, "batch_size", "median_s", "low", "high", "speedup", "target")
    for column in ("workload", "device", "verdict", "metric", "direction", "interval"):
        frame[column] = data.strings(frame, column)
    frame = frame[frame["batch_size"].notna()].copy()
    frame["_key"] = [device_key(d) for d in frame["device"]]
    return frame.sort_values(["workload", "_key", "batch_size"], kind="stable")


def _label(row) -> str:
    if row.verdict == "baseline":
        return "baseline"
    if np.isfinite(row.speedup) and row.speedup > 0 and math.isfinite(row.speedup):
        return f"{compact(row.speedup)}x {row.verdict}"
    return row.verdict


def _time_panel(ax: Axes, rows: pd.DataFrame) -> None:
    ys = np.arange(len(rows))
    ends = np.where(np.isfinite(rows["high"]), rows["high"], rows["median_s"])
    ends = ends[np.isfinite(ends)]  # none in a panel where no cell reached the target
    right_edge = (ends.max() if ends.size else 1.0) * 1.15
    for y, row in zip(ys, rows.itertuples(index=False), strict=True):
        color = line_style(row.device)["color"]
        if np.isfinite(row.median_s):
            high = row.high if np.isfinite(row.high) else right_edge
            ax.plot([row.low, high], [y, y], color="black", linewidth=1, zorder=2)
            if not np.isfinite(row.high):
                ax.annotate("", (right_edge, y), (right_edge * 0.97, y),
                            arrowprops={"arrowstyle": "->", "lw": 1})  # fmt: skip
            ax.plot([row.median_s], [y], "o", color=color, markersize=6, zorder=3)
        else:
            ax.text(0.02, y, row.verdict or "no value", transform=ax.get_yaxis_transform(),
                    va="center", fontsize=8, color="#8a6100")  # fmt: skip
    ax.set_yticks(ys, [f"bs {int(b)}  {d}" for b, d in zip(rows["batch_size"], rows["device"], strict=True)])  # fmt: skip
    ax.set_ylim(len(rows) - 0.4, -0.6)
    ax.set_xlim(0, right_edge)
    right = ax.secondary_yaxis("right")
    right.set_yticks(ys, [_label(r) for r in rows.itertuples(index=False)])
    right.tick_params(axis="y", length=0, labelsize=8)
    ax.set_xlabel("training seconds to the target")


def build_time_to_target(tables: Mapping[str, pd.DataFrame], st: Style) -> Figure:
    """The time-to-target figure, unsaved."""
    title = st.title or "Training time to the quality target"
    rows = _times(tables)
    if rows.empty:
        return message(title, "no time to target: the time_to_target table has no rows", st)
    if not np.isfinite(rows["median_s"]).any():
        return message(title, "no cell reached its target in the median repeat: see the "
                       "time_to_target table for each cell's reason", st)  # fmt: skip
    workloads = data.sorted_str(rows["workload"])
    heights = [ROW_H * (rows["workload"] == w).sum() + 1.1 for w in workloads]
    fig = new_figure((7.5 + LEGEND_W, sum(heights) + 0.6), st)
    axes = fig.subplots(len(workloads), 1, squeeze=False, height_ratios=heights).ravel()
    for ax, workload in zip(axes, workloads, strict=True):
        panel = rows[rows["workload"] == workload]
        _time_panel(ax, panel)
        first = panel.iloc[0]
        ax.set_title(
            f"{workload}: {first['metric']} {first['direction']} {compact(first['target'])}"
        )
    notes = [
        "dot: median training time to the\ntarget over repeats",
        kinds_note("whisker", rows["interval"]),
        "arrow: unbounded (a repeat did\nnot reach the target)",
        "right: times sooner than the\nbaseline and the verdict",
    ]
    handles = [line_handle(d) for d in device_order(rows["device"])]
    return finish_with_legend(fig, handles, notes, title)


def quality_figure(
    tables: Mapping[str, pd.DataFrame], out_path: str | os.PathLike, **style
) -> None:
    """Quality against training time per workload, device and batch size, from the
    ``quality_curve`` table. Style keywords: dpi, font_scale, title."""
    render(out_path, style, lambda st: build_quality(tables, st))


def time_to_target_figure(
    tables: Mapping[str, pd.DataFrame], out_path: str | os.PathLike, **style
) -> None:
    """Training time to the target per cell, with intervals and verdicts, from the
    ``time_to_target`` table. Style keywords: dpi, font_scale, title."""
    render(out_path, style, lambda st: build_time_to_target(tables, st))
