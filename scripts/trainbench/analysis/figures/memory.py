"""Peak and initial memory from the ``memory`` table, one panel per device: the measuring
methods (CUDA allocator peak, sampled MPS memory, host RSS) differ, so panels must not
be compared with each other; each panel names its method. Below each, the memory after
every epoch (``epoch_summary``: reserved/driver memory where the backend has it, else
process RSS), dashed where the ``memory`` table flags growth."""

from __future__ import annotations

import os
from collections.abc import Mapping

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from trainbench.analysis.figures import data
from trainbench.analysis.figures.style import (
    Style,
    bar_style,
    base_device,
    device_color,
    device_order,
    fallback_handle,
    fmt_number,
    is_fallback,
    message,
    new_figure,
    render,
    text_color,
    wrap,
)

MIB, GIB = 2**20, 2**30
UNIT_W = 0.55  # inches per bar slot
EMPTY = "no successful runs with a memory measurement"


def _rows(tables: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    frame = data.table(tables, "memory")
    if not data.has(frame, "workload", "device", "batch_size", "memory_peak_bytes"):
        return pd.DataFrame()
    frame = data.numeric(
        frame, "batch_size", "n", "memory_peak_bytes", "memory_initial_bytes",
        "peak_fraction_of_limit",
    )  # fmt: skip
    frame = frame[(frame["memory_peak_bytes"] > 0) & frame["batch_size"].notna()].copy()
    for column in ("workload", "device"):
        frame[column] = data.strings(frame, column)
    frame["memory_method"] = data.strings(frame, "memory_method", "not recorded")
    frame["dev_label"] = data.device_labels(frame, data.fallback_pairs(tables))
    return frame.sort_values(["workload", "batch_size", "dev_label"], kind="stable")


def _positions(rows: pd.DataFrame) -> tuple[np.ndarray, list, list[float], float]:
    """x of each bar: a workload's bars side by side, a gap between workloads, each group
    at least as wide as its name; the group centres, the separators and the span."""
    xs, centers, edges, pos = [], [], [], 0.0
    for workload in data.sorted_str(rows["workload"]):
        n = int((rows["workload"] == workload).sum())
        room = max(n, (0.075 * len(workload) + 0.2) / UNIT_W)
        first = pos + (room - n) / 2 + 0.5
        xs += [first + k for k in range(n)]
        centers.append((workload, first + (n - 1) / 2))
        pos += room + 0.5
        edges.append(pos - 0.25)
    return np.asarray(xs), centers, edges[:-1], pos - 0.5


def _bar_label(peak: float, fraction: float) -> str:
    text = fmt_number(peak)
    return f"{text}\n{fraction * 100:.0f}% of limit" if np.isfinite(fraction) else text


def _panel(ax: Axes, device: str, rows: pd.DataFrame, width: float, st: Style) -> None:
    xs, centers, edges, span = _positions(rows)
    top = float(rows["memory_peak_bytes"].max())  # the axis range (layout only)
    unit, scale = ("GiB", GIB) if top >= 2 * GIB else ("MiB", MIB)
    for x, r in zip(xs, rows.itertuples(index=False), strict=True):
        ax.bar(x, r.memory_peak_bytes / scale, width=0.72, zorder=2, **bar_style(r.dev_label))
        if np.isfinite(r.memory_initial_bytes):
            ax.bar(
                x, r.memory_initial_bytes / scale, width=0.36, zorder=3, facecolor="white",
                alpha=0.75, edgecolor=device_color(device), linewidth=0.8,
            )  # fmt: skip
        ax.annotate(
            _bar_label(r.memory_peak_bytes / scale, r.peak_fraction_of_limit),
            (x, r.memory_peak_bytes / scale), xytext=(0, 2), textcoords="offset points",
            ha="center", va="bottom", fontsize=7 * st.font_scale,
        )  # fmt: skip
    ax.set_ylim(0, top / scale * 1.25)
    ax.set_xticks(xs, [f"bs {int(b)}" for b in rows["batch_size"]])
    ax.tick_params(axis="x", labelsize=8.5 * st.font_scale)
    names = ax.secondary_xaxis("bottom")
    names.set_xticks([c for _, c in centers], [w for w, _ in centers])
    names.tick_params(axis="x", length=0, pad=20, labelsize=9 * st.font_scale)
    names.spines["bottom"].set_visible(False)
    for edge in edges:
        ax.axvline(edge, color="#bbbbbb", linewidth=0.8, zorder=1)
    ax.set_xlim(0, span)
    ax.grid(axis="x", visible=False)
    ax.set_ylabel(f"memory ({unit})")
    ax.set_title(" / ".join(device_order(rows["dev_label"])), color=text_color(device), weight="bold")  # fmt: skip
    methods = "; ".join(data.sorted_str(rows["memory_method"]))
    ax.set_xlabel(
        wrap(f"measured as: {methods}", max(24, int(width * 11))),
        fontsize=8.5 * st.font_scale, color="#333", labelpad=22,
    )  # fmt: skip


GROWTH_COLUMNS = ("memory_reserved_bytes", "memory_process_rss_bytes")


def _epoch_rows(tables: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    """Per-epoch medians of the growth measure (``epoch_summary``), and its name."""
    frame = data.table(tables, "epoch_summary")
    column = next((c for c in GROWTH_COLUMNS if data.has(frame, c)), None)
    if column is None or not data.has(frame, "workload", "device", "batch_size", "epoch"):
        return pd.DataFrame()
    frame = data.numeric(frame, "batch_size", "epoch", *GROWTH_COLUMNS)
    frame["value"] = frame[GROWTH_COLUMNS[0]] if column == GROWTH_COLUMNS[0] else np.nan
    frame["value"] = frame["value"].where(frame["value"].notna(), frame.get(GROWTH_COLUMNS[1]))
    frame = frame[frame["value"] > 0].copy()
    for name in ("workload", "device"):
        frame[name] = data.strings(frame, name)
    return frame


def _epoch_panel(ax: Axes, device: str, rows: pd.DataFrame, flagged: set, st: Style) -> None:
    """Memory after each epoch's evaluation (reserved/driver memory, else process RSS),
    one line per workload × batch size; lines whose growth the memory table flags are
    marked."""
    if rows.empty:
        ax.set_axis_off()
        return
    top = float(rows["value"].max())
    unit, scale = ("GiB", GIB) if top >= 2 * GIB else ("MiB", MIB)
    keys = sorted(set(zip(rows["workload"], rows["batch_size"], strict=True)))
    for workload, bs in keys:
        line = rows[(rows["workload"] == workload) & (rows["batch_size"] == bs)]
        line = line.sort_values("epoch")
        grows = (workload, device, int(bs)) in flagged
        ax.plot(
            line["epoch"], line["value"] / scale, marker="o", markersize=3,
            linestyle="-" if not grows else "--", color=device_color(device),
            label=f"{workload} bs {int(bs)}" + ("  (grows every epoch)" if grows else ""),
        )  # fmt: skip
    ax.set_xlabel("epoch", fontsize=8.5 * st.font_scale)
    ax.set_ylabel(f"after each epoch ({unit})", fontsize=8.5 * st.font_scale)
    ax.legend(fontsize=7 * st.font_scale, frameon=False)


def _flagged(tables: Mapping[str, pd.DataFrame]) -> set:
    frame = data.table(tables, "memory")
    if not data.has(frame, "growth"):
        return set()
    grows = frame[data.strings(frame, "growth").str.lower().isin(["true", "1", "1.0"])]
    return {(str(w), str(d), int(b)) for w, d, b in zip(
        grows["workload"], grows["device"], grows["batch_size"], strict=True)}  # fmt: skip


def _legend(fig: Figure, rows: pd.DataFrame) -> None:
    counts = sorted({int(n) for n in rows["n"] if np.isfinite(n)})
    of = f" of {' or '.join(map(str, counts))} runs" if counts else ""
    handles = [
        Patch(facecolor="#888888", label=f"peak (median{of})"),
        Patch(facecolor="white", edgecolor="#888888", label=f"at start (inner bar, median{of})"),
    ]
    if any(is_fallback(x) for x in rows["dev_label"]):
        handles.append(fallback_handle())
    fig.legend(handles=handles, loc="outside lower center", ncols=len(handles), frameon=False)


def build(tables: Mapping[str, pd.DataFrame], st: Style) -> Figure:
    """The figure, unsaved (tests read its texts)."""
    title = st.title or "Memory per device (not comparable across panels)"
    rows = _rows(tables)
    if rows.empty:
        return message(title, EMPTY, st)
    devices = device_order({base_device(x) for x in rows["device"]})
    groups = [(d, rows[rows["device"] == d]) for d in devices]
    widths = [max(2.6, UNIT_W * _positions(g)[3] + 1.0) for _, g in groups]
    epochs, flagged = _epoch_rows(tables), _flagged(tables)
    fig = new_figure((max(sum(widths) + 0.4, 6.5), 8.4), st)  # room for the legend
    axes = fig.subplots(2, len(groups), squeeze=False, width_ratios=widths, height_ratios=[3, 2])
    for col, ((device, group), width) in enumerate(zip(groups, widths, strict=True)):
        _panel(axes[0, col], device, group, width, st)
        mine = epochs[epochs["device"] == device] if not epochs.empty else epochs
        _epoch_panel(axes[1, col], device, mine, flagged, st)
    _legend(fig, rows)
    fig.suptitle(title if len(groups) > 1 or st.title else f"Memory on {devices[0]}")
    return fig


def memory_figure(tables: Mapping[str, pd.DataFrame], out_path: str | os.PathLike, **style) -> None:
    """One panel per device from the ``memory`` table: ``memory_peak_bytes`` per workload
    × ``batch_size`` as a bar, ``memory_initial_bytes`` as an inner bar, the
    ``peak_fraction_of_limit`` over each bar and the ``memory_method`` under the panel.
    Style keywords: dpi, font_scale, title."""
    render(out_path, style, lambda st: build(tables, st))
