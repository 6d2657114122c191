"""The HTML pages of the Markdown reports, as text (fast): anchors, links, figures.
tests/test_html_browser.py opens the real pages in a browser."""

from __future__ import annotations

import re

from trainbench.analysis.html import markdown_page, write_html

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
