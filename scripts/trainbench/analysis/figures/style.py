"""The look and the output of every figure: theme and fonts, device colours and order,
legend helpers, axes helpers, the "nothing to draw" message figure and the atomic,
byte-stable save.

Determinism: a figure's size is a fixed function of what is drawn (panels, bars,
labels), never of text extents; categories are sorted; PNG files carry no
Software/time metadata, SVG ids use a fixed hash salt and PDF dates, creator and
producer are left out (nor does SOURCE_DATE_EPOCH matter then).

Paper figures (style keyword ``paper``, a :class:`Paper`): the same drawing at a print
size -- ``width_in`` wide (one column of a two-column template), fonts in points as
printed (``font_pt`` for tick labels, a little larger for labels and titles), one panel
per row, the device legend under the panels, the height following the panels and the
legend (at most ``max_height_in``). Vector files (PDF, SVG) embed TrueType fonts
(``pdf.fonttype`` 42, which publishers' PDF checks accept, unlike Type 3) and do not
depend on the dpi.
"""

from __future__ import annotations

import math
import os
import tempfile
import textwrap
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import seaborn as sns  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.colors import to_hex, to_rgb  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402
from matplotlib.ticker import (  # noqa: E402
    FixedLocator,
    FuncFormatter,
    LogLocator,
    NullFormatter,
    NullLocator,
)
from trainbench.analysis.figures.paper import (  # noqa: E402
    BASE_TICK_PT,
    PAPER_DPI,
    PAPER_MAX_COLS,
    Paper,
    fit_paper,
    paper_legend,
    paper_message,
    paper_size,
)
from trainbench.common.records import current_umask  # noqa: E402
from trainbench.config.device_ids import DeviceId  # noqa: E402

FALLBACK_SUFFIX = "+cpu-fallback"
FALLBACK_HATCH = "///"
LEGEND_W = 2.4  # inches kept for the legend right of the panels
MESSAGE_SIZE = (6.4, 2.4)  # inches of the "nothing to draw" figure
MAX_COLS = 3  # facet columns before wrapping
STYLE_KEYWORDS = ("dpi", "font_scale", "title", "paper")

# ----------------------------------------------------------------------------- style


@dataclass(frozen=True)
class Style:
    """What a caller may change: resolution, font scale, the figure title and, for a
    paper figure, its print size (``paper``; its fonts then set ``font_scale``)."""

    dpi: int = 110
    font_scale: float = 1.0
    title: str | None = None
    paper: Paper | None = None


def make_style(style: Mapping) -> Style:
    """The :class:`Style` of the style keywords; ``paper`` may be a :class:`Paper` or a
    mapping of its fields, and its ``font_pt`` then sets the font scale."""
    unknown = sorted(set(style) - set(STYLE_KEYWORDS))
    if unknown:
        raise TypeError(f"unknown style keyword(s): {', '.join(unknown)}")
    style = dict(style)
    paper = style.get("paper")
    if isinstance(paper, Mapping):
        paper = style["paper"] = Paper(**paper)
    if paper is not None:
        style["font_scale"] = paper.font_pt / BASE_TICK_PT
    return Style(**style)


# The paper size of the figure being drawn (None: a screen figure); set by
# build_figure/render around a family's drawing, read by grid(), which gets no style.
_drawing_paper: Paper | None = None


@contextmanager
def _drawing(st: Style) -> Iterator[None]:
    global _drawing_paper
    before, _drawing_paper = _drawing_paper, st.paper
    try:
        with matplotlib.rc_context():
            theme(st)
            yield
    finally:
        _drawing_paper = before


def theme(st: Style) -> None:
    """Seaborn theme with a font that ships with matplotlib (same glyphs on every machine)."""
    scale = st.font_scale
    sns.set_theme(
        context="paper" if st.paper else "notebook",
        style="whitegrid",
        font="DejaVu Sans",
        font_scale=scale,
        rc={
            "svg.hashsalt": "trainbench",
            "pdf.fonttype": 42,
            "axes.titlesize": 11 * scale,
            "axes.labelsize": 10 * scale,
            "xtick.labelsize": 9 * scale,
            "ytick.labelsize": 9 * scale,
            "legend.fontsize": 9 * scale,
            "legend.title_fontsize": 9 * scale,
            "figure.titlesize": (11.5 if st.paper else 13) * scale,
            "axes.titlepad": 6 * scale if st.paper else 6,
        },
    )


