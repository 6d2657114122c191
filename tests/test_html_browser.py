"""The HTML reports in a real headless browser: results/html/ and `snakemake --report`.

A tiny workflow runs once (cpu, plus mps and cuda that are unavailable here), then
each page opens in Chromium in a laptop-sized window (1366x768) and must show: every
figure loaded (naturalWidth > 0), the verdicts on the first screen without
scrolling, every link resolving (a local file that exists, an anchor that exists),
nothing written to the browser console, no request leaving the report's files, and
every verdict mark drawn as a badge with its words (no emoji, which a browser without
an emoji font, such as Debian's chromium, draws as an empty box).
In `snakemake --report` every result of every category opens through the report's
own menu; it shows each report page in a frame of a data URI, where only the anchors
can be followed, and its own template writes one console warning (Tailwind's), the
one message allowed. A screenshot of each page lands in the test's tmp_path (its
path printed: pytest -s).

Needs the Python package `playwright` (the dev extra) and a Chromium on the machine
(Debian's `chromium`; TRAINBENCH_BROWSER=/path/to/chrome picks another): Playwright
drives that executable, it downloads no browser. Without them the tests skip, unless
TRAINBENCH_REQUIRE_BROWSER=1 (CI), which makes them fail.
"""

from __future__ import annotations

import os
import re
import shutil
import time
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest
from helpers import copy_workflow, run_snakemake, tiny_config, write_config

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.e2e]

VIEWPORT = {"width": 1366, "height": 768}
BROWSER_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
# Each page's verdicts: the list right under this heading (its id, from the heading text).
VERDICT_HEADINGS = {"report": "verdicts", "image_cnn": "summary"}
# Snakemake's own report template loads Tailwind's development build, which says so on
# the console; trainbench cannot change that page (every other message fails the test).
SNAKEMAKE_TEMPLATE = "warning: cdn.tailwindcss.com should not be used in production."
# The marks the Markdown reports write (emoji) and each badge's class and words in HTML.
MARK_WORDS = {"mark-ok": "ok", "mark-failed": "failed", "mark-warning": "warning",
              "mark-unavailable": "unavailable"}  # fmt: skip
MARKDOWN_MARKS = re.compile("[\u2705\u274c\u26a0\u26aa]")


def browser_unavailable(reason: str) -> None:
    if os.environ.get("TRAINBENCH_REQUIRE_BROWSER") == "1":
        pytest.fail(f"{reason} (TRAINBENCH_REQUIRE_BROWSER=1 requires the browser tests)")
    pytest.skip(reason)


def find_browser() -> str | None:
    explicit = os.environ.get("TRAINBENCH_BROWSER")
    if explicit:
        return explicit if Path(explicit).is_file() else None
    return next(filter(None, map(shutil.which, BROWSER_NAMES)), None)


@pytest.fixture(scope="module")
def browser():
    try:
        from playwright.sync_api import Error, sync_playwright
    except ImportError:
        browser_unavailable("no Python package playwright: pip install -e '.[dev]'")
    executable = find_browser()
    if executable is None and os.environ.get("TRAINBENCH_BROWSER"):
        browser_unavailable(f"TRAINBENCH_BROWSER={os.environ['TRAINBENCH_BROWSER']} is not a file")
    if executable is None:
        browser_unavailable(
            f"no Chromium found (looked for TRAINBENCH_BROWSER, then {', '.join(BROWSER_NAMES)} "
            "on PATH): install Debian's chromium (apt-get install chromium)"
        )
    with sync_playwright() as playwright:
        try:
            chromium = playwright.chromium.launch(executable_path=executable)
        except Error as error:
            browser_unavailable(f"{executable} did not start: {error}")
        yield chromium
        chromium.close()


@pytest.fixture(scope="module")
def workflow(tmp_path_factory):
    """A finished tiny run with both HTML forms: results/html/ and report.html."""
    workdir = copy_workflow(tmp_path_factory.mktemp("browser") / "wf")
    write_config(workdir / "config.yaml", tiny_config(devices=["cpu", "mps", "cuda"]))
    proc = run_snakemake(workdir, "--cores", "1", "results/report.md", timeout=300)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    proc = run_snakemake(workdir, "--report", "report.html", timeout=120)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    return workdir


