"""The Markdown reports as self-contained HTML pages, for ``snakemake --report``:
its HTML report displays HTML results in place (Markdown would be a download), so
every verdict and table shows where people look. Figures are inlined as data URIs,
since a result page cannot follow relative links. Headings get GitHub's anchors (the
Markdown links to ``#measurement-quality``), and links to the run's files are made
relative to the page (results/html/), a Markdown report's to its own page where it
has one; inside ``snakemake --report``, which shows each page as a data URI, only the
anchors can be followed. The verdict marks of the Markdown (emoji: ✅ ❌ ⚠️ ⚪) become
CSS badges with their meaning in words, which need no emoji font (a browser without
one, such as Debian's chromium, draws an emoji as an empty box). Renders; computes
nothing."""

from __future__ import annotations

import base64
import html
import os
import re
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import quote, unquote, urlsplit

import markdown
from trainbench.common.records import atomic_write_text

STYLE = """
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; margin: 1.5em;
       line-height: 1.45; color: #1f2328; max-width: 90em; }
table { border-collapse: collapse; margin: 0.8em 0; font-size: 0.9em; }
th, td { border: 1px solid #d0d7de; padding: 0.25em 0.55em; vertical-align: top; }
th { background: #f6f8fa; }
tr:nth-child(even) td { background: #fbfcfd; }
code { background: #f6f8fa; padding: 0.1em 0.3em; border-radius: 4px; }
img { max-width: 100%; }
.mark { display: inline-block; padding: 0 0.5em; border-radius: 0.8em; font-size: 0.8em;
        font-weight: 600; line-height: 1.5; white-space: nowrap; vertical-align: 0.05em;
        color: #ffffff; background: #57606a; border: 1px solid rgba(31, 35, 40, 0.15); }
.mark-ok { background: #1a7f37; }
.mark-warning { background: #9a6700; }
.mark-failed { background: #cf222e; }
.mark-unavailable { background: #57606a; }
.mark-check { background: #0969da; }
"""
# The emoji the Markdown reports write, each with its badge's words (its class: mark-
# and the words) and what it stands for (its tooltip): the verdicts' symbols
# (trainbench.analysis.stats.verdicts.SYMBOLS), the index's unavailable devices and
# failed cells (trainbench.analysis.report) and the templates' disturbed-measurements
# warning.
MARKS = {
    "\u2705": ("ok", "working, or the baseline without failures"),
    "\u274c": ("failed", "not working, failed cells, or the baseline with failures"),
    "\u26a0": ("warning", "insufficient data, disturbed or not faster: read with care"),
    "\u26aa": ("unavailable", "device unavailable: not measured"),
    "\U0001f50e": ("check", "a check beside the verdict, not a failure: read its reason"),
}
# A mark with its variation selector (U+FE0F emoji, U+FE0E text), or a selector alone.
MARK = re.compile(f"([{''.join(MARKS)}])[\ufe0e\ufe0f]?|[\ufe0e\ufe0f]")
TAG = re.compile(r"(<[^>]*>)")
IMG_SRC = re.compile(r'(<img[^>]*\ssrc=")([^"]+)(")')
LINK_HREF = re.compile(r'(<a[^>]*\shref=")([^"]+)(")')


def _inline_images(body: str, base: Path) -> str:
    def data_uri(match: re.Match) -> str:
        src = html.unescape(match.group(2))
        path = (base / unquote(src)).resolve()
        if src.startswith(("data:", "http:", "https:")) or not path.is_file():
            return match.group(0)
        kind = "image/svg+xml" if path.suffix == ".svg" else f"image/{path.suffix[1:]}"
        encoded = base64.b64encode(path.read_bytes()).decode()
        return f"{match.group(1)}data:{kind};base64,{encoded}{match.group(3)}"

    return IMG_SRC.sub(data_uri, body)


def _mark_words(match: re.Match) -> str:
    return MARKS[match.group(1)][0] if match.group(1) else ""


def _mark_badge(match: re.Match) -> str:
    if not match.group(1):
        return ""
    words, meaning = MARKS[match.group(1)]
    kind = words.replace(" ", "-")
    return f'<span class="mark mark-{kind}" title="{html.escape(meaning)}">{words}</span>'


def _mark_badges(body: str) -> str:
    """Each mark in the text of ``body`` as a badge (a span with its words), in a tag
    (an attribute: alt, title) as its words alone; no emoji font needed."""
    parts = TAG.split(body)
    return "".join(MARK.sub(_mark_words if p[:1] == "<" else _mark_badge, p) for p in parts)


def _relink(body: str, base: Path, page_dir: Path, pages: Mapping[Path, Path]) -> str:
    """Relative links (written from ``base``) made relative to ``page_dir``; a link to
    a key of ``pages`` goes to its value. Anchors and links with a scheme stay."""

    def relative(match: re.Match) -> str:
        href = html.unescape(match.group(2))
        if href.startswith("#") or urlsplit(href).scheme:
            return match.group(0)
        path, hash_sign, fragment = href.partition("#")
        target = (base / unquote(path)).resolve()
        target = pages.get(target, target)
        new = quote(os.path.relpath(target, page_dir)) + hash_sign + fragment
        return f"{match.group(1)}{html.escape(new)}{match.group(3)}"

    return LINK_HREF.sub(relative, body)


def markdown_page(
    text: str,
    base: str | os.PathLike,
    title: str,
    page_dir: str | os.PathLike | None = None,
    pages: Mapping[str | os.PathLike, str | os.PathLike] | None = None,
) -> str:
    """A whole HTML page of a Markdown report; images and links resolved against
    ``base``, links rewritten for a page in ``page_dir`` (default ``base``), links to a
    Markdown key of ``pages`` sent to its HTML page."""
    body = markdown.markdown(text, extensions=["tables", "sane_lists", "toc"], output_format="html")
    base = Path(base).resolve()
    page_dir = Path(page_dir).resolve() if page_dir is not None else base
    targets = {Path(k).resolve(): Path(v).resolve() for k, v in (pages or {}).items()}
    body = _mark_badges(_relink(_inline_images(body, base), base, page_dir, targets))
    title = MARK.sub(_mark_words, title)
    return (
        "<!DOCTYPE html>\n<html><head><meta charset='utf-8'>"
        f"<title>{html.escape(title)}</title><style>{STYLE}</style></head>\n"
        f"<body>\n{body}\n</body></html>\n"
    )


def write_html(
    markdown_path: str | os.PathLike,
    html_path: str | os.PathLike,
    title: str,
    pages: Mapping[str | os.PathLike, str | os.PathLike] | None = None,
) -> None:
    """``markdown_path`` rendered to ``html_path`` (atomically); ``pages`` maps other
    Markdown reports to their HTML pages, for the links between them."""
    source = Path(markdown_path)
    page = markdown_page(source.read_text(), source.parent, title, Path(html_path).parent, pages)
    atomic_write_text(html_path, page)
