"""Matrix-multiply GFLOP/s vs n (log–log): the ``matmul_summary`` table's median and
interval per device, each run's value (``matmul`` table) as a dot, and each device's
crossover from the ``crossover`` table marked."""

from __future__ import annotations

import os
from collections.abc import Mapping

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from trainbench.analysis.figures import data
from trainbench.analysis.figures.style import (
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
    log_ticks,
    message,
    new_figure,
    render,
    text_color,
    wrap,
)

KEYS = ("workload", "device", "batch_size", "n")
EMPTY = "no successful runs of the matmul microbenchmark"


def _frame(tables: Mapping[str, pd.DataFrame], name: str, *values: str) -> pd.DataFrame:
    frame = data.table(tables, name)
    if not data.has(frame, "device", "n", "gflops"):
        return pd.DataFrame(columns=[*KEYS, "gflops", *values, "dev_label"])
    if name == "matmul":
        frame = data.ok_runs(frame)
    frame = data.numeric(frame, "batch_size", "n", "gflops", *values)
    frame = frame[(frame["gflops"] > 0) & (frame["n"] > 0)].copy()
    frame["workload"] = data.strings(frame, "workload", "matmul")
    frame["device"] = data.strings(frame, "device")
    frame["batch_size"] = frame["batch_size"].fillna(1.0)
    frame["dev_label"] = data.device_labels(frame, data.fallback_pairs(tables))
    return frame


def _crossovers(tables: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    """The crossover table's matrix-size rows."""
    frame = data.table(tables, "crossover")
    if not data.has(frame, "device", "crossover"):
        return pd.DataFrame(columns=["kind", "workload", "device", "batch_size", "crossover"])
    frame = data.numeric(frame, "batch_size", "crossover")
    kind = data.strings(frame, "kind", "matmul size")
    frame = frame[kind.str.contains("matmul")].copy()
    for column in ("workload", "device", "finding"):
        frame[column] = data.strings(frame, column)
    return frame


def _finding(cross: pd.DataFrame, workload: str, device: str, size: float) -> tuple[float, str]:
    """The crossover n (NaN when none) and the finding sentence of one device's row."""
    rows = cross[(cross["device"] == device) & (cross["workload"].isin([workload, ""]))]
    rows = rows[rows["batch_size"].isna() | (rows["batch_size"] == size)]
    if rows.empty:
        return np.nan, ""
    row = rows.iloc[0]
    return float(row["crossover"]), str(row["finding"])


def _panel(
    ax: Axes,
    summary: pd.DataFrame,
    dots: pd.DataFrame,
    cross: pd.DataFrame,
    key: tuple[str, float],
    st: Style,
) -> tuple[list[tuple[str, str]], list[float]]:
    """One workload × matmul batch; returns the legend entries and the drawn values."""
    workload, size = key
    baselines = set(data.strings(summary, "baseline"))
    entries, values, marks = [], [], []
    for label in device_order(summary["dev_label"]):
        rows = summary[summary["dev_label"] == label].sort_values("n", kind="stable")
        style_ = line_style(label)
        ax.plot(rows["n"], rows["gflops"], linewidth=1.8, markersize=5, zorder=3, **style_)
        ax.fill_between(
            rows["n"], rows["gflops_low"], rows["gflops_high"], color=style_["color"],
            alpha=0.2, linewidth=0,
        )  # fmt: skip
        own = dots[dots["device"] == base_device(label)]
        ax.scatter(own["n"], own["gflops"], s=9, color=style_["color"], alpha=0.5, linewidths=0)
        values += [*rows["gflops"], *rows["gflops_low"], *rows["gflops_high"], *own["gflops"]]
        n_cross, finding = _finding(cross, workload, base_device(label), size)
        if base_device(label) in baselines:
            text = f"{label} (baseline)"
        else:
            text = f"{label}: {finding}" if finding else label
        if np.isfinite(n_cross):
            marks.append((n_cross, base_device(label)))
        entries.append((label, text))
    sizes = sorted({int(n) for n in [*summary["n"], *dots["n"]]})
    for k, (n_cross, device) in enumerate(sorted(marks)):
        right = sum(s < n_cross for s in sizes) >= len(sizes) / 2  # label inside the axes
        _mark(ax, n_cross, device, k, right=right, st=st)
    log2_axis(ax, sizes, rotate_after=12)
    log_ticks(ax, values)
    ax.set_xlabel("matrix size n (n × n @ n × n, log2 scale)")
    ax.set_ylabel("GFLOP/s (log scale)")
    return entries, values


def _mark(ax: Axes, n_cross: float, device: str, k: int, right: bool, st: Style) -> None:
    """A dotted line at the crossover n, named at the bottom (large n has high GFLOP/s)."""
    color = text_color(device)
    ax.axvline(n_cross, color=color, linestyle=":", linewidth=1.6, zorder=2)
    ax.annotate(
        f"{device}: n = {int(n_cross)}", (n_cross, 0.05 + 0.08 * k),
        xycoords=("data", "axes fraction"), xytext=(-4 if right else 4, 0),
        textcoords="offset points", ha="right" if right else "left", va="center",
        color=color, fontsize=9 * st.font_scale, weight="bold",
        bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.8, "pad": 1},
    )  # fmt: skip


