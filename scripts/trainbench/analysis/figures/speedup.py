"""Training speedup vs the baseline device: the ``speedup`` table's ratio as a bar from
1 on a log axis, its interval as a whisker and its verdict word beside each bar; and the
same drawing of the ``across_batch_sizes`` table, each device at its own batch size
against the baseline at its own, titled as a comparison of settings."""

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
MIN_HEIGHT = 2.8  # inches: room for the legend's notes beside a single short panel
VERDICT_COLORS = {
    "faster": "#1e7b34",
    "slower": "#b42318",
    "no clear difference": "#444444",
    "insufficient data": "#8a6100",
    "disturbed": "#8a6100",
}
EMPTY = "no device to compare with a baseline: the speedup table has no non-baseline rows"
BAR_NOTE = "bar: median samples/s ÷\nbaseline median samples/s"
ACROSS_NOTE = "bar: median samples/s at its own\nbatch size ÷ the baseline's at its own"
EMPTY_ACROSS = (
    "no device ran batch sizes of its own: the across_batch_sizes table is empty\n"
    "(every comparison is at a shared batch size: see the speedup figure)"
)


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
    frame["label"] = [f"bs {int(b)}  {d}" for b, d in zip(frame["batch_size"], frame["dev_label"], strict=True)]  # fmt: skip
    return frame


def _across_rows(tables: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    """The ``across_batch_sizes`` rows: a device at its own batch size against the
    baseline at its own; the label names both settings."""
    frame = data.table(tables, "across_batch_sizes")
    if not data.has(frame, "workload", "device", "batch_size", "baseline", "speedup"):
        return pd.DataFrame()
    frame = data.numeric(
        frame, "batch_size", "baseline_batch_size", "speedup", "speedup_low", "speedup_high"
    )
    for column in ("workload", "device", "baseline", "verdict", "speedup_interval"):
        frame[column] = data.strings(frame, column)
    frame = frame[frame["batch_size"].notna()].copy()
    frame["dev_label"] = frame["device"]
    frame["label"] = [
        f"{d} bs {int(b)} ÷ {base} bs {int(bb) if np.isfinite(bb) else '?'}"
        for d, b, base, bb in zip(
            frame["device"], frame["batch_size"], frame["baseline"],
            frame["baseline_batch_size"], strict=True,
        )
    ]  # fmt: skip
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
    ax.set_yticks(rows["y"], list(rows["label"]))
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
    return _draw(rows, title, "speedup vs the baseline (log scale)", BAR_NOTE, st)


def build_across(tables: Mapping[str, pd.DataFrame], st: Style) -> Figure:
    """The across-batch-sizes figure, unsaved (tests read its texts)."""
    title = st.title or "Speed across batch sizes (not a same-batch verdict)"
    rows = _across_rows(tables)
    if rows.empty:
        return message(title, EMPTY_ACROSS, st)
    xlabel = "samples/s ratio, each at its own batch size (log scale)"
    return _draw(rows, title, xlabel, ACROSS_NOTE, st)


def _draw(rows: pd.DataFrame, title: str, xlabel: str, bar_note: str, st: Style) -> Figure:
    """One panel per workload of ``rows`` (a ``label`` per bar), one legend."""
    workloads = data.sorted_str(rows["workload"])
    panels = [_layout(rows[rows["workload"] == w]) for w in workloads]
    heights = [ROW_H * (p["y"].max() + 1) + 1.0 for p in panels]
    fig = new_figure((PANEL_W + LEGEND_W, max(sum(heights) + 0.6, MIN_HEIGHT)), st)
    axes = fig.subplots(len(panels), 1, squeeze=False, height_ratios=heights).ravel()
    limits = _limits(rows)
    for ax, workload, panel in zip(axes, workloads, panels, strict=True):
        _panel(ax, panel, limits, st)
        baselines = [b for b in device_order(panel["baseline"]) if b]
        vs = f" (vs {' / '.join(baselines)})" if baselines else ""
        ax.set_title(f"{workload}{vs}")
        ax.set_xlabel(xlabel)
    whiskered = rows[np.isfinite(rows["speedup_low"]) & np.isfinite(rows["speedup_high"])]
    notes = [
        bar_note,
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


def across_batch_figure(
    tables: Mapping[str, pd.DataFrame], out_path: str | os.PathLike, **style
) -> None:
    """Each device at its own batch size against the baseline at its own, from the
    ``across_batch_sizes`` table, drawn as the speedup figure draws (ratio bar from 1 on a
    log axis, its interval as a whisker, the verdict beside it), titled as a comparison
    of settings; a message when no device ran sizes of its own."""
    render(out_path, style, lambda st: build_across(tables, st))
