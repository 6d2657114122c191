"""Paper figures: a figure family drawn for print (style keyword ``paper``). The
screen drawing at a paper's width -- one column of a two-column template, or the text
width when its panels sit side by side -- with fonts in points as printed, one panel a
row, the legend under the panels; the height follows the panels and the legend's rows
(counted from labels, never from text extents, so the size is a fixed function of what
is drawn). Used by :mod:`.style`, which holds the drawing state."""

from __future__ import annotations

import math
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

BASE_TICK_PT = 9.0  # tick labels at font_scale 1; the other sizes scale with them
PAPER_DPI = 300  # only rasterized parts of a paper figure (none today) and PNG use it
PAPER_MAX_COLS = 1  # panels per row in a paper figure
PAPER_LINE = 1.45  # a legend row's height in font sizes
PAPER_HEIGHT = 0.8  # a paper panel's height: its screen height x font ratio x this
PAPER_LEGEND_COLS = 2  # most columns of a legend under a paper figure's panels


@dataclass(frozen=True)
class Paper:
    """A figure for print: ``width_in`` inches wide (3.5: one column of IEEE's
    two-column template; ACM's acmart is 3.33), or ``wide_in`` (the text width across
    both columns: IEEE 7.16, ACM 7.0) when its panels sit side by side; tick labels at
    ``font_pt`` points as printed (axis labels and titles slightly larger), at most
    ``max_height_in`` tall."""

    width_in: float = 3.5
    wide_in: float = 7.16
    font_pt: float = 7.0
    max_height_in: float = 8.0


def paper_from_config(figures: Mapping) -> Paper | None:
    """The :class:`Paper` of the config's ``report.figures`` (None when ``vector`` is
    none: no paper figures)."""
    if figures.get("vector", "pdf") == "none":
        return None
    defaults = Paper()
    return Paper(
        width_in=float(figures.get("paper_width_in", defaults.width_in)),
        wide_in=float(figures.get("paper_wide_in", defaults.wide_in)),
        font_pt=float(figures.get("font_pt", defaults.font_pt)),
        max_height_in=float(figures.get("max_height_in", defaults.max_height_in)),
    )


def paper_size(size: tuple[float, float], paper: Paper) -> tuple[float, float]:
    """A screen figure's size in inches -> its paper size: the paper's width, and the
    height scaled as the fonts are (the panels were sized for their text) and a little
    flatter (``PAPER_HEIGHT``: one panel a row is narrower than a screen's), at most
    ``max_height_in`` (the legend under the panels adds its rows later)."""
    height = size[1] * paper.font_pt / BASE_TICK_PT * PAPER_HEIGHT
    return paper.width_in, round(min(max(height, 1.0), paper.max_height_in), 3)


def paper_legend(fig: Figure, handles: list, title: str | None, paper: Paper) -> None:
    ncols = PAPER_LEGEND_COLS if len(handles) > 2 else 1
    rows = math.ceil(len(handles) / ncols)
    lines = [str(h.get_label()).count("\n") + 1 for h in handles]
    # matplotlib fills a legend's columns first: entry i is in row i % rows
    height = sum(max(lines[i] for i in range(r, len(handles), rows)) for r in range(rows))
    height += 1 if title else 0
    fig.legend(
        handles=handles, loc="outside lower center", title=title, frameon=False, ncols=ncols,
        handlelength=1.8, columnspacing=1.2,
    )  # fmt: skip
    width, before = fig.get_size_inches()
    extra = (height + 0.6) * PAPER_LINE * paper.font_pt / 72
    fig.set_size_inches(width, round(min(before + extra, paper.max_height_in), 3))


def paper_message(title: str, text: str, paper: Paper, dpi: float) -> Figure:
    """The "nothing to draw" figure at the paper's width: the title and a sentence."""
    pt = paper.font_pt
    fig = plt.figure(figsize=(paper.width_in, 1.2), dpi=dpi)
    fig.text(0.5, 0.8, title, ha="center", va="center", fontsize=pt + 1, weight="bold")
    chars = int(paper.width_in * 72 / (0.55 * pt)) - 4  # DejaVu Sans: ~0.55 em a glyph
    fig.text(
        0.5, 0.4, textwrap.fill(text, chars), ha="center", va="center", fontsize=pt, color="#444"
    )
    return fig