class Watched:
    """A browser page with everything it said or fetched recorded from the start."""

    def __init__(self, browser) -> None:
        self.page = browser.new_page(viewport=VIEWPORT)
        self.console: list[str] = []
        self.requests: list[str] = []
        self.page.on("console", lambda m: self.console.append(f"{m.type}: {m.text}"))
        self.page.on("pageerror", lambda e: self.console.append(f"page error: {e}"))
        self.page.on("requestfailed", lambda r: self.console.append(f"failed: {r.url[:120]}"))
        self.page.on("request", lambda r: self.requests.append(r.url))

    def open(self, path: Path) -> None:
        self.page.goto(path.as_uri(), wait_until="load")

    def foreign_requests(self) -> list[str]:
        return [url for url in self.requests if urlparse(url).scheme not in ("file", "data")]

    def shot(self, path: Path) -> None:
        self.page.screenshot(path=path)
        print(f"screenshot: {path}")


def images(frame) -> list[dict]:
    return frame.evaluate(
        "[...document.images].map(i => ({src: i.src.slice(0, 60), complete: i.complete,"
        " width: i.naturalWidth}))"
    )


def broken_links(frame, files: bool = True) -> list[str]:
    """Links whose target is not there: an anchor without its element, and (``files``)
    a local file that does not exist or a link outside the report's files."""
    links = frame.evaluate(
        "[...document.querySelectorAll('a[href]')].map(a => ({raw: a.getAttribute('href'),"
        " url: a.href, anchor: a.getAttribute('href').startsWith('#') &&"
        " (document.getElementById(decodeURIComponent(a.hash.slice(1))) !== null)}))"
    )
    broken = []
    for link in links:
        if link["raw"].startswith("#"):
            if not link["anchor"]:
                broken.append(f"{link['raw']}: no element with that id")
            continue
        url = urlparse(link["url"])
        if not files:
            continue
        if url.scheme != "file":
            broken.append(f"{link['raw']}: not a file of the report ({url.scheme})")
        elif not Path(unquote(url.path)).exists():
            broken.append(f"{link['raw']}: {unquote(url.path)} does not exist")
    return broken


def verdict_boxes(frame, heading_id: str) -> dict | None:
    """The verdict heading and each item of the list under it, as on screen."""
    return frame.evaluate(
        """id => {
            const heading = document.getElementById(id);
            if (heading === null) return null;
            const list = heading.nextElementSibling;
            const items = list && list.tagName === 'UL' ? [...list.querySelectorAll('li')] : [];
            return {items: items.length, boxes: [heading, ...items].map(e => {
                const r = e.getBoundingClientRect();
                return {text: e.textContent.slice(0, 50), top: r.top, bottom: r.bottom,
                        right: r.right, visible: e.checkVisibility()};
            })};
        }""",
        heading_id,
    )


def assert_verdicts_on_first_screen(frame, heading_id: str, offset_y: float = 0.0) -> None:
    found = verdict_boxes(frame, heading_id)
    assert found is not None, f"no element #{heading_id} (the verdicts' heading)"
    assert found["items"] >= 1, f"no verdict list under #{heading_id}"
    for box in found["boxes"]:
        where = f"{box['text']!r} at y {offset_y + box['top']:.0f}–{offset_y + box['bottom']:.0f}"
        assert box["visible"], f"{where} is not visible"
        assert offset_y + box["bottom"] <= VIEWPORT["height"], f"{where}: below the first screen"
        assert box["right"] <= VIEWPORT["width"], f"{where}: past the right edge"


def markdown_source(results: Path, name: str) -> str:
    return (results / ("report.md" if name == "report" else f"reports/{name}.md")).read_text()


def markdown_images(results: Path, name: str) -> int:
    """How many figures the page's Markdown source shows."""
    return len(re.findall(r"!\[[^\]]*\]\(", markdown_source(results, name)))


def markdown_marks(results: Path, name: str) -> int:
    """How many verdict marks (emoji) the page's Markdown source writes."""
    return len(MARKDOWN_MARKS.findall(markdown_source(results, name)))


def shown_marks(frame) -> dict:
    """Each badge (class mark) as drawn, and any emoji left in the page's text: one
    drawn by default as an emoji (Emoji_Presentation), a warning sign or a variation
    selector."""
    return frame.evaluate(
        """() => ({
            badges: [...document.querySelectorAll('.mark')].map(e => {
                const r = e.getBoundingClientRect(), style = getComputedStyle(e);
                return {classes: [...e.classList], text: e.innerText, width: r.width,
                        height: r.height, visible: e.checkVisibility(),
                        background: style.backgroundColor, color: style.color};
            }),
            emoji: document.body.innerText.match(/[\\p{Emoji_Presentation}\\u26a0\\ufe0e\\ufe0f]/gu)
                   || [],
        })"""
    )


