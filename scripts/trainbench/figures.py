"""Tables -> figures (PNG by default; SVG and PDF by suffix), byte-stable for the same input.

One public function per figure family, each ``(tables..., out_path, **style) -> None``:

- :func:`throughput_vs_batch` -- training samples/s vs batch size, median and 95% CI band
- :func:`speedup_bars` -- speedup vs a baseline device, ratio of medians with a 95% CI
- :func:`epoch_time_distribution` -- timed epoch seconds, box + points
- :func:`loss_curves` -- training loss per epoch, median and min-max band over repeats
- :func:`per_label_heatmap` -- per-label F1 (median over repeats), colour scale fixed to 0-1
- :func:`matmul_gflops` -- GFLOP/s vs n, with each accelerator's crossover vs the baseline
- :func:`memory_bars` -- peak and initial memory, one panel per device because the
  measuring methods (CUDA allocator peak, MPS sampling, host RSS) are not comparable

``FIGURES[name](tables, out_path, baseline)`` calls one of them from a dict of tables
(keys ``runs``, ``epochs``, ``per_label``, ``matmul``), for one Snakemake rule per family.

Style keywords every figure accepts: ``dpi`` (default 110), ``font_scale`` (1.0),
``title`` (replaces the default figure title) and ``seed`` (bootstrap and jitter seed, 0).

Determinism: sizes are a fixed function of what is drawn (the number of panels, bars,
labels), never of text extents; every category is sorted; bootstraps and jitter use
seeded generators; PNG files carry no Software/time metadata, SVG ids use a fixed
hash salt and PDF dates are left out. A table with nothing to draw still gives a small
figure with a centred message, so rules downstream never break.
"""

from __future__ import annotations

import math
import os
import re
import tempfile
import textwrap
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402
from matplotlib.cm import ScalarMappable  # noqa: E402
from matplotlib.colors import Normalize, to_hex  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402
from matplotlib.ticker import (  # noqa: E402
    FixedLocator,
    FuncFormatter,
    LogLocator,
    NullFormatter,
    NullLocator,
)
from scipy import stats  # noqa: E402

__all__ = [
    "FIGURES",
    "crossover_n",
    "device_color",
    "device_order",
    "epoch_time_distribution",
    "loss_curves",
    "matmul_crossover",
    "matmul_gflops",
    "memory_bars",
    "per_label_heatmap",
    "speedup_bars",
    "speedup_table",
    "throughput_vs_batch",
]

FALLBACK_SUFFIX = "+cpu-fallback"
FALLBACK_HATCH = "///"
N_RESAMPLES = 4999
MAX_LOSS_BATCH_SIZES = 4  # loss-curve columns per workload
MAX_COLS = 3  # facet columns before wrapping
MAX_PANEL_W = 7.5  # inches; wider panels get thinner bars instead
MAX_ROW_W = 15.0  # inches of panels side by side before wrapping to a new row

# ----------------------------------------------------------------------------- style


@dataclass(frozen=True)
class _Style:
    dpi: int = 110
    font_scale: float = 1.0
    title: str | None = None
    seed: int = 0


def _style(style: Mapping) -> _Style:
    unknown = sorted(set(style) - {"dpi", "font_scale", "title", "seed"})
    if unknown:
        raise TypeError(f"unknown style keyword(s): {', '.join(unknown)}")
    return _Style(**style)


def _theme(st: _Style) -> None:
    """Seaborn theme with a font that ships with matplotlib (same glyphs on every machine)."""
    sns.set_theme(
        context="notebook",
        style="whitegrid",
        font="DejaVu Sans",
        font_scale=st.font_scale,
        rc={
            "svg.hashsalt": "trainbench",
            "axes.titlesize": 11 * st.font_scale,
            "axes.labelsize": 10 * st.font_scale,
            "xtick.labelsize": 9 * st.font_scale,
            "ytick.labelsize": 9 * st.font_scale,
            "legend.fontsize": 9 * st.font_scale,
            "legend.title_fontsize": 9 * st.font_scale,
            "figure.titlesize": 13 * st.font_scale,
            "axes.titlepad": 6,
        },
    )


# ----------------------------------------------------------------------------- devices

_CPU_THREADS = re.compile(r"^cpu-t(\d+)$")
_CPU_PLAIN = "#5b7186"  # slate blue-grey
_CPU_LIGHT = np.array([0.60, 0.66, 0.72])  # cpu-t1: light grey-blue
_CPU_DARK = np.array([0.10, 0.22, 0.45])  # cpu-t64 and up: dark blue
_MPS = "#e8710a"  # orange
_CUDA = "#2e9e44"  # green
_OTHER = ["#8e5ea2", "#c44e52", "#8c6d31", "#d45f9e", "#4b9fa6", "#7f7f7f"]


def _base_device(label: str) -> str:
    return label[: -len(FALLBACK_SUFFIX)] if label.endswith(FALLBACK_SUFFIX) else label


def device_color(device: str) -> str:
    """A fixed colour per device id (the same in every figure): cpu and cpu-t* in
    grey-blues (darker with more threads), mps orange, cuda green, others by name."""
    device = _base_device(device)
    if device == "cpu":
        return _CPU_PLAIN
    match = _CPU_THREADS.match(device)
    if match:
        pos = min(math.log2(max(int(match.group(1)), 1)) / 6.0, 1.0)
        return to_hex(_CPU_LIGHT + (_CPU_DARK - _CPU_LIGHT) * pos)
    if device == "mps":
        return _MPS
    if device == "cuda" or device.startswith("cuda:"):
        return _CUDA
    return _OTHER[sum(device.encode()) % len(_OTHER)]


def _device_key(label: str) -> tuple:
    device = _base_device(label)
    fallback = label.endswith(FALLBACK_SUFFIX)
    match = _CPU_THREADS.match(device)
    if device == "cpu":
        return (0, 0, device, fallback)
    if match:
        return (0, int(match.group(1)), device, fallback)
    if device == "mps":
        return (1, 0, device, fallback)
    if device == "cuda" or device.startswith("cuda"):
        return (2, 0, device, fallback)
    return (3, 0, device, fallback)


def device_order(labels: Iterable[str]) -> list[str]:
    """cpu first (by thread count), then mps, cuda, then anything else by name; a
    ``+cpu-fallback`` label right after its device."""
    return sorted({str(x) for x in labels}, key=_device_key)


def _is_fallback(label: str) -> bool:
    return label.endswith(FALLBACK_SUFFIX)


def _fallback_pairs(runs: pd.DataFrame | None) -> set[tuple[str, str]]:
    """(workload, device) pairs where some record ran with CPU fallback ops."""
    if runs is None or runs.empty or "device_label" not in runs:
        return set()
    labels = runs["device_label"].astype("string").fillna("")
    hit = runs[labels.str.endswith(FALLBACK_SUFFIX)]
    return {(str(w), str(d)) for w, d in zip(hit["workload"], hit["device"], strict=True)}


