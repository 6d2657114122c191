"""One setting against another on the same hardware, from the ``comparison`` table: per
workload × machine_device a panel, each side's samples/s ratio to the baseline side (a dot
per batch size and side on a log axis), its interval as an error bar, a dashed line at 1
and the verdict beside it. Nothing is computed here; an empty table (no machine_device
with two sides, or ``aggregate.compare.by: none``) gives the message figure."""

from __future__ import annotations

import os
from collections.abc import Mapping

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from trainbench.analysis.figures import data
from trainbench.analysis.figures.speedup import VERDICT_COLORS  # one palette for verdicts
from trainbench.analysis.figures.style import (
    LEGEND_W,
    Style,
    figure_legend,
    finite_positive,
    kinds_note,
    log_ticks,
    message,
    new_figure,
    render,
    whiskers,
)
from trainbench.analysis.tables import ratio_text

ROW_H = 0.32  # inches per side and batch size
PANEL_W = 7.5  # inches: labels, dots, verdicts
MIN_HEIGHT = 2.8
TITLE = "One setting against another, on the same hardware"
EMPTY = (
    "no comparison: no device of the merged records has two sides (software or results "
    "folder), or aggregate.compare.by is none (the comparison table is empty)"
)
DOT = "#3b5b92"


def _rows(tables: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    """The table's comparison rows (note rows, with no side, are left out); none where no
    row has a ratio to draw (a row without one is written beside the others, not drawn)."""
    frame = data.table(tables, "comparison")
    if not data.has(frame, "workload", "machine_device", "batch_size", "side", "ratio"):
        return pd.DataFrame()
    frame = data.numeric(frame, "batch_size", "ratio", "low", "high")
    for column in ("workload", "machine_device", "side", "baseline_side", "verdict", "interval"):
        frame[column] = data.strings(frame, column)
    frame = frame[(frame["side"] != "") & frame["batch_size"].notna()]
    return frame.copy() if (frame["ratio"] > 0).any() else pd.DataFrame()


def _verdict_text(r) -> str:
    if np.isfinite(r.ratio) and r.ratio > 0:
        return f"{ratio_text(r.ratio)} {r.verdict}".strip()
    return r.verdict or "no value"


def _panel(ax: Axes, rows: pd.DataFrame, limits: tuple[float, float], st: Style) -> None:
    """One workload × machine_device: a row per batch size and side, in the table's order."""
    ys = np.arange(len(rows), dtype=float)
    for y, r in zip(ys, rows.itertuples(index=False), strict=True):
        if not (np.isfinite(r.ratio) and r.ratio > 0):
            continue
        if np.isfinite(r.low) and np.isfinite(r.high):
            err = whiskers([r.ratio], [max(r.low, limits[0])], [min(r.high, limits[1])])
            ax.errorbar([r.ratio], [y], xerr=err, fmt="none", ecolor="black", elinewidth=1,
                        capsize=3, zorder=3)  # fmt: skip
        ax.plot([r.ratio], [y], marker="o", color=DOT, markersize=6, zorder=4, linestyle="none")
    ax.axvline(1, color="black", linestyle="--", linewidth=1, zorder=1)
    log_ticks(ax, limits, axis="x", suffix="×")
    ax.set_xlim(*limits)
    ax.set_ylim(len(rows) - 0.4, -0.6)
    labels = [f"bs {int(b)}  {s}" for b, s in zip(rows["batch_size"], rows["side"], strict=True)]
    ax.set_yticks(ys, labels)
    ax.grid(axis="y", visible=False)
    right = ax.secondary_yaxis("right")
    right.set_yticks(ys, [_verdict_text(r) for r in rows.itertuples(index=False)])
    right.tick_params(axis="y", length=0, labelsize=8.5 * st.font_scale)
    for tick, verdict in zip(right.get_yticklabels(), rows["verdict"], strict=True):
        tick.set_color(VERDICT_COLORS.get(verdict, "#444444"))
        tick.set_fontweight("bold" if verdict in ("faster", "slower") else "normal")


def _limits(rows: pd.DataFrame) -> tuple[float, float]:
    """The ratio axis: 1 and every drawn end, with room (layout only; an unbounded end is
    cut at the axis)."""
    values = finite_positive([1.0, *rows["ratio"], *rows["low"], *rows["high"]])
    return float(values.min()) / 1.3, float(values.max()) * 1.3


def build(tables: Mapping[str, pd.DataFrame], st: Style) -> Figure:
    """The figure, unsaved (tests read its texts)."""
    title = st.title or TITLE
    rows = _rows(tables)
    if rows.empty:
        return message(title, EMPTY, st)
    keys = list(dict.fromkeys(zip(rows["workload"], rows["machine_device"], strict=True)))
    panels = [rows[(rows["workload"] == w) & (rows["machine_device"] == m)] for w, m in keys]
    heights = [ROW_H * len(p) + 1.0 for p in panels]
    fig = new_figure((PANEL_W + LEGEND_W, max(sum(heights) + 0.6, MIN_HEIGHT)), st)
    axes = fig.subplots(len(panels), 1, squeeze=False, height_ratios=heights).ravel()
    limits = _limits(rows)
    for ax, (workload, machine), panel in zip(axes, keys, panels, strict=True):
        _panel(ax, panel, limits, st)
        bases = " / ".join(dict.fromkeys(panel["baseline_side"]))
        ax.set_title(f"{workload} on {machine} (vs {bases})")
        ax.set_xlabel("samples/s ÷ the baseline side's (log scale)")
    whiskered = rows[np.isfinite(rows["low"]) & np.isfinite(rows["high"])]
    notes = [
        "dot: median samples/s ÷ the\nbaseline side's median",
        kinds_note("error bar", whiskered["interval"]),
        "dashed: 1× (no change)",
        "right: the verdict",
    ]
    figure_legend(fig, [], None, notes)
    fig.suptitle(title)
    return fig


def comparison_figure(
    tables: Mapping[str, pd.DataFrame], out_path: str | os.PathLike, **style
) -> None:
    """Each side against the baseline side, from the ``comparison`` table: ``ratio`` as a
    dot (log axis), ``low``–``high`` as an error bar (the table's ``interval`` kinds in the
    legend), ``verdict`` beside it; one panel per workload × machine_device; a message
    when the table has no comparison row. Style keywords: dpi, font_scale, title."""
    render(out_path, style, lambda st: build(tables, st))