# ----------------------------------------------------------------------------- devices

_CPU_PLAIN = "#5b7186"  # slate blue-grey
_CPU_LIGHT = np.array([0.60, 0.66, 0.72])  # cpu-t1: light grey-blue
_CPU_DARK = np.array([0.10, 0.22, 0.45])  # cpu-t64 and up: dark blue
_MPS = "#e8710a"  # orange
_CUDA = "#2e9e44"  # green
_OTHER = ["#8e5ea2", "#c44e52", "#8c6d31", "#d45f9e", "#4b9fa6", "#7f7f7f"]


def is_fallback(label: str) -> bool:
    return str(label).endswith(FALLBACK_SUFFIX)


def base_device(label: str) -> str:
    """The device id without the ``+cpu-fallback`` mark."""
    label = str(label)
    return label[: -len(FALLBACK_SUFFIX)] if is_fallback(label) else label


def _parsed(label: str) -> DeviceId | None:
    try:
        return DeviceId.parse(str(label))
    except ValueError:
        return None


def device_color(device: str) -> str:
    """A fixed colour per device id (the same in every figure): cpu and cpu-t* in
    grey-blues (darker with more threads), mps orange, cuda green, others by name."""
    parsed = _parsed(device)
    if parsed is None:
        name = base_device(device)
        return _OTHER[sum(name.encode()) % len(_OTHER)]
    if parsed.backend == "cpu" and parsed.threads:
        pos = min(math.log2(max(parsed.threads, 1)) / 6.0, 1.0)
        return to_hex(_CPU_LIGHT + (_CPU_DARK - _CPU_LIGHT) * pos)
    return {"cpu": _CPU_PLAIN, "mps": _MPS, "cuda": _CUDA}[parsed.backend]


def device_key(label: str) -> tuple:
    """Sort key: cpu (by thread count), mps, cuda, then others; fallback after its device."""
    parsed = _parsed(label)
    if parsed is None:
        return (3, 0, base_device(label), str(label), is_fallback(label))
    group = {"cpu": 0, "mps": 1, "cuda": 2}[parsed.backend]
    column = parsed.column.format()
    return (group, parsed.threads or 0, column, base_device(label), parsed.fallback)


def device_order(labels: Iterable[str]) -> list[str]:
    """cpu first (by thread count), then mps, cuda, then anything else by name; a
    ``+cpu-fallback`` label right after its device."""
    return sorted({str(x) for x in labels}, key=device_key)


def text_color(label: str) -> str:
    """The device colour darkened enough to read as text on white."""
    return to_hex(np.array(to_rgb(device_color(label))) * 0.7)


def line_style(label: str) -> dict:
    return {
        "color": device_color(label),
        "linestyle": "--" if is_fallback(label) else "-",
        "marker": "D" if is_fallback(label) else "o",
    }


def bar_style(label: str) -> dict:
    return {
        "facecolor": device_color(label),
        "edgecolor": "black" if is_fallback(label) else "white",
        "hatch": FALLBACK_HATCH if is_fallback(label) else None,
        "linewidth": 0.6,
    }


def line_handle(label: str) -> Line2D:
    return Line2D([], [], markersize=5, linewidth=1.8, label=label, **line_style(label))


def patch_handle(label: str) -> Patch:
    return Patch(label=label, **bar_style(label))


def note_handle(text: str) -> Line2D:
    return Line2D([], [], linestyle="none", marker=None, label=text)


def fallback_handle() -> Patch:
    return Patch(facecolor="white", edgecolor="black", hatch=FALLBACK_HATCH, label="CPU fallback")


# ----------------------------------------------------------------------------- text


def wrap(text: str, width: int) -> str:
    return "\n".join(textwrap.wrap(str(text), width)) if text else ""


