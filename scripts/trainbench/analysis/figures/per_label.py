"""Per-label F1: the ``per_label`` table's f1 as a heatmap (fixed 0–1 colour scale), the
difference from the baseline's F1 written under each value."""

from __future__ import annotations

import os
from collections.abc import Mapping

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.axes import Axes
from matplotlib.cm import ScalarMappable
from matplotlib.colors import Normalize
from matplotlib.figure import Figure
from trainbench.analysis.figures import data
from trainbench.analysis.figures.style import (
    Style,
    base_device,
    device_key,
    is_fallback,
    message,
    new_figure,
    render,
    text_color,
)

CMAP = "viridis"
EMPTY = "no per-label results (no multi-label workload ran ok)"


def _rows(tables: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    frame = data.table(tables, "per_label")
    if not data.has(frame, "workload", "device", "batch_size", "label", "f1"):
        return pd.DataFrame()
    frame = data.numeric(frame, "batch_size", "f1", "support", "f1_minus_baseline")
    frame = frame[np.isfinite(frame["f1"]) & frame["batch_size"].notna()].copy()
    for column in ("workload", "device", "label"):
        frame[column] = data.strings(frame, column)
    frame["dev_label"] = data.device_labels(frame, data.fallback_pairs(tables))
    return frame


def _baselines(tables: Mapping[str, pd.DataFrame]) -> set[tuple[str, str]]:
    """(workload, device) of each workload's baseline, as the speedup table names it."""
    speed = data.table(tables, "speedup")
    if not data.has(speed, "workload", "baseline"):
        return set()
    return set(zip(data.strings(speed, "workload"), data.strings(speed, "baseline"), strict=True))


def _support(rows: pd.DataFrame, label: str) -> str:
    """ " (n=102)" when every row of the label gives the same eval support, else ""."""
    values = {float(v) for v in rows.loc[rows["label"] == label, "support"] if np.isfinite(v)}
    return f" (n={int(values.pop())})" if len(values) == 1 else ""


def _panel_grid(rows: pd.DataFrame, baselines: set[tuple[str, str]]):
    """The f1 grid (labels × device/batch-size columns), cell texts and tick names."""
    columns = sorted(
        {(d, int(b)) for d, b in zip(rows["dev_label"], rows["batch_size"], strict=True)},
        key=lambda c: (device_key(c[0]), c[1]),
    )
    labels = sorted(set(rows["label"]))
    grid = np.full((len(labels), len(columns)), np.nan)
    text = np.full(grid.shape, "", dtype=object)
    for r in rows.itertuples(index=False):
        i, j = labels.index(r.label), columns.index((r.dev_label, int(r.batch_size)))
        grid[i, j] = r.f1
        text[i, j] = f"{r.f1:.2f}"
        own_baseline = (r.workload, base_device(r.dev_label)) in baselines
        if np.isfinite(r.f1_minus_baseline) and not own_baseline:
            text[i, j] += f"\nΔ {r.f1_minus_baseline:+.2f}".replace("-", "−")
    row_names = [label + _support(rows, label) for label in labels]
    col_names = [
        f"{base_device(d)}\n+cpu-fallback\nbs {b}" if is_fallback(d) else f"{d}\nbs {b}"
        for d, b in columns
    ]
    return grid, text, row_names, col_names, columns


def _draw(ax: Axes, panel, workload: str, st: Style) -> None:
    grid, text, row_names, col_names, columns = panel
    sns.heatmap(
        grid, ax=ax, vmin=0, vmax=1, cmap=CMAP, annot=text, fmt="", cbar=False, linewidths=1,
        linecolor="white", annot_kws={"fontsize": 8.5 * st.font_scale},
        xticklabels=col_names, yticklabels=row_names,
    )  # fmt: skip
    ax.tick_params(axis="y", labelrotation=0)
    ax.tick_params(axis="x", labelrotation=0)
    for tick, (label, _size) in zip(ax.get_xticklabels(), columns, strict=True):
        tick.set_color(text_color(label))
        tick.set_fontweight("bold")
    ax.set_title(workload)
    ax.set_xlabel("device, batch size")
    ax.set_ylabel("label (eval support)")


def build(tables: Mapping[str, pd.DataFrame], st: Style) -> Figure:
    """The figure, unsaved (tests read its texts)."""
    title = st.title or "Per-label F1 at the best epoch"
    rows = _rows(tables)
    if rows.empty:
        return message(title, EMPTY, st)
    baselines = _baselines(tables)
    workloads = data.sorted_str(rows["workload"])
    panels = [_panel_grid(rows[rows["workload"] == w], baselines) for w in workloads]
    ncols = max(len(p[3]) for p in panels)
    name_w = max(len(n) for p in panels for n in p[2]) * 0.075 + 0.5
    longest = max(len(line) for p in panels for c in p[3] for line in c.split("\n"))
    cell_w = max(0.95, 0.075 * longest + 0.25)
    heights = [0.5 * len(p[2]) + 1.15 for p in panels]
    fig = new_figure((name_w + cell_w * ncols + 1.3, sum(heights) + 0.9), st)
    axes = fig.subplots(len(panels), 1, squeeze=False, height_ratios=heights).ravel()
    for ax, workload, panel in zip(axes, workloads, panels, strict=True):
        _draw(ax, panel, workload, st)
    mappable = ScalarMappable(norm=Normalize(vmin=0, vmax=1), cmap=CMAP)
    fig.colorbar(mappable, ax=list(axes), label="F1 (fixed 0–1 scale)", shrink=0.9)
    notes = "cell: median F1 of the runs; Δ: minus the baseline's F1; blank: not run"
    fig.suptitle(title)
    fig.supxlabel(notes, fontsize=8.5 * st.font_scale, color="#333")
    return fig


def per_label_figure(
    tables: Mapping[str, pd.DataFrame], out_path: str | os.PathLike, **style
) -> None:
    """Per workload a heatmap of the ``per_label`` table's ``f1`` (rows: ``label`` with
    its ``support``; columns: device × ``batch_size``), ``f1_minus_baseline`` written
    under each value except in the baseline's columns. Style keywords: dpi,
    font_scale, title."""
    render(out_path, style, lambda st: build(tables, st))