def _labelled(frame: pd.DataFrame, fallback: set[tuple[str, str]]) -> pd.DataFrame:
    """Adds ``dev_label``: the device id, with ``+cpu-fallback`` where that workload's device fell back."""
    frame = frame.copy()
    if "device_label" in frame:
        own = {
            (str(w), str(d))
            for w, d, lab in zip(
                frame["workload"], frame["device"], frame["device_label"].astype(str), strict=True
            )
            if lab.endswith(FALLBACK_SUFFIX)
        }
        fallback = fallback | own
    frame["dev_label"] = [
        f"{d}{FALLBACK_SUFFIX}" if (str(w), str(d)) in fallback else str(d)
        for w, d in zip(frame["workload"], frame["device"], strict=True)
    ]
    return frame


def _line_style(label: str) -> dict:
    return {
        "color": device_color(label),
        "linestyle": "--" if _is_fallback(label) else "-",
        "marker": "D" if _is_fallback(label) else "o",
    }


def _text_color(label: str) -> str:
    """The device colour darkened enough to read as text on white."""
    rgb = np.array(matplotlib.colors.to_rgb(device_color(label)))
    return to_hex(rgb * 0.7)


def _bar_style(label: str) -> dict:
    return {
        "facecolor": device_color(label),
        "edgecolor": "white" if not _is_fallback(label) else "black",
        "hatch": FALLBACK_HATCH if _is_fallback(label) else None,
        "linewidth": 0.6,
    }


def _line_handle(label: str) -> Line2D:
    return Line2D([], [], markersize=5, linewidth=1.8, label=label, **_line_style(label))


def _patch_handle(label: str) -> Patch:
    return Patch(label=label, **_bar_style(label))


def _note_handle(text: str) -> Line2D:
    return Line2D([], [], linestyle="none", marker=None, label=text)


# ----------------------------------------------------------------------------- helpers


def _has(frame: pd.DataFrame | None, *columns: str) -> bool:
    return frame is not None and not frame.empty and all(c in frame.columns for c in columns)


def _numeric(frame: pd.DataFrame, *columns: str) -> pd.DataFrame:
    frame = frame.copy()
    for column in columns:
        frame[column] = pd.to_numeric(frame[column], errors="coerce")
    return frame


def _ok(runs: pd.DataFrame) -> pd.DataFrame:
    if "status" not in runs:
        return runs
    return runs[runs["status"].astype(str) == "ok"]


def _sorted_str(values: Iterable) -> list[str]:
    return sorted({str(v) for v in values})


def _median_ci(values: Sequence[float], seed: int) -> tuple[float, float]:
    """95% percentile-bootstrap CI of the median; NaNs with fewer than two values."""
    values = np.asarray(values, dtype=float)
    if values.size < 2:
        return (math.nan, math.nan)
    if np.all(values == values[0]):
        return (float(values[0]), float(values[0]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = stats.bootstrap(
            (values,),
            lambda x, axis: np.median(x, axis=axis),
            vectorized=True,
            n_resamples=N_RESAMPLES,
            method="percentile",
            confidence_level=0.95,
            rng=np.random.default_rng(seed),
        )
    return (float(res.confidence_interval.low), float(res.confidence_interval.high))


def _ratio_ci(num: Sequence[float], den: Sequence[float], seed: int) -> tuple[float, float]:
    """95% percentile-bootstrap CI of median(num) / median(den), each resampled on its own."""
    num = np.asarray(num, dtype=float)
    den = np.asarray(den, dtype=float)
    if num.size < 2 or den.size < 2:
        return (math.nan, math.nan)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = stats.bootstrap(
            (num, den),
            lambda a, b, axis: np.median(a, axis=axis) / np.median(b, axis=axis),
            vectorized=True,
            paired=False,
            n_resamples=N_RESAMPLES,
            method="percentile",
            confidence_level=0.95,
            rng=np.random.default_rng(seed),
        )
    return (float(res.confidence_interval.low), float(res.confidence_interval.high))


def _panel_rows(
    widths: Sequence[float], max_row: float = MAX_ROW_W
) -> tuple[list[float], int, int]:
    """Panel widths capped at MAX_PANEL_W, and columns/rows so that no row of panels is
    wider than ``max_row`` inches (many batch sizes wrap rather than stretch)."""
    widths = [min(w, MAX_PANEL_W) for w in widths]
    cols = max(1, min(len(widths), MAX_COLS))
    while (
        cols > 1 and max(sum(widths[i : i + cols]) for i in range(0, len(widths), cols)) > max_row
    ):
        cols -= 1
    return widths, cols, math.ceil(len(widths) / cols)


def _grid(n: int, max_cols: int = MAX_COLS) -> tuple[int, int]:
    cols = max(1, min(n, max_cols))
    return cols, max(1, math.ceil(n / cols))


def _wants_log(values: Iterable[float], span: float = 10.0) -> bool:
    values = np.asarray([v for v in values if np.isfinite(v) and v > 0], dtype=float)
    return values.size > 1 and values.max() / values.min() > span


def _fmt_number(value: float) -> str:
    if value >= 100:
        return f"{value:,.0f}"
    if value >= 10:
        return f"{value:.1f}".rstrip("0").rstrip(".")
    if value >= 1:
        return f"{value:.2f}".rstrip("0").rstrip(".")
    return f"{value:.2g}"


def _log2_batch_axis(ax, sizes: Iterable[int], rotate_after: int = 6) -> None:
    sizes = sorted({int(s) for s in sizes})
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator(sizes))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{int(round(v))}"))
    ax.xaxis.set_minor_locator(NullLocator())
    if len(sizes) == 1:
        ax.set_xlim(sizes[0] / 2, sizes[0] * 2)
    else:
        ax.set_xlim(sizes[0] / 2**0.4, sizes[-1] * 2**0.4)
    if len(sizes) > rotate_after:
        ax.tick_params(axis="x", labelrotation=45)


def _log_y_ticks(ax, values: Iterable[float], suffix: str = "") -> None:
    """Log y axis with plain-number ticks (2,000 rather than 2x10^3): 1-2-5 steps over up
    to two decades (finer below 1.2), 1-3 up to four, powers of ten beyond."""
    values = np.asarray([v for v in values if np.isfinite(v) and v > 0], dtype=float)
    decades = math.log10(values.max() / values.min()) if values.size else 0.0
    if decades <= 1.2:
        subs = (1.0, 1.5, 2.0, 3.0, 5.0, 7.0)
    elif decades <= 2.2:
        subs = (1.0, 2.0, 5.0)
    else:
        subs = (1.0, 3.0) if decades <= 4.2 else (1.0,)
    ax.set_yscale("log")
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=subs))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: _fmt_number(v) + suffix))
    ax.yaxis.set_minor_locator(NullLocator())
    ax.yaxis.set_minor_formatter(NullFormatter())