def fmt_number(value: float) -> str:
    """Tick and bar labels: 2,000 / 12.5 / 1.25 / 0.012."""
    if value >= 100:
        return f"{value:,.0f}"
    if value >= 10:
        return f"{value:.1f}".rstrip("0").rstrip(".")
    if value >= 1:
        return f"{value:.2f}".rstrip("0").rstrip(".")
    return f"{value:.2g}"


def kinds_note(prefix: str, kinds: Iterable, width: int = 30) -> str | None:
    """ "whiskers: range of 3 runs; 95% BCa CI" from a table's interval column: the
    distinct non-empty values, as the table writes them; None when there are none."""
    values = sorted({str(k).strip() for k in kinds if isinstance(k, str) and k.strip()})
    if not values:
        return None
    return wrap(f"{prefix}: {'; '.join(values)}", width)


# ----------------------------------------------------------------------------- axes


def new_figure(size: tuple[float, float], st: Style, **kwargs) -> Figure:
    """A constrained-layout figure of ``size`` inches (a paper figure: its paper size)."""
    if st.paper:
        size = paper_size(size, st.paper)
    return plt.figure(figsize=size, dpi=st.dpi, layout="constrained", **kwargs)


def grid(n: int, max_cols: int = MAX_COLS) -> tuple[int, int]:
    """Columns and rows for ``n`` panels (a paper figure: one panel per row)."""
    if _drawing_paper is not None:
        max_cols = min(max_cols, PAPER_MAX_COLS)
    cols = max(1, min(n, max_cols))
    return cols, max(1, math.ceil(n / cols))


def hide_unused(axes: Sequence[Axes], used: int) -> None:
    for ax in axes[used:]:
        ax.set_axis_off()


def finite_positive(values: Iterable) -> np.ndarray:
    array = np.asarray([float(v) for v in values], dtype=float)
    return array[np.isfinite(array) & (array > 0)]


def wants_log(values: Iterable, span: float = 10.0) -> bool:
    """A log axis when the drawn values span more than ``span`` times (layout only)."""
    array = finite_positive(values)
    return array.size > 1 and array.max() / array.min() > span


def log2_axis(ax: Axes, sizes: Iterable, axis: str = "x", rotate_after: int = 6) -> None:
    """Log2 axis with a tick at every drawn size (batch sizes, matrix sizes)."""
    sizes = sorted({int(s) for s in sizes})
    scale, which = (ax.set_xscale, ax.xaxis) if axis == "x" else (ax.set_yscale, ax.yaxis)
    scale("log", base=2)
    which.set_major_locator(FixedLocator(sizes))
    which.set_major_formatter(FuncFormatter(lambda v, _: f"{int(round(v))}"))
    which.set_minor_locator(NullLocator())
    if sizes:
        lim = (sizes[0] / 2, sizes[0] * 2) if len(sizes) == 1 else (
            sizes[0] / 2**0.4, sizes[-1] * 2**0.4
        )  # fmt: skip
        (ax.set_xlim if axis == "x" else ax.set_ylim)(*lim)
    if axis == "x" and len(sizes) > rotate_after:
        ax.tick_params(axis="x", labelrotation=45)


def log_ticks(ax: Axes, values: Iterable, axis: str = "y", suffix: str = "") -> None:
    """Log axis with plain-number ticks (2,000 rather than 2x10^3): 1-2-5 steps over up
    to two decades (finer below 1.2), 1-3 up to four, powers of ten beyond."""
    array = finite_positive(values)
    decades = math.log10(array.max() / array.min()) if array.size else 0.0
    if decades <= 1.2:
        subs = (1.0, 1.5, 2.0, 3.0, 5.0, 7.0)
    elif decades <= 2.2:
        subs = (1.0, 2.0, 5.0)
    else:
        subs = (1.0, 3.0) if decades <= 4.2 else (1.0,)
    (ax.set_xscale if axis == "x" else ax.set_yscale)("log")
    which = ax.xaxis if axis == "x" else ax.yaxis
    which.set_major_locator(LogLocator(base=10, subs=subs))
    which.set_major_formatter(FuncFormatter(lambda v, _: fmt_number(v) + suffix))
    which.set_minor_locator(NullLocator())
    which.set_minor_formatter(NullFormatter())


