"""Time to a quality target, drawn from the published tables alone.

``quality``: the ``quality_curve`` table — per workload, the target metric's median over
repeats against the median training seconds, one line per device and batch size (the
repeats' range as a band), the target as a dashed line.

``time_to_target``: per workload, two panels. First the ``best_setting`` table: each
device at its best batch size, its median training time to the target as a dot (the
baseline's a diamond) with its interval as a whisker (an open end where censored repeats
make it unbounded), labelled with the batch size, and beside it the times sooner than
the baseline's best setting and the verdict. Beside it the ``time_to_target`` table:
each cell against the baseline at the same batch size; a cell without a baseline cell at
its batch size says so ("no cpu at bs 32") rather than a bare "insufficient data", the
best-setting panel comparing it. A median that did not reach the target is written, not
drawn; workloads without a target are named in the legend.
"""

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
    wrap,
)
from trainbench.analysis.tables import compact

LINESTYLES = ("-", "--", ":", "-.")
ROW_H = 0.32
JUDGED = ("sooner", "later", "no clear difference")  # the verdicts shown with their ratio
LEGEND_LINE_H = 0.19  # inches a legend text line takes at font_scale 1


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


def _frame(tables: Mapping[str, pd.DataFrame], name: str) -> pd.DataFrame:
    """A time table (``time_to_target`` or ``best_setting``) with typed columns: its rows
    with a device and a target, the baseline device first in each workload."""
    frame = data.table(tables, name)
    if not data.has(frame, "workload", "device", "median_s"):
        return pd.DataFrame()
    frame = data.numeric(frame, "batch_size", "median_s", "low", "high", "speedup", "target")
    for column in ("workload", "device", "verdict", "metric", "direction", "interval",
                   "baseline", "baseline_device"):  # fmt: skip
        frame[column] = data.strings(frame, column)
    base = frame["baseline_device"] if name == "best_setting" else frame["baseline"]
    frame = frame[(frame["device"] != "") & frame["target"].notna()].copy()
    frame["base_of"] = base.loc[frame.index]
    frame["order_key"] = [(d != b, device_key(d)) for d, b in zip(frame["device"], frame["base_of"], strict=True)]  # fmt: skip
    if name == "time_to_target":
        frame = frame[frame["batch_size"].notna()]
        return frame.sort_values(["workload", "order_key", "batch_size"], kind="stable")
    return frame.sort_values(["workload", "order_key"], kind="stable")


def _right_label(row, shared: set[tuple[str, float]]) -> str:
    """Times sooner and the verdict; "baseline"; where a cell has no baseline cell at its
    batch size (``shared``: the time_to_target table's baseline cells), that fact rather
    than a bare "insufficient data" (best_setting compares such a device)."""
    if row.verdict == "baseline":
        return "baseline"
    if row.verdict in JUDGED and np.isfinite(row.speedup) and row.speedup > 0:
        return f"{compact(row.speedup)}x {row.verdict}"
    if (
        row.base_of
        and shared
        and row.verdict == "insufficient data"
        and (row.base_of, row.batch_size) not in shared
    ):
        return f"no {row.base_of} at bs {int(row.batch_size)}"
    return row.verdict


def _time_panel(ax: Axes, rows: pd.DataFrame, left: list[str], right: list[str]) -> None:
    """One dot and whisker per row (the baseline's a diamond), the labels beside."""
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
            marker = "D" if row.verdict == "baseline" else "o"
            ax.plot([row.median_s], [y], marker, color=color, markersize=6, zorder=3)
        else:
            ax.text(0.02, y, row.verdict or "no value", transform=ax.get_yaxis_transform(),
                    va="center", fontsize=8, color="#8a6100")  # fmt: skip
    ax.set_yticks(ys, left)
    ax.set_ylim(len(rows) - 0.4, -0.6)
    ax.set_xlim(0, right_edge)
    side = ax.secondary_yaxis("right")
    side.set_yticks(ys, right)
    side.tick_params(axis="y", length=0, labelsize=8)
    ax.set_xlabel("training seconds to the target")


def _best_labels(rows: pd.DataFrame) -> tuple[list[str], list[str]]:
    left = [f"{d}  bs {int(b)}" if np.isfinite(b) else d
            for d, b in zip(rows["device"], rows["batch_size"], strict=True)]  # fmt: skip
    return left, [_right_label(r, set()) for r in rows.itertuples(index=False)]


def _cell_labels(rows: pd.DataFrame) -> tuple[list[str], list[str]]:
    shared = set(zip(rows["device"], rows["batch_size"], strict=True))
    left = [f"bs {int(b)}  {d}" for b, d in zip(rows["batch_size"], rows["device"], strict=True)]
    return left, [_right_label(r, shared) for r in rows.itertuples(index=False)]


