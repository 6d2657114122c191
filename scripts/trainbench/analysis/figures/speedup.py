"""Training speedup vs the baseline device: the ``speedup`` table's ratio as a bar from
1 on a log axis, its interval as a whisker and its verdict word beside each bar."""

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
    bar_style,
    device_key,
    device_order,
    finish_with_legend,
    finite_positive,
    kinds_note,
    log_ticks,
    message,
    new_figure,
    patch_handle,
    render,
    whiskers,
)
from trainbench.analysis.tables import ratio_text

ROW_H = 0.3  # inches per bar
GROUP_GAP = 0.6  # rows of space between batch sizes
PANEL_W = 8.0  # inches: device names, bars, verdicts
VERDICT_COLORS = {
    "faster": "#1e7b34",
    "slower": "#b42318",
    "no clear difference": "#444444",
    "insufficient data": "#8a6100",
    "disturbed": "#8a6100",
}
EMPTY = "no device to compare with a baseline: the speedup table has no non-baseline rows"


def _rows(tables: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    """The table's rows without the baseline rows (each workload's baseline device)."""
    frame = data.table(tables, "speedup")
    if not data.has(frame, "workload", "device", "batch_size", "speedup"):
        return pd.DataFrame()
    frame = data.numeric(frame, "batch_size", "speedup", "speedup_low", "speedup_high")
    for column in ("workload", "device", "baseline", "verdict", "speedup_interval"):
        frame[column] = data.strings(frame, column)
    frame = frame[(frame["verdict"] != "baseline") & (frame["device"] != frame["baseline"])]
    frame = frame[frame["batch_size"].notna()].copy()
    frame["dev_label"] = data.device_labels(frame, data.fallback_pairs(tables))
    return frame


def _layout(rows: pd.DataFrame) -> pd.DataFrame:
    """Rows in drawing order (batch size, then device order) with a y position each."""
    rows = rows.assign(_key=[device_key(x) for x in rows["dev_label"]])
    rows = rows.sort_values(["batch_size", "_key"], kind="stable").drop(columns="_key")
    ys, y, last = [], 0.0, None
    for size in rows["batch_size"]:
        if last is not None:
            y += 1.0 + (GROUP_GAP if size != last else 0.0)
        ys.append(y)
        last = size
    return rows.assign(y=ys)


def _verdict_text(row) -> str:
    if np.isfinite(row.speedup) and row.speedup > 0:
        return f"{ratio_text(row.speedup)} {row.verdict}".strip()
    return row.verdict or "no value"


def _panel(ax: Axes, rows: pd.DataFrame, limits: tuple[float, float], st: Style) -> None:
    for r in rows.itertuples(index=False):
        if np.isfinite(r.speedup) and r.speedup > 0:
            ax.barh(r.y, r.speedup - 1, left=1, height=0.72, zorder=2, **bar_style(r.dev_label))
        if np.isfinite(r.speedup_low) and np.isfinite(r.speedup_high):
            ax.errorbar(
                [r.speedup], [r.y], xerr=whiskers([r.speedup], [r.speedup_low], [r.speedup_high]),
                fmt="none", ecolor="black", elinewidth=1, capsize=3, zorder=4,
            )  # fmt: skip
    ax.axvline(1, color="black", linestyle="--", linewidth=1, zorder=1)
    log_ticks(ax, limits, axis="x", suffix="×")
    ax.set_xlim(*limits)
    ax.set_ylim(rows["y"].max() + 0.7, -0.7)
    ax.set_yticks(rows["y"], [f"bs {int(b)}  {d}" for b, d in zip(rows["batch_size"], rows["dev_label"], strict=True)])  # fmt: skip
    ax.grid(axis="y", visible=False)
    right = ax.secondary_yaxis("right")
    right.set_yticks(rows["y"], [_verdict_text(r) for r in rows.itertuples(index=False)])
    right.tick_params(axis="y", length=0, labelsize=8.5 * st.font_scale)
    for tick, verdict in zip(right.get_yticklabels(), rows["verdict"], strict=True):
        tick.set_color(VERDICT_COLORS.get(verdict, "#444444"))
        tick.set_fontweight("bold" if verdict in ("faster", "slower") else "normal")


def _limits(rows: pd.DataFrame) -> tuple[float, float]:
    """The speedup axis: 1 and every drawn end, with room (layout only)."""
    values = finite_positive([1.0, *rows["speedup"], *rows["speedup_low"], *rows["speedup_high"]])
    return float(values.min()) / 1.5, float(values.max()) * 1.5


def build(tables: Mapping[str, pd.DataFrame], st: Style) -> Figure:
    """The figure, unsaved (tests read its texts)."""
    title = st.title or "Training speedup vs the baseline device"
    rows = _rows(tables)
    if rows.empty:
        return message(title, EMPTY, st)
    workloads = data.sorted_str(rows["workload"])
    panels = [_layout(rows[rows["workload"] == w]) for w in workloads]
    heights = [ROW_H * (p["y"].max() + 1) + 1.0 for p in panels]
    fig = new_figure((PANEL_W + LEGEND_W, sum(heights) + 0.6), st)
    axes = fig.subplots(len(panels), 1, squeeze=False, height_ratios=heights).ravel()
    limits = _limits(rows)
    for ax, workload, panel in zip(axes, workloads, panels, strict=True):
        _panel(ax, panel, limits, st)
        baselines = [b for b in device_order(panel["baseline"]) if b]
        vs = f" (vs {' / '.join(baselines)})" if baselines else ""
        ax.set_title(f"{workload}{vs}")
        ax.set_xlabel("speedup vs the baseline (log scale)")
    whiskered = rows[np.isfinite(rows["speedup_low"]) & np.isfinite(rows["speedup_high"])]
    notes = [
        "bar: median samples/s ÷\nbaseline median samples/s",
        kinds_note("whisker", whiskered["speedup_interval"]),
        "dashed: 1× (no change)",
        "right: the verdict",
    ]
    handles = [patch_handle(x) for x in device_order(rows["dev_label"])]
    return finish_with_legend(fig, handles, notes, title)


def speedup_figure(
    tables: Mapping[str, pd.DataFrame], out_path: str | os.PathLike, **style
) -> None:
    """Speedup per workload × batch size × device from the ``speedup`` table: ``speedup``
    as a bar from 1 (log axis), ``speedup_low``–``speedup_high`` as a whisker (the
    table's ``speedup_interval`` in the legend) and ``verdict`` beside each bar; the
    baseline rows are left out. Style keywords: dpi, font_scale, title."""
    render(out_path, style, lambda st: build(tables, st))