def value_axis(ax: Axes, values: Iterable, label: str) -> None:
    """A log y axis when the values span more than ten times, else linear from 0."""
    values = list(values)
    if wants_log(values):
        log_ticks(ax, values)
        ax.set_ylabel(f"{label} (log scale)")
    else:
        ax.set_ylim(bottom=0)
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: fmt_number(v) if v else "0"))
        ax.set_ylabel(label)


def whiskers(center: Iterable, low: Iterable, high: Iterable) -> list[np.ndarray]:
    """Error-bar lengths below and above ``center`` (never negative) for ``errorbar``."""
    center = np.asarray(list(center), dtype=float)
    return [
        np.clip(center - np.asarray(list(low), dtype=float), 0, None),
        np.clip(np.asarray(list(high), dtype=float) - center, 0, None),
    ]


def figure_legend(
    fig: Figure, handles: Sequence, title: str | None = None, notes: Iterable[str | None] = ()
) -> None:
    """Device handles, then notes (what a line, band, whisker or dot is) as text rows;
    in a paper figure under the panels, in two columns, the figure made taller by its
    rows (counted from the labels' lines, never from text extents)."""
    handles = list(handles) + [note_handle(n) for n in notes if n]
    if handles and _drawing_paper is not None:
        paper_legend(fig, handles, title, _drawing_paper)
    elif handles:
        fig.legend(
            handles=handles, loc="outside right upper", title=title, frameon=False,
            handlelength=2.2,
        )  # fmt: skip


def finish_with_legend(
    fig: Figure, handles: Sequence, notes: Iterable[str | None], title: str
) -> Figure:
    """The last step of every device figure: the device legend with its notes, the title."""
    figure_legend(fig, handles, "device", notes)
    fig.suptitle(title)
    return fig


# ----------------------------------------------------------------------------- output


def message(title: str, text: str, st: Style) -> Figure:
    """The figure for "nothing to draw": the title and a sentence, at a fixed size."""
    if st.paper:
        return paper_message(st.title or title, text, st.paper, st.dpi)
    fig = plt.figure(figsize=MESSAGE_SIZE, dpi=st.dpi)
    fig.text(0.5, 0.78, st.title or title, ha="center", va="center", fontsize=12, weight="bold")
    fig.text(
        0.5, 0.42, textwrap.fill(text, 70), ha="center", va="center", fontsize=11, color="#444"
    )
    return fig


_METADATA = {
    "png": {"Software": None},
    "svg": {"Date": None, "Creator": None},
    "pdf": {"Creator": None, "Producer": None, "CreationDate": None, "ModDate": None},
}


def save(fig: Figure, out_path: str | os.PathLike, st: Style) -> None:
    """Atomic, byte-stable save: a temporary file in the same folder, mode 0666 less the
    umask (mkstemp's 0600 would hide it from a group), then os.replace. The format
    follows the suffix: png (default), svg or pdf."""
    path = Path(out_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fmt = (path.suffix.lstrip(".") or "png").lower()
    if fmt not in _METADATA:
        plt.close(fig)
        raise ValueError(f"unsupported figure format {fmt!r} (png, svg or pdf)")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        dpi = PAPER_DPI if st.paper else st.dpi
        if st.paper:
            fit_paper(fig, st.paper)
        with os.fdopen(fd, "wb") as handle:
            fig.savefig(handle, format=fmt, dpi=dpi, metadata=_METADATA[fmt])
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o666 & ~current_umask())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    finally:
        plt.close(fig)


def build_figure(build: Callable[[Style], Figure], style: Mapping) -> Figure:
    """Theme and draw inside an rc_context, so global matplotlib state is left alone;
    the caller saves or closes the figure."""
    st = make_style(style)
    with _drawing(st):
        return build(st)


def render(out_path: str | os.PathLike, style: Mapping, build: Callable[[Style], Figure]) -> None:
    """Theme, draw and save one figure."""
    st = make_style(style)
    with _drawing(st):
        fig = build(st)
        save(fig, out_path, st)