def _untargeted(tables: Mapping[str, pd.DataFrame], drawn: set[str]) -> str | None:
    """ "no target set: mlp_a, mlp_b": the workloads the tables name without a target
    (best_setting joins them with ";" in one row), none of them ``drawn``."""
    names: list[str] = []
    for name in ("best_setting", "time_to_target"):
        frame = data.table(tables, name)
        if data.has(frame, "workload"):
            missing = data.numeric(frame, "target")["target"].isna()
            names += [n for w in data.strings(frame, "workload")[missing] for n in w.split(";")]
    names = [n for n in dict.fromkeys(names) if n and n not in drawn]
    return wrap(f"no target set: {', '.join(names)}", 30) if names else None


def _notes(best: pd.DataFrame, cells: pd.DataFrame, frames: list[pd.DataFrame]) -> list:
    notes = []
    if not best.empty:
        notes.append("left: each device at its best batch\nsize, vs the baseline's best")
    if not best.empty and not cells.empty:
        notes.append("right: each cell, vs the baseline\nat the same batch size")
    return notes + [
        "dot: median training time to the\ntarget (diamond: the baseline)",
        kinds_note("whisker", pd.concat([f["interval"] for f in frames])),
        "arrow: unbounded (a repeat did\nnot reach the target)",
        "beside a row: times sooner and\nthe verdict",
    ]


def _legend_height(devices: list[str], notes: list[str | None]) -> float:
    """Inches the legend needs (a short figure would cut its last notes off)."""
    lines = len(devices) + sum(n.count("\n") + 1 for n in notes if n)
    return LEGEND_LINE_H * lines + 0.8


def build_time_to_target(tables: Mapping[str, pd.DataFrame], st: Style) -> Figure:
    """The time-to-target figure, unsaved: per workload, each device at its best
    setting (``best_setting``) and, beside it, each cell (``time_to_target``)."""
    title = st.title or "Training time to the quality target"
    best, cells = _frame(tables, "best_setting"), _frame(tables, "time_to_target")
    panels = [(n, f) for n, f in (("best", best), ("cells", cells)) if not f.empty]
    if not panels:
        return message(title, "no time to target: the best_setting and time_to_target tables "
                       "have no row with a target", st)  # fmt: skip
    if not any(np.isfinite(f["median_s"]).any() for _, f in panels):
        return message(title, "no cell reached its target in the median repeat: see the "
                       "time_to_target table for each cell's reason", st)  # fmt: skip
    workloads = data.sorted_str(pd.concat([f["workload"] for _, f in panels]))
    frames = [f for _, f in panels]
    notes = [*_notes(best, cells, frames), _untargeted(tables, set(workloads))]
    devices = device_order(pd.concat([f["device"] for f in frames]))
    heights = [ROW_H * max((f["workload"] == w).sum() for f in frames) + 1.1 for w in workloads]
    height = max(sum(heights) + 0.6, _legend_height(devices, notes))
    fig = new_figure((6.2 * len(panels) + LEGEND_W, height), st)
    axes = fig.subplots(len(workloads), len(panels), squeeze=False, height_ratios=heights)
    for ax_row, workload in zip(axes, workloads, strict=True):
        for ax, (name, frame) in zip(ax_row, panels, strict=True):
            rows = frame[frame["workload"] == workload]
            if rows.empty:
                ax.set_axis_off()
                continue
            left, right = _best_labels(rows) if name == "best" else _cell_labels(rows)
            _time_panel(ax, rows, left, right)
            first = rows.iloc[0]
            goal = f"{first['metric']} {first['direction']} {compact(first['target'])}"
            what = ("each device at its best batch size" if name == "best"
                    else f"each cell, vs {first['base_of']} at its batch size")  # fmt: skip
            ax.set_title(f"{workload}: {goal}\n{what}", fontsize="medium")
    return finish_with_legend(fig, [line_handle(d) for d in devices], notes, title)


def quality_figure(
    tables: Mapping[str, pd.DataFrame], out_path: str | os.PathLike, **style
) -> None:
    """Quality against training time per workload, device and batch size, from the
    ``quality_curve`` table. Style keywords: dpi, font_scale, title."""
    render(out_path, style, lambda st: build_quality(tables, st))


def time_to_target_figure(
    tables: Mapping[str, pd.DataFrame], out_path: str | os.PathLike, **style
) -> None:
    """Training time to the target, each device at its best setting (``best_setting``)
    and each cell (``time_to_target``), with intervals and verdicts. Style keywords:
    dpi, font_scale, title."""
    render(out_path, style, lambda st: build_time_to_target(tables, st))