def build(tables: Mapping[str, pd.DataFrame], st: Style) -> Figure:
    """The figure, unsaved (tests read its texts)."""
    title = st.title or "Matrix multiply throughput"
    summary = _frame(tables, "matmul_summary", "gflops_low", "gflops_high")
    if summary.empty:
        return message(title, EMPTY, st)
    summary["interval"] = data.strings(summary, "interval")
    dots, cross = _frame(tables, "matmul"), _crossovers(tables)
    pairs = zip(summary["workload"], summary["batch_size"], strict=True)
    keys = sorted({(w, float(b)) for w, b in pairs})
    cols, rows = grid(len(keys), 2)
    fig = new_figure((cols * 5.6 + 3.4, rows * 4.2 + 0.5), st)
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    handles: list[Line2D] = []
    for ax, key in zip(axes, keys, strict=False):
        here = (summary["workload"] == key[0]) & (summary["batch_size"] == key[1])
        mine = (dots["workload"] == key[0]) & (dots["batch_size"] == key[1])
        entries, _ = _panel(ax, summary[here], dots[mine], cross, key, st)
        name = key[0] if key[1] == 1 else f"{key[0]} · batch {int(key[1])}"
        ax.set_title(name if len(keys) > 1 else "")
        for label, text in entries:
            handle = line_handle(label)
            handle.set_label(wrap((f"[{name}] " if len(keys) > 1 else "") + text, 34))
            handles.append(handle)
    hide_unused(axes, len(keys))
    banded = summary[np.isfinite(summary["gflops_low"]) & np.isfinite(summary["gflops_high"])]
    notes = [
        "line: median GFLOP/s",
        kinds_note("band", banded["interval"]),
        "dots: single runs" if not dots.empty else None,
        "dotted: crossover n" if not cross.empty else None,
    ]
    return finish_with_legend(fig, handles, notes, title)


def matmul_figure(tables: Mapping[str, pd.DataFrame], out_path: str | os.PathLike, **style) -> None:
    """GFLOP/s vs n per device (log–log): ``matmul_summary``'s ``gflops`` as a line,
    ``gflops_low``–``gflops_high`` as a band (its ``interval`` in the legend), each ok
    run's ``gflops`` from ``matmul`` as a dot, and the ``crossover`` table's
    ``crossover`` (kind "matmul size") as a dotted line with its ``finding`` in the
    legend. Style keywords: dpi, font_scale, title."""
    render(out_path, style, lambda st: build(tables, st))
