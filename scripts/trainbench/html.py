"""The Markdown reports as self-contained HTML pages, for ``snakemake --report``:
its HTML report displays HTML results in place (Markdown would be a download), so
every verdict and table shows where people look. Figures are inlined as data URIs,
since a result page cannot follow relative links. Renders; computes nothing."""

from __future__ import annotations

import base64
import html
import os
import re
from pathlib import Path

import markdown

from .records import atomic_write_text

STYLE = """
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; margin: 1.5em;
       line-height: 1.45; color: #1f2328; max-width: 90em; }
table { border-collapse: collapse; margin: 0.8em 0; font-size: 0.9em; }
th, td { border: 1px solid #d0d7de; padding: 0.25em 0.55em; vertical-align: top; }
th { background: #f6f8fa; }
tr:nth-child(even) td { background: #fbfcfd; }
code { background: #f6f8fa; padding: 0.1em 0.3em; border-radius: 4px; }
img { max-width: 100%; }
"""
IMG_SRC = re.compile(r'(<img[^>]*\ssrc=")([^"]+)(")')


def _inline_images(body: str, base: Path) -> str:
    def data_uri(match: re.Match) -> str:
        src = match.group(2)
        path = (base / src).resolve()
        if src.startswith(("data:", "http:", "https:")) or not path.is_file():
            return match.group(0)
        kind = "image/svg+xml" if path.suffix == ".svg" else f"image/{path.suffix[1:]}"
        encoded = base64.b64encode(path.read_bytes()).decode()
        return f"{match.group(1)}data:{kind};base64,{encoded}{match.group(3)}"

    return IMG_SRC.sub(data_uri, body)


def markdown_page(text: str, base: str | os.PathLike, title: str) -> str:
    """A whole HTML page of a Markdown report; images resolved against ``base``."""
    body = markdown.markdown(text, extensions=["tables", "sane_lists"], output_format="html")
    return (
        "<!DOCTYPE html>\n<html><head><meta charset='utf-8'>"
        f"<title>{html.escape(title)}</title><style>{STYLE}</style></head>\n"
        f"<body>\n{_inline_images(body, Path(base))}\n</body></html>\n"
    )


def write_html(markdown_path: str | os.PathLike, html_path: str | os.PathLike, title: str) -> None:
    """``markdown_path`` rendered to ``html_path`` (atomically)."""
    source = Path(markdown_path)
    atomic_write_text(html_path, markdown_page(source.read_text(), source.parent, title))