def _fit_legends(fig: Figure, paper: Paper) -> None:
    """A paper figure's own legends (a family's row of keys under its panels) in at
    most ``PAPER_LEGEND_COLS`` columns, one when two of its longest labels would not
    fit the width side by side (counted in characters, never text extents): a row of
    keys as wide as a screen figure would run off a column's width. A legend made
    again gets the rows it adds as height."""
    width, height = fig.get_size_inches()
    chars = width * 72 / (0.55 * paper.font_pt)  # DejaVu Sans: ~0.55 em a glyph
    for legend in list(fig.legends):
        labels = [t.get_text() for t in legend.get_texts()]
        longest = max((len(label) for label in labels), default=0)
        most = PAPER_LEGEND_COLS if 2 * (longest + 6) <= chars else 1
        before = legend._ncols
        if before <= most:
            continue
        handles, title = legend.legend_handles, legend.get_title().get_text()
        legend.remove()  # set_ncols alone keeps the box the legend was built with
        fig.legend(
            handles, labels, loc="outside lower center", ncols=most, frameon=False,
            title=title or None,
        )  # fmt: skip
        added = math.ceil(len(labels) / most) - math.ceil(len(labels) / before)
        height += added * PAPER_LINE * paper.font_pt / 72
    fig.set_size_inches(width, round(min(height, paper.max_height_in), 3))


def _panel_columns(fig: Figure) -> int:
    """How many panels a figure sets side by side (its grid's columns)."""
    columns = [
        ax.get_subplotspec().get_gridspec().ncols
        for ax in fig.axes
        if ax.get_subplotspec() is not None and ax.axison
    ]
    return max(columns, default=1)


TICK_LABEL_SHARE = 0.3  # the most of a panel row's width a y tick label may take


def wrap_label(text: str, chars: int) -> str:
    """A long label in lines of at most ``chars`` characters, broken after its parts'
    separators first (``cpu@AMD EPYC · torch 2.5.1``: before ``@`` and ``·``), never
    inside a word."""
    if len(text) <= chars or "\n" in text:
        return text
    spaced = text.replace("@", " @").replace(" · ", " ·\u00a0")
    lines = textwrap.wrap(spaced, chars, break_long_words=False, break_on_hyphens=False)
    return "\n".join(line.replace("\u00a0", " ").replace(" @", "@") for line in lines)


def _wrap_tick_labels(fig: Figure, paper: Paper) -> None:
    """Y tick labels longer than ``TICK_LABEL_SHARE`` of the width (counted in
    characters, never text extents) wrapped onto lines: merged results' device labels
    (``cpu@AMD EPYC · torch 2.5.1+cu124  bs 32``) would otherwise leave a column's panels
    no width (matplotlib's constrained layout then gives up and the legend lands on the
    panels)."""
    columns = max(_panel_columns(fig), 1)
    width, height = fig.get_size_inches()
    chars = max(int(width / columns * 72 / (0.55 * paper.font_pt) * TICK_LABEL_SHARE), 12)
    added = 0.0  # the lines the wrapped labels add, as inches of height
    for ax in fig.axes:
        labels = [t.get_text() for t in ax.get_yticklabels()]
        if not any(len(label) > chars for label in labels):
            continue
        wrapped = [wrap_label(t, chars) for t in labels]
        ax.yaxis.set_ticks(ax.get_yticks(), labels=wrapped)
        extra = max(label.count("\n") for label in wrapped)
        added += extra * len(wrapped) * PAPER_LINE * paper.font_pt / 72
    if added:  # side-by-side panels share a row's height
        grown = height + added / columns
        fig.set_size_inches(width, round(min(grown, paper.max_height_in), 3))


def fit_paper(fig: Figure, paper: Paper) -> None:
    """The paper figure's final width: one column, or the text width (``wide_in``,
    LaTeX's figure*) when panels sit side by side (a family that sets devices or
    batch sizes beside each other); long tick labels wrapped and its legends fitted to
    that width."""
    if _panel_columns(fig) > 1:
        fig.set_size_inches(paper.wide_in, fig.get_size_inches()[1])
    _wrap_tick_labels(fig, paper)
    _fit_legends(fig, paper)
