"""The HTML pages of the Markdown reports, as text (fast): anchors, links, figures.
tests/test_html_browser.py opens the real pages in a browser."""

from __future__ import annotations

import re
from pathlib import Path

import trainbench.analysis
from trainbench.analysis.html import markdown_page, write_html
from trainbench.analysis.stats.verdicts import SYMBOLS

PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360000002000001e221bc330000000049454e44ae426082"
)


def test_headings_get_the_anchors_the_markdown_links_to(tmp_path):
    page = markdown_page(
        "see [Measurement quality](#measurement-quality)\n\n## Measurement quality\n\n"
        "## `matmul` (seed report 004)\n",
        tmp_path,
        "t",
    )
    assert '<h2 id="measurement-quality">' in page
    assert '<h2 id="matmul-seed-report-004">' in page
    assert 'href="#measurement-quality"' in page


def test_links_resolve_from_the_page_and_reports_link_to_their_pages(tmp_path):
    results = tmp_path / "results"
    (results / "reports").mkdir(parents=True)
    (results / "figures").mkdir()
    (results / "figures" / "a b.png").write_bytes(PNG)
    (results / "report.md").write_text(
        "[table](tables/speedup.md) [cnn](reports/image_cnn.md#summary) "
        "[docs](https://example.org/x) [here](#verdicts)\n\n![fig](figures/a%20b.png)\n"
    )
    page = results / "html" / "report.html"
    write_html(
        results / "report.md",
        page,
        "t",
        {results / "reports/image_cnn.md": page.parent / "cnn.html"},
    )
    text = page.read_text()
    hrefs = re.findall(r'href="([^"]+)"', text)
    assert hrefs == [
        "../tables/speedup.md",
        "cnn.html#summary",
        "https://example.org/x",
        "#verdicts",
    ]
    assert re.search(r'<img alt="fig" src="data:image/png;base64,[A-Za-z0-9+/=]+"', text)


# Emoji and their variation selectors (U+FE0E/U+FE0F): Miscellaneous Symbols, Dingbats,
# Miscellaneous Symbols and Arrows, and the emoji planes. A browser without an emoji
# font (Debian's chromium) draws them as empty boxes.
EMOJI = re.compile("[\u2600-\u27bf\u2b00-\u2bff\ufe0e\ufe0f\U0001f000-\U0001faff]")
# Each mark the Markdown reports write, the badge's class and its words.
BADGES = {"✅": ("mark-ok", "ok"), "❌": ("mark-failed", "failed"),
          "⚠️": ("mark-warning", "warning"), "⚪": ("mark-unavailable", "unavailable"),
          "🔎": ("mark-check", "check")}  # fmt: skip


def test_every_mark_the_reports_can_write_has_a_badge():
    """The verdicts' symbols, and every emoji in the sources of the Markdown reports
    (the analysis package but its console summary, and its templates)."""
    assert set(SYMBOLS.values()) <= set(BADGES), "a verdict symbol without its badge"
    package = Path(trainbench.analysis.__file__).parent
    sources = [*package.rglob("*.py"), *package.glob("templates/*")]
    found = {
        char
        for path in sources
        if path.name != "console.py"
        for char in EMOJI.findall(path.read_text())
    }
    assert "✅" in found, "the scan found no mark at all"
    assert found - {"\ufe0f"} <= {mark[0] for mark in BADGES}, "an emoji without its badge"


def test_marks_are_badges_with_words_not_emoji(tmp_path):
    text = (
        "⚠️ **2 measurements carry a warning:** short window.\n\n"
        "## Verdicts\n\n"
        "- ✅ `cnn` on **cpu** (baseline): baseline.\n"
        "- ❌ `cnn` on **cuda** (not working): failed cells.\n"
        "- ⚠️ `cnn` on **mps** (not faster): no clear difference.\n"
        "- ⚪ **xpu** (unavailable): no device; 2 cell(s) of cnn not measured.\n"
        "- ⚠\ufe0e text presentation, `✅ in code`\n\n"
        "![✅ a figure](missing.png)\n"
    )
    page = markdown_page(text, tmp_path, "✅ t")
    assert EMOJI.findall(page) == []
    badges = re.findall(r'<span class="mark (mark-[a-z-]+)" title="[^"<]+">([^<]+)</span>', page)
    by_mark = {"⚠️": 3, "✅": 2, "❌": 1, "⚪": 1}  # the text's marks, the code span's included
    assert sorted(badges) == sorted(b for m, n in by_mark.items() for b in [BADGES[m]] * n)
    assert (
        '<li><span class="mark mark-ok" title="working, or the baseline without failures">' in page
    )
    assert 'alt="ok a figure"' in page and "<title>ok t</title>" in page
    for css_class, _ in BADGES.values():
        assert re.search(rf"\.{css_class} {{ background: #[0-9a-f]{{6}}; }}", page), css_class
