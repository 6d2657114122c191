"""Speed against energy efficiency: per workload, one point per device × batch size at
(samples per joule, training samples/s) — the ``energy`` table's ``samples_per_joule``
with ``spj_low``–``spj_high`` against the ``speedup`` table's ``median`` with
``low``–``high``. Up and to the right is faster and more frugal. Devices whose energy
could not be measured are named under the panel's title (the ``unavailable`` note)."""

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
    device_color,
    device_order,
    finish_with_legend,
    grid,
    hide_unused,
    kinds_note,
    line_handle,
    log_ticks,
    message,
    new_figure,
    render,
    wants_log,
    whiskers,
    wrap,
)

PANEL = (4.6, 3.6)
EMPTY = "no cell with both a measured energy and a throughput to plot"


def _points(tables: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    """The energy rows with a samples-per-joule value, each with its speedup row's
    throughput (looked up by workload, batch size and device; NaN where absent)."""
    energy = data.table(tables, "energy")
    speed = data.table(tables, "speedup")
    if not data.has(energy, "workload", "device", "batch_size", "samples_per_joule"):
        return pd.DataFrame()
    energy = data.numeric(energy, "batch_size", "samples_per_joule", "spj_low", "spj_high")
    speed = data.numeric(speed, "batch_size", "median", "low", "high")
    for frame in (energy, speed):
        for column in ("workload", "device"):
            frame[column] = data.strings(frame, column)
    energy["spj_interval"] = data.strings(energy, "spj_interval")
    energy["interval"] = data.strings(energy, "interval")
    lookup = {
        (w, b, d): (m, lo, hi, kind)
        for w, b, d, m, lo, hi, kind in zip(
            speed["workload"], speed["batch_size"], speed["device"], speed["median"],
            speed["low"], speed["high"], data.strings(speed, "interval"), strict=True,
        )
    }  # fmt: skip
    found = [
        lookup.get((w, b, d), (np.nan, np.nan, np.nan, ""))
        for w, b, d in zip(energy["workload"], energy["batch_size"], energy["device"], strict=True)
    ]
    names = ("speed", "speed_low", "speed_high", "speed_interval")
    for k, name in enumerate(names):
        energy[name] = [f[k] for f in found]
    energy = data.numeric(energy, *names[:3])
    energy["dev_label"] = data.device_labels(energy, data.fallback_pairs(tables))
    return energy


def _drawable(points: pd.DataFrame) -> pd.DataFrame:
    return points[(points["samples_per_joule"] > 0) & (points["speed"] > 0)]


def _unavailable_note(points: pd.DataFrame) -> str | None:
    """The devices of a workload with no drawable point, with their table note."""
    drawn = set(_drawable(points)["device"])
    notes = data.strings(points, "unavailable")
    missing = []
    for device in device_order(points["device"]):
        if device in drawn:
            continue
        note = next(
            (n for n, d in zip(notes, points["device"], strict=True) if d == device and n), ""
        )
        missing.append(note or f"no energy measured on {device}")
    return "; ".join(missing) or None


def _panel(ax: Axes, points: pd.DataFrame, st: Style) -> None:
    drawn = _drawable(points)
    for label in device_order(drawn["dev_label"]):
        rows = drawn[drawn["dev_label"] == label].sort_values("batch_size", kind="stable")
        color = device_color(label)
        ax.errorbar(
            rows["samples_per_joule"], rows["speed"],
            xerr=whiskers(rows["samples_per_joule"], rows["spj_low"].fillna(rows["samples_per_joule"]),
                          rows["spj_high"].fillna(rows["samples_per_joule"])),
            yerr=whiskers(rows["speed"], rows["speed_low"].fillna(rows["speed"]),
                          rows["speed_high"].fillna(rows["speed"])),
            fmt="o", color=color, ecolor=color, elinewidth=1, capsize=3, markersize=6, zorder=3,
        )  # fmt: skip
        for x, y, size in zip(
            rows["samples_per_joule"], rows["speed"], rows["batch_size"], strict=True
        ):
            ax.annotate(
                f"bs {int(size)}", (x, y), xytext=(4, 4), textcoords="offset points",
                fontsize=7.5 * st.font_scale, color=color,
            )  # fmt: skip
    xs = [*drawn["samples_per_joule"], *drawn["spj_low"], *drawn["spj_high"]]
    ys = [*drawn["speed"], *drawn["speed_low"], *drawn["speed_high"]]
    for axis, values, label in (("x", xs, "samples per joule"), ("y", ys, "training samples/s")):
        if wants_log(values):
            log_ticks(ax, values, axis=axis)
            label += " (log scale)"
        (ax.set_xlabel if axis == "x" else ax.set_ylabel)(label)


def build(tables: Mapping[str, pd.DataFrame], st: Style) -> Figure:
    """The figure, unsaved (tests read its texts)."""
    title = st.title or "Speed vs energy per sample (timed training regions)"
    points = _points(tables)
    if points.empty or _drawable(points).empty:
        return message(title, EMPTY, st)
    workloads = data.sorted_str(_drawable(points)["workload"])
    cols, rows = grid(len(workloads))
    fig = new_figure((cols * PANEL[0] + LEGEND_W, rows * PANEL[1] + 0.5), st)
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    for ax, workload in zip(axes, workloads, strict=False):
        sub = points[points["workload"] == workload]
        _panel(ax, sub, st)
        note = _unavailable_note(sub)
        head = workload + (f"\n{wrap(note, 60)}" if note else "")
        ax.set_title(head, fontsize=(10.5 if not note else 8.5) * st.font_scale)
    hide_unused(axes, len(workloads))
    drawn = _drawable(points)
    notes = [
        "point: median samples per joule (x),\nmedian samples/s (y)",
        kinds_note("x whiskers", drawn["spj_interval"]),
        kinds_note("y whiskers", drawn["speed_interval"]),
        "up and right: faster and\nless energy per sample",
    ]
    handles = [line_handle(x) for x in device_order(drawn["dev_label"])]
    return finish_with_legend(fig, handles, notes, title)


def energy_figure(tables: Mapping[str, pd.DataFrame], out_path: str | os.PathLike, **style) -> None:
    """Samples/s against samples per joule per workload, from the ``energy`` table
    (``samples_per_joule``, ``spj_low``/``spj_high``, ``spj_interval``, ``unavailable``)
    and the ``speedup`` table (``median``, ``low``/``high``, ``interval``), both with
    their intervals as whiskers; computes nothing. Style keywords: dpi, font_scale,
    title."""
    render(out_path, style, lambda st: build(tables, st))
