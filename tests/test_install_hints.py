"""No message, doc or command tells a user to ``pip install`` this project by a name
that resolves on the package index to another project: ``trainbench`` there is an
unrelated sdist (0.0.2) whose setup.py would run. Every hint installs from the clone
(``.venv/bin/pip install -e ".[extra]"``); the distribution is ``trainbench-workflow``."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from trainbench.common.code_identity import DISTRIBUTION
from trainbench.measure.trackers import energy_counters

ROOT = Path(__file__).resolve().parents[1]
SCANNED = ("README.md", "Makefile", "config.yaml", "Snakefile")
SCANNED_GLOBS = (
    "docs/**/*.md",
    "scripts/**/*.py",
    "rules/*.smk",
    "configs/*.yaml",
    "examples/**/*",
)
PIP_INSTALL = re.compile(r"pip3?\s+install\s+(?P<args>[^\n`]*)")
TAKEN_NAME = re.compile(r"trainbench(\[[^\]]*\])?([=<>!~@].*)?")


def taken_name_installs(text: str) -> list[str]:
    """Each ``pip install`` whose arguments name the distribution ``trainbench``."""
    found = []
    for match in PIP_INSTALL.finditer(text):
        for token in match.group("args").split():
            if TAKEN_NAME.fullmatch(token.strip("'\"(),;")):
                found.append(match.group(0).strip())
    return found


def scanned_files() -> list[Path]:
    files = [ROOT / name for name in SCANNED]
    for pattern in SCANNED_GLOBS:
        files += [p for p in ROOT.glob(pattern) if p.is_file() and "measured" not in p.parts]
    return [p for p in files if p.exists()]


@pytest.mark.parametrize(
    "text, bad",
    [
        ("pip install 'trainbench[apple]'", True),
        ("run pip install trainbench now", True),
        ('python -m pip install "trainbench==0.1.0"', True),
        ('.venv/bin/pip install -e ".[apple]"', False),
        ("pip install trainbench-workflow", False),
        ("pip install -e .", False),
    ],
)
def test_the_scan_finds_the_taken_name(text, bad):
    assert bool(taken_name_installs(text)) is bad


def test_no_file_installs_the_taken_name():
    offending = {
        str(path.relative_to(ROOT)): hits
        for path in scanned_files()
        if (hits := taken_name_installs(path.read_text(errors="replace")))
    }
    assert offending == {}


def test_the_apple_extra_hint_installs_from_the_clone():
    hint = energy_counters.NO_APPLE_EXTRA
    assert "pip install -e '.[apple]'" in hint and not taken_name_installs(hint)


def test_the_distribution_name_is_not_the_taken_one():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["name"] == DISTRIBUTION == "trainbench-workflow"
    own = [
        r for deps in project["optional-dependencies"].values() for r in deps if "trainbench" in r
    ]
    assert own and all(r.startswith("trainbench-workflow[") for r in own)
