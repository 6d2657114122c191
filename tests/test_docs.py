"""User docs read as a product: the README stays short, and neither it nor docs/*.md
carries a commit hash outside the README's generated evidence block (dates and commits
live in the results files the prose links)."""

from __future__ import annotations

import re

import pytest
from helpers import REPO
from trainbench.evidence.check import BEGIN, END

MAX_README_LINES = 300
# 7 to 40 hex digits with at least one digit and one letter: a commit, not a word.
COMMIT = re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b")
DOCS = ["README.md", *sorted(p.relative_to(REPO).as_posix() for p in (REPO / "docs").glob("*.md"))]


def _prose(text: str) -> str:
    """``text`` without the generated evidence block."""
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        return head + rest.split(END, 1)[1]
    return text


def test_the_readme_stays_short():
    lines = (REPO / "README.md").read_text().count("\n")
    assert lines <= MAX_README_LINES, lines


@pytest.mark.parametrize("name", DOCS)
def test_no_commit_hash_outside_the_evidence_block(name):
    found = [
        f"{name}:{number}: {match.group(0)}"
        for number, line in enumerate(_prose((REPO / name).read_text()).splitlines(), 1)
        for match in COMMIT.finditer(line)
    ]
    assert not found, "link the results file that holds the commit instead:\n" + "\n".join(found)


def test_the_commit_finder_finds_one_and_no_word():
    assert COMMIT.search("at commit f5fde6e, 9 min")
    assert not COMMIT.search("a defaced decade, 2026-11-27, 1234567")
