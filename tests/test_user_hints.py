"""A message that suggests a folder suggests one the user has: the configured key and
what the folder must hold, never a folder of the development machine."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from trainbench.workloads.textdata.files import load_goemotions
from trainbench.workloads.textdata.splits import load_splits

REPO = Path(__file__).resolve().parents[1]
DEVELOPMENT_PATHS = ("/work/", "shared/data", "/root/")


def _assert_a_users_hint(message: str) -> None:
    assert "workloads.text_multilabel.data.path" in message, message
    assert "labels.txt" in message and "train.tsv, dev.tsv" in message, message
    assert not any(path in message for path in DEVELOPMENT_PATHS), message


def test_a_goemotions_folder_without_its_files_names_the_key_and_what_it_must_hold(tmp_path):
    (tmp_path / "original").mkdir()
    (tmp_path / "original" / "labels.txt").write_text("joy\n")
    with pytest.raises(FileNotFoundError) as raised:
        load_goemotions(tmp_path, "train")
    _assert_a_users_hint(str(raised.value))
    assert f"point at one of them, e.g. {tmp_path / 'original'}" in str(raised.value)


def test_a_goemotions_source_without_a_path_names_the_key_and_what_it_must_hold():
    with pytest.raises(ValueError) as raised:
        load_splits({"source": "goemotions"}, 0)
    _assert_a_users_hint(str(raised.value))


def test_no_string_in_the_package_names_a_folder_of_the_development_machine():
    found = []
    for path in sorted((REPO / "scripts").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            text = node.value if isinstance(node, ast.Constant) else None
            if isinstance(text, str) and any(dev in text for dev in ("/work/", "/root/")):
                found.append(f"{path.relative_to(REPO)}:{node.lineno}: {text[:80]!r}")
    assert found == []