def assert_marks_render(frame, expected: int) -> None:
    """Every mark of the Markdown a visible badge, with a background and its words."""
    shown = shown_marks(frame)
    assert shown["emoji"] == [], f"emoji in the page: {shown['emoji']}"
    assert len(shown["badges"]) == expected >= 1, shown["badges"]
    for badge in shown["badges"]:
        kinds = [c for c in badge["classes"] if c in MARK_WORDS]
        assert len(kinds) == 1, f"a badge of no known kind: {badge}"
        assert badge["text"] == MARK_WORDS[kinds[0]], badge
        assert badge["visible"] and badge["width"] > 0 and badge["height"] > 0, badge
        assert badge["background"] not in ("rgba(0, 0, 0, 0)", "transparent"), badge
        assert badge["color"] != badge["background"], badge


def assert_figures_loaded(frame, expected: int) -> None:
    shown = images(frame)
    assert len(shown) == expected >= 1, shown
    assert all(i["complete"] and i["width"] > 0 for i in shown), shown


@pytest.mark.parametrize("name", sorted(VERDICT_HEADINGS))
def test_results_html_page_in_a_browser(browser, workflow, tmp_path, name):
    results = workflow / "results"
    page = Watched(browser)
    page.open(results / "html" / f"{name}.html")
    page.shot(tmp_path / f"{name}.png")

    assert_figures_loaded(page.page, markdown_images(results, name))
    assert_marks_render(page.page, markdown_marks(results, name))
    assert_verdicts_on_first_screen(page.page, VERDICT_HEADINGS[name])
    assert broken_links(page.page) == []
    assert page.console == []
    assert page.foreign_requests() == []
    page.page.close()


def shown_result(page, filename: str):
    """The element showing result ``filename`` in `snakemake --report` (Snakemake names
    the file in its data URI): an iframe for a page, an img for a figure."""
    return page.locator(f"iframe[src*='filename={filename};'], img[src*='filename={filename};']")


def newly_shown(page, candidates: list[str]) -> str:
    """Which of ``candidates`` the last click shows (waiting up to 10 s for it)."""
    deadline = time.monotonic() + 10
    while True:
        shown = [name for name in candidates if shown_result(page, name).count()]
        if len(shown) == 1 or time.monotonic() > deadline:
            assert len(shown) == 1, f"shown of {candidates}: {shown}"
            return shown[0]
        page.wait_for_timeout(100)


def check_embedded_page(page: Watched, results: Path, name: str, tmp_path: Path) -> None:
    """A report page as `snakemake --report` shows it: in an iframe of a data URI, where
    anchors work but links to the run's files cannot be followed (the results/html test
    follows them)."""
    iframe = page.page.locator("iframe")
    frame = iframe.element_handle().content_frame()
    frame.wait_for_load_state("load")
    page.shot(tmp_path / f"snakemake_{name}.png")
    assert_figures_loaded(frame, markdown_images(results, name))
    assert_marks_render(frame, markdown_marks(results, name))
    assert_verdicts_on_first_screen(frame, VERDICT_HEADINGS[name], iframe.bounding_box()["y"])
    assert broken_links(frame, files=False) == []


def test_snakemake_report_in_a_browser(browser, workflow, tmp_path):
    page = Watched(browser)
    page.open(workflow / "report.html")
    page.shot(tmp_path / "snakemake_start.png")
    assert all(i["complete"] and i["width"] > 0 for i in images(page.page))

    # Every result of every category, through the report's own menu.
    categories = page.page.evaluate("categories")  # Snakemake's: {category: {sub: [paths]}}
    assert "1. Verdicts" in categories, categories
    for category, subcategories in categories.items():
        assert len(subcategories) == 1, f"{category}: the walk expects no subcategories"
        paths = next(iter(subcategories.values()))
        page.page.get_by_role("link", name=category, exact=True).click()
        eyes = page.page.locator("nav a[iconname=eye]")
        assert eyes.count() == len(paths), category
        seen = set()
        for index in range(eyes.count()):
            eyes.nth(index).click()
            name = newly_shown(page.page, [Path(p).name for p in paths if Path(p).name not in seen])
            seen.add(name)
            if name.endswith(".html"):
                check_embedded_page(page, workflow / "results", Path(name).stem, tmp_path)
            else:
                figure = shown_result(page.page, name)
                assert figure.evaluate("e => e.complete && e.naturalWidth > 0"), name
        assert seen == {Path(p).name for p in paths}, category
        page.page.get_by_role("link", name="Results", exact=True).click()

    assert [m for m in page.console if not m.startswith(SNAKEMAKE_TEMPLATE)] == []
    assert page.foreign_requests() == []
    page.page.close()