def _new_figure(size: tuple[float, float], st: _Style, **kwargs):
    return plt.figure(figsize=size, dpi=st.dpi, layout="constrained", **kwargs)


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _save(fig, out_path: str | os.PathLike, st: _Style) -> None:
    """Atomic, byte-stable save: a temporary file in the same folder, then os.replace."""
    path = Path(out_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fmt = (path.suffix.lstrip(".") or "png").lower()
    metadata = {
        "png": {"Software": None},
        "svg": {"Date": None, "Creator": None},
        "pdf": {"Creator": None, "Producer": None, "CreationDate": None, "ModDate": None},
    }.get(fmt)
    if metadata is None:
        raise ValueError(f"unsupported figure format {fmt!r} (png, svg or pdf)")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            fig.savefig(handle, format=fmt, dpi=st.dpi, metadata=metadata)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes it 0600; a figure is for reading
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    finally:
        plt.close(fig)


def _render(out_path, style: Mapping, draw: Callable[[_Style], object]) -> None:
    """Theme, draw, save, inside an rc_context so global matplotlib state is left alone."""
    st = _style(style)
    with matplotlib.rc_context():
        _theme(st)
        fig = draw(st)
        _save(fig, out_path, st)


def _message(title: str, message: str, st: _Style):
    fig = plt.figure(figsize=(6.4, 2.4), dpi=st.dpi)
    fig.text(0.5, 0.78, st.title or title, ha="center", va="center", fontsize=12, weight="bold")
    fig.text(
        0.5, 0.42, textwrap.fill(message, 70), ha="center", va="center", fontsize=11, color="#444"
    )
    return fig


def _figure_legend(fig, handles: list, title: str | None = None, notes: Sequence[str] = ()):
    handles = list(handles) + [_note_handle(n) for n in notes]
    if handles:
        fig.legend(
            handles=handles,
            loc="outside right upper",
            title=title,
            frameon=False,
            handlelength=2.2,
        )


def _wrap(text: str, width: int) -> str:
    return "\n".join(textwrap.wrap(str(text), width)) if text else ""


# ----------------------------------------------------------------------------- 1 throughput

_PANEL = (4.3, 3.3)
_LEGEND_W = 2.3


def _not_ok_note(runs: pd.DataFrame, workload: str, drawn: set[str]) -> str | None:
    """Devices of a workload with records but no ok runs, named with their statuses."""
    if "status" not in runs:
        return None
    rows = runs[runs["workload"].astype(str) == workload]
    missing = []
    for device in device_order(rows["device"].astype(str)):
        if device in drawn or _base_device(device) in {_base_device(d) for d in drawn}:
            continue
        statuses = _sorted_str(rows.loc[rows["device"].astype(str) == device, "status"])
        missing.append(f"{device} ({'/'.join(statuses)})")
    return "no ok runs: " + ", ".join(missing) if missing else None


def throughput_vs_batch(runs: pd.DataFrame, out_path: str | os.PathLike, **style) -> None:
    """Training samples/s vs batch size per device (log2 x): the median over repeats as a
    line, a 95% percentile-bootstrap CI of that median as a band, each repeat as a dot;
    one panel per training workload."""

    def draw(st: _Style):
        title = st.title or "Training throughput vs batch size"
        if not _has(runs, "workload", "device", "batch_size", "samples_per_s"):
            return _message(title, "no successful runs of a training workload to plot", st)
        ok = _numeric(_ok(runs), "batch_size", "samples_per_s")
        ok = ok[ok["samples_per_s"].notna() & (ok["samples_per_s"] > 0)]
        if ok.empty:
            return _message(title, "no successful runs of a training workload to plot", st)
        ok = _labelled(ok, _fallback_pairs(runs))
        workloads = _sorted_str(ok["workload"])
        cols, rows = _grid(len(workloads))
        fig = _new_figure((cols * _PANEL[0] + _LEGEND_W, rows * _PANEL[1] + 0.5), st)
        axes = fig.subplots(rows, cols, squeeze=False).ravel()
        labels_seen: set[str] = set()
        any_band = False
        for ax, workload in zip(axes, workloads, strict=False):
            sub = ok[ok["workload"].astype(str) == workload]
            values = []
            for label in device_order(sub["dev_label"]):
                dev = sub[sub["dev_label"] == label]
                sizes = sorted(dev["batch_size"].astype(int).unique())
                med, lo, hi = [], [], []
                for size in sizes:
                    v = dev.loc[dev["batch_size"] == size, "samples_per_s"].to_numpy(float)
                    med.append(float(np.median(v)))
                    low, high = _median_ci(v, st.seed)
                    lo.append(low)
                    hi.append(high)
                    values.extend(v)
                style_ = _line_style(label)
                ax.plot(sizes, med, linewidth=1.8, markersize=5, zorder=3, **style_)
                if np.isfinite(lo).any():
                    any_band = True
                    ax.fill_between(
                        sizes, lo, hi, color=style_["color"], alpha=0.22, linewidth=0, zorder=2
                    )
                ax.scatter(
                    dev["batch_size"].astype(int),
                    dev["samples_per_s"],
                    s=9,
                    color=style_["color"],
                    alpha=0.55,
                    linewidths=0,
                    zorder=4,
                )
                labels_seen.add(label)
            _log2_batch_axis(ax, sub["batch_size"].astype(int))
            log_y = _wants_log(values)
            if log_y:
                _log_y_ticks(ax, values)
            else:
                ax.set_ylim(bottom=0)
                ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
            note = _not_ok_note(runs, workload, set(sub["device"].astype(str)))
            ax.set_title(workload + (f"\n{note}" if note else ""), fontsize=10.5 * st.font_scale)
            ax.set_xlabel("batch size (log2 scale)")
            ax.set_ylabel("training samples/s" + (" (log scale)" if log_y else ""))
        for ax in axes[len(workloads) :]:
            ax.set_axis_off()
        notes = ["line: median of repeats", "dots: single repeats"]
        if any_band:
            notes.insert(1, "band: 95% bootstrap CI")
        _figure_legend(
            fig, [_line_handle(x) for x in device_order(labels_seen)], "device", notes=notes
        )
        fig.suptitle(title)
        return fig

    _render(out_path, style, draw)


# ----------------------------------------------------------------------------- 2 speedup


def _default_baseline(runs: pd.DataFrame) -> str | None:
    from .analysis import baseline_device

    if not _has(runs, "status", "backend", "device", "torch_threads"):
        return None
    return baseline_device(runs)


def speedup_table(
    runs: pd.DataFrame, baseline: str | Mapping[str, str], seed: int = 0
) -> pd.DataFrame:
    """Speedup of each device over ``baseline`` per workload x batch size: median training
    samples/s ratio, with a 95% percentile-bootstrap CI (both devices' repeats resampled
    independently). Columns: workload, batch_size, device, dev_label, speedup, ci_low, ci_high,
    n, n_baseline."""
    columns = [
        "workload", "batch_size", "device", "dev_label", "speedup", "ci_low", "ci_high",
        "n", "n_baseline",
    ]  # fmt: skip
    if not _has(runs, "workload", "device", "batch_size", "samples_per_s"):
        return pd.DataFrame(columns=columns)
    ok = _numeric(_ok(runs), "batch_size", "samples_per_s")
    ok = ok[ok["samples_per_s"].notna() & (ok["samples_per_s"] > 0)]
    ok = _labelled(ok, _fallback_pairs(runs))
    rows = []
    for (workload, size), group in ok.groupby(["workload", "batch_size"], sort=True):
        # One baseline for all, or each workload's own (CPU thread variants differ).
        wl_base = baseline.get(str(workload)) if isinstance(baseline, Mapping) else baseline
        base = group.loc[group["device"].astype(str) == wl_base, "samples_per_s"].to_numpy(float)
        if base.size == 0:
            continue
        for label in device_order(group["dev_label"]):
            if _base_device(label) == wl_base:
                continue
            v = group.loc[group["dev_label"] == label, "samples_per_s"].to_numpy(float)
            low, high = _ratio_ci(v, base, seed)
            rows.append(
                {
                    "workload": str(workload),
                    "batch_size": int(size),
                    "device": _base_device(label),
                    "dev_label": label,
                    "speedup": float(np.median(v) / np.median(base)),
                    "ci_low": low,
                    "ci_high": high,
                    "n": int(v.size),
                    "n_baseline": int(base.size),
                }
            )
    return pd.DataFrame(rows, columns=columns)


def speedup_bars(
    runs: pd.DataFrame, out_path: str | os.PathLike, baseline: str | None = None, **style
) -> None:
    """Speedup vs ``baseline`` (default: analysis.baseline_device) per workload x batch size:
    bars from 1 (up = faster, down = slower) on a log axis, 95% bootstrap CI whiskers of the
    ratio of medians, a dashed line at 1; one panel per workload."""

    def draw(st: _Style):
        if baseline:
            base: str | dict[str, str] | None = baseline
            title = st.title or f"Training speedup vs {baseline}"
        else:
            # Each workload against its own CPU baseline, as the speedup table does.
            base = {}
            if _has(runs, "workload"):
                for workload in _sorted_str(runs["workload"].dropna().unique()):
                    wl_base = _default_baseline(runs[runs["workload"] == workload])
                    if wl_base:
                        base[workload] = wl_base
            title = st.title or "Training speedup vs each workload's CPU baseline"
        if not base:
            return _message(title, "no baseline device: no successful CPU runs to compare with", st)
        table = speedup_table(runs, base, st.seed)
        base_name = base if isinstance(base, str) else "baseline"
        if table.empty:
            return _message(
                title,
                "no workload x batch size with successful runs on both the baseline and another device",
                st,
            )
        workloads = _sorted_str(table["workload"])
        labels = device_order(table["dev_label"])
        widths = []
        for workload in workloads:
            sub = table[table["workload"] == workload]
            widths.append(max(2.6, 0.55 * len(sub) + 0.35 * sub["batch_size"].nunique() + 1.0))
        widths, cols, rows = _panel_rows(widths)
        row_widths = [sum(widths[i : i + cols]) for i in range(0, len(widths), cols)]
        fig = _new_figure((max(row_widths) + _LEGEND_W, rows * 3.6 + 0.5), st)
        ratios = widths if rows == 1 else None  # one row: panels as wide as their bars
        axes = fig.subplots(rows, cols, squeeze=False, width_ratios=ratios).ravel()
        lo_all = min(1.0, float(np.nanmin(table[["speedup", "ci_low"]].to_numpy(float))))
        hi_all = max(1.0, float(np.nanmax(table[["speedup", "ci_high"]].to_numpy(float))))
        ymin, ymax = lo_all / 1.6, hi_all * 1.9
        any_single = False
        for ax, workload, panel_w in zip(axes, workloads, widths, strict=False):
            sub = table[table["workload"] == workload]
            sizes = sorted(sub["batch_size"].unique())
            present = [x for x in labels if x in set(sub["dev_label"])]
            width = 0.8 / max(len(present), 1)
            # value labels only where a bar is wide enough to carry one
            labelled = (panel_w - 1.0) * width / len(sizes) >= 0.3
            for i, size in enumerate(sizes):
                for j, label in enumerate(present):
                    row = sub[(sub["batch_size"] == size) & (sub["dev_label"] == label)]
                    if row.empty:
                        continue
                    r = row.iloc[0]
                    x = i - 0.4 + width * (j + 0.5)
                    ax.bar(x, r.speedup - 1, bottom=1, width=width * 0.92, **_bar_style(label))
                    top = r.speedup
                    if np.isfinite(r.ci_low):
                        ax.errorbar(
                            x,
                            r.speedup,
                            yerr=[[r.speedup - r.ci_low], [r.ci_high - r.speedup]],
                            color="black",
                            capsize=3,
                            linewidth=1,
                            zorder=4,
                        )
                        top = r.ci_high if r.speedup >= 1 else r.ci_low
                    text = f"{r.speedup:.1f}×" if r.speedup < 10 else f"{r.speedup:.0f}×"
                    text = text if labelled else ""
                    if r.n < 2 or r.n_baseline < 2:
                        text += "\nn=1" if text else "n=1"
                        any_single = True
                    up = r.speedup >= 1
                    ax.annotate(
                        text,
                        (x, top),
                        xytext=(0, 3 if up else -3),
                        textcoords="offset points",
                        ha="center",
                        va="bottom" if up else "top",
                        fontsize=8 * st.font_scale,
                        zorder=5,
                    )
            ax.axhline(1, color="black", linestyle="--", linewidth=1, zorder=1)
            _log_y_ticks(ax, [ymin, ymax], suffix="×")
            ax.set_ylim(ymin, ymax)
            ax.set_xticks(range(len(sizes)), [str(s) for s in sizes])
            ax.set_xlim(-0.6, len(sizes) - 0.4)
            ax.grid(axis="x", visible=False)
            ax.set_title(
                f"{workload} (vs {base[workload]})" if isinstance(base, dict) else workload
            )
            ax.set_xlabel("batch size")
            ax.set_ylabel(f"speedup vs {base_name} (log scale)")
        for ax in axes[len(workloads) :]:
            ax.set_axis_off()
        notes = [
            f"bar: median samples/s over\nmedian {base_name} samples/s",
            "whisker: 95% bootstrap CI",
            "dashed: 1× (no change)",
        ]
        if any_single:
            notes.append("n=1: a single repeat, no CI")
        trained = _ok(runs)
        trained = trained[pd.to_numeric(trained["samples_per_s"], errors="coerce") > 0]
        unmatched = sorted(set(trained["workload"].astype(str)) - set(workloads))
        if unmatched:
            notes.append(_wrap(f"no {base_name} runs to compare: {', '.join(unmatched)}", 28))
        _figure_legend(fig, [_patch_handle(x) for x in labels], "device", notes)
        fig.suptitle(title)
        return fig

    _render(out_path, style, draw)


# ----------------------------------------------------------------------------- 3 epoch time


def epoch_time_distribution(
    epochs: pd.DataFrame,
    out_path: str | os.PathLike,
    runs: pd.DataFrame | None = None,
    **style,
) -> None:
    """Timed epoch seconds per device and batch size: a box per device within each batch
    size and every epoch as a point; one panel per workload. ``runs`` (optional) marks
    devices that ran with CPU fallback ops."""

    def draw(st: _Style):
        title = st.title or "Timed epoch duration"
        if not _has(epochs, "workload", "device", "batch_size", "timed_seconds"):
            return _message(title, "no successful runs of a training workload with epochs", st)
        data = _numeric(epochs, "batch_size", "timed_seconds")
        data = data[data["timed_seconds"].notna() & (data["timed_seconds"] > 0)]
        if data.empty:
            return _message(title, "no successful runs of a training workload with epochs", st)
        data = _labelled(data, _fallback_pairs(runs))
        workloads = _sorted_str(data["workload"])
        widths = []
        for workload in workloads:
            sub = data[data["workload"].astype(str) == workload]
            widths.append(max(3.2, 0.42 * sub["batch_size"].nunique() * sub["dev_label"].nunique()))
        widths, cols, rows = _panel_rows([w + 0.7 for w in widths])
        widths = [w - 0.7 for w in widths]
        row_widths = [sum(widths[i : i + cols]) + 0.7 * cols for i in range(0, len(widths), cols)]
        fig = _new_figure((max(row_widths) + _LEGEND_W, rows * 3.5 + 0.5), st)
        ratios = [w + 0.7 for w in widths] if rows == 1 else None
        axes = fig.subplots(rows, cols, squeeze=False, width_ratios=ratios).ravel()
        rng = np.random.default_rng(st.seed)
        labels_all = device_order(data["dev_label"])
        for ax, workload in zip(axes, workloads, strict=False):
            sub = data[data["workload"].astype(str) == workload]
            sizes = sorted(sub["batch_size"].astype(int).unique())
            present = [x for x in labels_all if x in set(sub["dev_label"])]
            width = 0.8 / max(len(present), 1)
            for i, size in enumerate(sizes):
                for j, label in enumerate(present):
                    v = sub.loc[
                        (sub["batch_size"] == size) & (sub["dev_label"] == label), "timed_seconds"
                    ].to_numpy(float)
                    if v.size == 0:
                        continue
                    x = i - 0.4 + width * (j + 0.5)
                    color = device_color(label)
                    box = ax.boxplot(
                        v,
                        positions=[x],
                        widths=width * 0.75,
                        patch_artist=True,
                        showfliers=False,
                        whis=(0, 100),
                        medianprops={"color": "black", "linewidth": 1.2},
                        whiskerprops={"color": color},
                        capprops={"color": color},
                        manage_ticks=False,
                    )
                    for patch in box["boxes"]:
                        patch.set(**_bar_style(label), alpha=0.45)
                        patch.set_edgecolor(color)
                    jitter = rng.uniform(-1, 1, v.size) * width * 0.22
                    ax.scatter(
                        x + jitter, v, s=11, color=color, edgecolors="black", linewidths=0.3,
                        marker=_line_style(label)["marker"],
                        zorder=4,
                    )  # fmt: skip
            if _wants_log(sub["timed_seconds"]):
                _log_y_ticks(ax, sub["timed_seconds"])
                ax.set_ylabel("timed epoch (s, log scale)")
            else:
                ax.set_ylim(bottom=0)
                ax.set_ylabel("timed epoch (s)")
            ax.set_xticks(range(len(sizes)), [str(s) for s in sizes])
            ax.set_xlim(-0.6, len(sizes) - 0.4)
            ax.grid(axis="x", visible=False)
            ax.set_xlabel("batch size")
            ax.set_title(workload)
        for ax in axes[len(workloads) :]:
            ax.set_axis_off()
        notes = ["box: quartiles, whiskers min-max", "points: single epochs (all repeats)"]
        _figure_legend(fig, [_patch_handle(x) for x in labels_all], "device", notes)
        fig.suptitle(title)
        return fig

    _render(out_path, style, draw)


# ----------------------------------------------------------------------------- 4 loss curves


def _pick_batch_sizes(sizes: Sequence[int], limit: int = MAX_LOSS_BATCH_SIZES) -> list[int]:
    """All sizes when few; else the smallest, the largest and evenly spaced ones between."""
    sizes = sorted(set(int(s) for s in sizes))
    if len(sizes) <= limit:
        return sizes
    idx = np.unique(np.round(np.linspace(0, len(sizes) - 1, limit)).astype(int))
    return [sizes[i] for i in idx]


def loss_curves(
    epochs: pd.DataFrame,
    out_path: str | os.PathLike,
    runs: pd.DataFrame | None = None,
    **style,
) -> None:
    """Training loss per epoch per device: the median over repeats as a line, min-max over
    repeats as a band; one row per workload, one column per batch size (at most four per
    workload: the smallest, the largest and evenly spaced ones between)."""

    def draw(st: _Style):
        title = st.title or "Training loss per epoch"
        if not _has(epochs, "workload", "device", "batch_size", "epoch", "train_loss"):
            return _message(title, "no successful runs of a training workload with epochs", st)
        data = _numeric(epochs, "batch_size", "epoch", "train_loss")
        data = data[data["train_loss"].notna() & data["epoch"].notna()]
        if data.empty:
            return _message(title, "no successful runs of a training workload with epochs", st)
        data = _labelled(data, _fallback_pairs(runs))
        workloads = _sorted_str(data["workload"])
        picked = {
            w: _pick_batch_sizes(data.loc[data["workload"].astype(str) == w, "batch_size"])
            for w in workloads
        }
        ncols = max(len(v) for v in picked.values())
        nrows = len(workloads)
        fig = _new_figure((ncols * 3.5 + _LEGEND_W, nrows * 2.9 + 0.5), st)
        axes = fig.subplots(nrows, ncols, squeeze=False)
        labels_all = device_order(data["dev_label"])
        notes = ["line: median of repeats", "band: min-max of repeats"]
        subset: dict[str, list[str]] = {}
        for r, workload in enumerate(workloads):
            sub = data[data["workload"].astype(str) == workload]
            all_sizes = sorted(sub["batch_size"].astype(int).unique())
            if len(picked[workload]) < len(all_sizes):
                shown = ", ".join(map(str, picked[workload]))
                subset.setdefault(f"batch sizes {shown} of {len(all_sizes)}", []).append(workload)
            row_axes = axes[r]
            for c, size in enumerate(picked[workload]):
                ax = row_axes[c]
                cell = sub[sub["batch_size"] == size]
                for label in device_order(cell["dev_label"]):
                    dev = cell[cell["dev_label"] == label]
                    agg = dev.groupby("epoch")["train_loss"].agg(["median", "min", "max"])
                    agg = agg.sort_index()
                    style_ = _line_style(label)
                    ax.plot(agg.index, agg["median"], linewidth=1.6, markersize=4, **style_)
                    ax.fill_between(
                        agg.index, agg["min"], agg["max"], color=style_["color"], alpha=0.2,
                        linewidth=0,
                    )  # fmt: skip
                epochs_here = sorted(cell["epoch"].astype(int).unique())
                if len(epochs_here) <= 12:
                    ax.set_xticks(epochs_here)
                span = epochs_here[-1] - epochs_here[0]
                pad = 0.5 if span == 0 else max(0.08 * span, 0.15)
                ax.set_xlim(epochs_here[0] - pad, epochs_here[-1] + pad)
                ax.set_title(f"{workload} · batch {size}", fontsize=10 * st.font_scale)
                ax.set_xlabel("epoch")
                if c == 0:
                    ax.set_ylabel("training loss")
            for c in range(len(picked[workload]), ncols):
                row_axes[c].set_axis_off()
            # one y range per workload row, so batch sizes compare at a glance
            used = [row_axes[c] for c in range(len(picked[workload]))]
            lo = min(ax.get_ylim()[0] for ax in used)
            hi = max(ax.get_ylim()[1] for ax in used)
            for ax in used:
                ax.set_ylim(lo, hi)
        for text, names in sorted(subset.items()):
            where = "" if len(subset) == 1 else f" ({', '.join(names)})"
            notes.append(_wrap(f"shown: {text}{where}", 34))
        _figure_legend(fig, [_line_handle(x) for x in labels_all], "device", notes)
        fig.suptitle(title)
        return fig

    _render(out_path, style, draw)


# ----------------------------------------------------------------------------- 5 per-label F1


def per_label_heatmap(
    per_label: pd.DataFrame,
    out_path: str | os.PathLike,
    runs: pd.DataFrame | None = None,
    **style,
) -> None:
    """Per-label F1 at the best epoch, median over repeats: one heatmap per workload with a
    row per label (support in brackets) and a column per device x batch size; values
    written in the cells; one colour scale fixed to 0-1 for every panel."""

    def draw(st: _Style):
        title = st.title or "Per-label F1 (best epoch, median over repeats)"
        if not _has(per_label, "workload", "device", "batch_size", "label", "f1"):
            return _message(title, "no per-label results (no multi-label workload ran ok)", st)
        data = _numeric(per_label, "batch_size", "f1")
        data = data[data["f1"].notna()]
        if data.empty:
            return _message(title, "no per-label results (no multi-label workload ran ok)", st)
        data = _labelled(data, _fallback_pairs(runs))
        data["label"] = data["label"].astype(str)
        for column in ("support", "predicted_positive"):
            data[column] = (
                pd.to_numeric(data[column], errors="coerce") if column in data else np.nan
            )
        workloads = _sorted_str(data["workload"])
        panels = []
        for workload in workloads:
            sub = data[data["workload"].astype(str) == workload]
            agg = (
                sub.groupby(["label", "dev_label", "batch_size"], sort=False)
                .agg(
                    f1=("f1", "median"),
                    support=("support", "median"),
                    predicted=("predicted_positive", "median"),
                )
                .reset_index()
            )
            columns = sorted(
                {(d, int(b)) for d, b in zip(agg["dev_label"], agg["batch_size"], strict=True)},
                key=lambda c: (_device_key(c[0]), c[1]),
            )
            labels = sorted(agg["label"].unique())
            grid = np.full((len(labels), len(columns)), np.nan)
            text = np.full(grid.shape, "", dtype=object)
            for r in agg.itertuples(index=False):
                i, j = labels.index(r.label), columns.index((r.dev_label, int(r.batch_size)))
                grid[i, j] = r.f1
                text[i, j] = f"{r.f1:.2f}" + ("*" if r.predicted == 0 else "")
            support = agg.groupby("label")["support"].median()
            row_names = [
                f"{lab} (n={int(support[lab])})" if np.isfinite(support[lab]) else lab
                for lab in labels
            ]
            col_names = [
                f"{_base_device(d)}\n{FALLBACK_SUFFIX}\nbs {b}"
                if _is_fallback(d)
                else f"{d}\nbs {b}"
                for d, b in columns
            ]
            panels.append((workload, grid, text, row_names, col_names, columns))
        ncols = max(len(p[4]) for p in panels)
        name_w = max(len(n) for p in panels for n in p[3]) * 0.075 + 0.5
        longest = max(len(line) for p in panels for c in p[4] for line in c.split("\n"))
        cell_w = max(0.95, 0.075 * longest + 0.25)
        heights = [0.42 * len(p[3]) + 1.05 for p in panels]
        fig = _new_figure((name_w + cell_w * ncols + 1.3, sum(heights) + 0.9), st)
        axes = fig.subplots(len(panels), 1, squeeze=False, height_ratios=heights).ravel()
        cmap = "viridis"
        starred = False
        for ax, (workload, grid, text, row_names, col_names, columns) in zip(
            axes, panels, strict=True
        ):
            starred = starred or any(str(t).endswith("*") for t in text.ravel())
            sns.heatmap(
                grid,
                ax=ax,
                vmin=0,
                vmax=1,
                cmap=cmap,
                annot=text,
                fmt="",
                cbar=False,
                linewidths=1,
                linecolor="white",
                annot_kws={"fontsize": 9 * st.font_scale},
                xticklabels=col_names,
                yticklabels=row_names,
            )
            ax.tick_params(axis="y", labelrotation=0)
            ax.tick_params(axis="x", labelrotation=0)
            for tick, (label, _bs) in zip(ax.get_xticklabels(), columns, strict=True):
                tick.set_color(_text_color(label))
                tick.set_fontweight("bold")
            ax.set_title(workload)
            ax.set_xlabel("device, batch size")
            ax.set_ylabel("label (eval support)")
        norm = Normalize(vmin=0, vmax=1)
        mappable = ScalarMappable(norm=norm, cmap=cmap)
        fig.colorbar(mappable, ax=list(axes), label="F1 (fixed 0–1 scale)", shrink=0.9)
        notes = ["blank cell: not run"]
        if starred:
            notes.insert(0, "* no positive predictions for that label")
        fig.suptitle(title)
        fig.supxlabel("; ".join(notes), fontsize=8.5 * st.font_scale, color="#333")
        return fig

    _render(out_path, style, draw)


# ----------------------------------------------------------------------------- 6 matmul


def crossover_n(
    sizes: Sequence[float], accelerator_s: Sequence[float], baseline_s: Sequence[float]
) -> int | None:
    """The smallest n from which the accelerator's time is below the baseline's for that
    and every larger measured n; None when it is not faster at the largest n. Sizes where
    either time is missing are left out."""
    n = np.asarray(sizes, dtype=float)
    a = np.asarray(accelerator_s, dtype=float)
    b = np.asarray(baseline_s, dtype=float)
    keep = np.isfinite(n) & np.isfinite(a) & np.isfinite(b)
    n, a, b = n[keep], a[keep], b[keep]
    if n.size == 0:
        return None
    order = np.argsort(n, kind="stable")
    n, faster = n[order], (a < b)[order]
    if not faster[-1]:
        return None
    start = n.size - 1
    while start > 0 and faster[start - 1]:
        start -= 1
    return int(n[start])


def _matmul_medians(matmul: pd.DataFrame) -> pd.DataFrame:
    data = _numeric(matmul, "n", "median_s", "gflops")
    if "dtype" not in data:
        data["dtype"] = ""
    data["dtype"] = data["dtype"].astype("string").fillna("").astype(str)
    return (
        data.groupby(["dtype", "device", "n"], sort=True)
        .agg(
            median_s=("median_s", "median"),
            gflops=("gflops", "median"),
            gflops_min=("gflops", "min"),
            gflops_max=("gflops", "max"),
        )
        .reset_index()
    )


def matmul_crossover(
    matmul: pd.DataFrame, device: str, baseline: str, dtype: str | None = None
) -> int | None:
    """:func:`crossover_n` on the matmul table: median over repeats of each size's median time."""
    if not _has(matmul, "device", "n", "median_s"):
        return None
    med = _matmul_medians(matmul)
    if dtype is not None:
        med = med[med["dtype"] == dtype]
    a = med[med["device"].astype(str) == device].set_index("n")["median_s"]
    b = med[med["device"].astype(str) == baseline].set_index("n")["median_s"]
    both = a.to_frame("a").join(b.rename("b"), how="inner")
    return crossover_n(both.index.to_numpy(), both["a"].to_numpy(), both["b"].to_numpy())


def _matmul_baseline(matmul: pd.DataFrame) -> str | None:
    devices = _sorted_str(matmul["device"])
    cpus = [d for d in devices if d == "cpu" or _CPU_THREADS.match(d)]
    if not cpus:
        return None
    if "torch_threads" in matmul:
        threads = pd.to_numeric(matmul["torch_threads"], errors="coerce").fillna(0)
        best = threads.groupby(matmul["device"].astype(str)).max()
        return max(cpus, key=lambda d: (best.get(d, 0), -cpus.index(d)))
    return cpus[0]


def matmul_gflops(
    matmul: pd.DataFrame, out_path: str | os.PathLike, baseline: str | None = None, **style
) -> None:
    """Matrix-multiply GFLOP/s vs n per device (log-log; median over repeats, band min-max),
    each accelerator's crossover vs ``baseline`` marked by a vertical line: the smallest n
    from which its median time is below the baseline's for that and every larger n."""

    def draw(st: _Style):
        title = st.title or "Matrix multiply throughput"
        if not _has(matmul, "device", "n", "median_s", "gflops"):
            return _message(title, "no successful runs of the matmul microbenchmark", st)
        med = _matmul_medians(matmul)
        med = med[med["gflops"].notna() & (med["gflops"] > 0)]
        if med.empty:
            return _message(title, "no successful runs of the matmul microbenchmark", st)
        base = baseline or _matmul_baseline(matmul)
        labelled = _labelled(matmul.assign(workload=matmul.get("workload", "matmul")), set())
        fallback = {_base_device(x) for x in labelled["dev_label"] if _is_fallback(x)}
        dtypes = sorted(med["dtype"].unique())
        cols, rows = _grid(len(dtypes), 2)
        fig = _new_figure((cols * 5.6 + 3.4, rows * 4.2 + 0.5), st)
        axes = fig.subplots(rows, cols, squeeze=False).ravel()
        handles: dict[str, Line2D] = {}
        any_crossing = False
        for ax, dtype in zip(axes, dtypes, strict=False):
            sub = med[med["dtype"] == dtype]
            devices = device_order(sub["device"].astype(str))
            crossings = []
            for device in devices:
                dev = sub[sub["device"] == device].sort_values("n")
                label = device + (FALLBACK_SUFFIX if device in fallback else "")
                style_ = _line_style(label)
                ax.plot(dev["n"], dev["gflops"], linewidth=1.8, markersize=5, zorder=3, **style_)
                ax.fill_between(
                    dev["n"], dev["gflops_min"], dev["gflops_max"], color=style_["color"],
                    alpha=0.2, linewidth=0,
                )  # fmt: skip
                if device == base:
                    text = f"{label} (baseline)"
                elif base is None or base not in set(sub["device"]):
                    text = f"{label}: no baseline to compare"
                else:
                    n_cross = matmul_crossover(matmul, device, base, dtype if dtype else None)
                    if n_cross is None:
                        text = f"{label}: not faster than {base}\nwithin the measured range"
                    else:
                        text = f"{label}: faster than {base}\nfrom n = {n_cross}"
                        crossings.append((n_cross, device, style_["color"]))
                key = f"{dtype}|{text}" if len(dtypes) > 1 else text
                handles[key] = _line_handle(label)
                handles[key].set_label((f"[{dtype}] " if len(dtypes) > 1 else "") + text)
            sizes = sorted(sub["n"].astype(int).unique())
            any_crossing = any_crossing or bool(crossings)
            for k, (n_cross, device, color) in enumerate(sorted(crossings)):
                ax.axvline(n_cross, color=color, linestyle=":", linewidth=1.6, zorder=2)
                # bottom of the panel (large n has high GFLOP/s), left of the line when
                # the line is in the right half so the label stays inside the axes
                right_half = sizes.index(n_cross) >= len(sizes) / 2
                ax.annotate(
                    f"{device}: n = {n_cross}",
                    (n_cross, 0.05 + 0.08 * k),
                    xycoords=("data", "axes fraction"),
                    xytext=(-4 if right_half else 4, 0),
                    ha="right" if right_half else "left",
                    textcoords="offset points",
                    color=_text_color(device),
                    fontsize=9 * st.font_scale,
                    weight="bold",
                    va="center",
                    bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.8, "pad": 1},
                )
            _log2_batch_axis(ax, sizes, rotate_after=12)
            _log_y_ticks(ax, pd.concat([sub["gflops_min"], sub["gflops_max"]]))
            ax.set_xlabel("matrix size n (n × n @ n × n, log2 scale)")
            ax.set_ylabel("GFLOP/s (log scale)")
            ax.set_title(f"dtype {dtype}" if dtype else "")
        for ax in axes[len(dtypes) :]:
            ax.set_axis_off()
        notes = ["line: median of repeats", "band: min-max of repeats"]
        if any_crossing:
            notes.append("dotted: crossover n")
        _figure_legend(fig, list(handles.values()), "device", notes)
        fig.suptitle(title)
        return fig

    _render(out_path, style, draw)


# ----------------------------------------------------------------------------- 7 memory

_MIB = 2**20
_GIB = 2**30


def memory_bars(runs: pd.DataFrame, out_path: str | os.PathLike, **style) -> None:
    """Peak memory per workload x batch size, median over ok repeats, with the memory at the
    start as a lighter inner bar; one panel per device with its own axis and its measuring
    method written under it, because CUDA allocator peaks, sampled MPS memory and host RSS
    measure different things and must not be compared across panels."""

    def draw(st: _Style):
        title = st.title or "Memory per device (not comparable across panels)"
        if not _has(runs, "workload", "device", "batch_size", "memory_peak_bytes"):
            return _message(title, "no successful runs with a memory measurement", st)
        ok = _numeric(_ok(runs), "batch_size", "memory_peak_bytes")
        if "memory_initial_bytes" in ok:
            ok = _numeric(ok, "memory_initial_bytes")
        else:
            ok["memory_initial_bytes"] = np.nan
        if "memory_method" not in ok:
            ok["memory_method"] = "not recorded"
        ok = ok[ok["memory_peak_bytes"].notna() & (ok["memory_peak_bytes"] > 0)]
        if ok.empty:
            return _message(title, "no successful runs with a memory measurement", st)
        ok = _labelled(ok, _fallback_pairs(runs))
        devices = device_order(ok["device"].astype(str))
        groups = []
        for device in devices:
            dev = ok[ok["device"].astype(str) == device]
            agg = (
                dev.groupby(["workload", "batch_size", "dev_label"], sort=True)
                .agg(
                    peak=("memory_peak_bytes", "median"),
                    initial=("memory_initial_bytes", "median"),
                )
                .reset_index()
            )
            agg["workload"] = agg["workload"].astype(str)
            # x positions: bars of a workload side by side, a gap between workloads, each
            # group at least as wide as its name (1 unit ~ 0.55 in)
            xs, centers, edges, pos = [], [], [], 0.0
            for workload in _sorted_str(agg["workload"]):
                n = int((agg["workload"] == workload).sum())
                room = max(n, (0.075 * len(workload) + 0.2) / 0.55)
                first = pos + (room - n) / 2 + 0.5
                xs += [first + k for k in range(n)]
                centers.append((workload, first + (n - 1) / 2))
                pos += room + 0.5
                edges.append(pos - 0.25)
            methods = _sorted_str(dev["memory_method"].astype("string").fillna("not recorded"))
            groups.append((device, agg, np.asarray(xs), centers, edges[:-1], pos - 0.5, methods))
        widths = [max(2.6, 0.55 * g[5] + 1.0) for g in groups]
        fig = _new_figure((sum(widths) + 0.4, 5.0), st)
        axes = fig.subplots(1, len(groups), squeeze=False, width_ratios=widths).ravel()
        for ax, group, width in zip(axes, groups, widths, strict=True):
            device, agg, xs, centers, edges, span, methods = group
            unit, scale = ("GiB", _GIB) if agg["peak"].max() >= 2 * _GIB else ("MiB", _MIB)
            color = device_color(device)
            for x, r in zip(xs, agg.itertuples(index=False), strict=True):
                ax.bar(x, r.peak / scale, width=0.72, zorder=2, **_bar_style(r.dev_label))
                if np.isfinite(r.initial):
                    ax.bar(
                        x, r.initial / scale, width=0.36, zorder=3, facecolor="white",
                        alpha=0.75, edgecolor=color, linewidth=0.8,
                    )  # fmt: skip
                ax.annotate(
                    _fmt_number(r.peak / scale), (x, r.peak / scale), xytext=(0, 2),
                    textcoords="offset points", ha="center", va="bottom",
                    fontsize=7.5 * st.font_scale,
                )  # fmt: skip
            ax.set_ylim(0, agg["peak"].max() / scale * 1.15)
            ax.set_xticks(xs, [f"bs {int(b)}" for b in agg["batch_size"]])
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
            labels = device_order(agg["dev_label"])
            ax.set_title(" / ".join(labels), color=_text_color(device), weight="bold")
            ax.set_xlabel(
                _wrap(f"measured as: {'; '.join(methods)}", max(24, int(width * 11))),
                fontsize=8.5 * st.font_scale, color="#333", labelpad=22,
            )  # fmt: skip
        handles = [
            Patch(facecolor="#888888", label="peak (median of repeats)"),
            Patch(facecolor="white", edgecolor="#888888", label="at start (inner bar)"),
        ]
        if any(_is_fallback(x) for g in groups for x in g[1]["dev_label"]):
            handles.append(Patch(facecolor="white", edgecolor="black", hatch=FALLBACK_HATCH,
                                 label="ran with CPU fallback ops"))  # fmt: skip
        fig.legend(handles=handles, loc="outside lower center", ncols=len(handles), frameon=False)
        fig.suptitle(title if len(groups) > 1 or st.title else f"Memory on {groups[0][0]}")
        return fig

    _render(out_path, style, draw)


# ----------------------------------------------------------------------------- registry


def _table(tables: Mapping[str, pd.DataFrame], key: str) -> pd.DataFrame:
    frame = tables.get(key)
    return frame if frame is not None else pd.DataFrame()


FIGURES: dict[str, Callable[..., None]] = {
    "throughput": lambda tables, out, baseline=None, **s: throughput_vs_batch(
        _table(tables, "runs"), out, **s
    ),
    "speedup": lambda tables, out, baseline=None, **s: speedup_bars(
        _table(tables, "runs"), out, baseline, **s
    ),
    "epoch_time": lambda tables, out, baseline=None, **s: epoch_time_distribution(
        _table(tables, "epochs"), out, runs=_table(tables, "runs"), **s
    ),
    "loss": lambda tables, out, baseline=None, **s: loss_curves(
        _table(tables, "epochs"), out, runs=_table(tables, "runs"), **s
    ),
    "per_label": lambda tables, out, baseline=None, **s: per_label_heatmap(
        _table(tables, "per_label"), out, runs=_table(tables, "runs"), **s
    ),
    "matmul": lambda tables, out, baseline=None, **s: matmul_gflops(
        _table(tables, "matmul"), out, baseline, **s
    ),
    "memory": lambda tables, out, baseline=None, **s: memory_bars(_table(tables, "runs"), out, **s),
}
