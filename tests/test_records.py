"""Metrics records: round trip, NaN handling, refusal of bad files, atomic writes."""

from __future__ import annotations

import errno
import json
import os

import pytest
from trainbench.common.records import (
    SCHEMA_VERSION,
    RecordError,
    atomic_write_json,
    atomic_write_text,
    read_record,
    validate_record,
    write_record,
)


def _record(status: str = "ok", **extra) -> dict:
    record = {
        "schema_version": SCHEMA_VERSION,
        "status": status,
        "cell": {"workload": "image_cnn", "device": "cpu", "batch_size": 32, "rep": 0},
        "attempts": [{"attempt": 1, "returncode": 0}],
        "environment": {"python": "3.11"},
        "spec": {"config_hash": "abc"},
    }
    if status == "ok":
        record["result"] = {"kind": "training", "timed": {"samples_per_s": 123.5}}
    elif status == "failed":
        record["error"] = {"class": "oom", "message": "CUDA out of memory"}
    elif status == "unavailable":
        record["reason"] = "torch.cuda.is_available() is False"
    record.update(extra)
    return record


@pytest.mark.parametrize("status", ["ok", "failed", "unavailable"])
def test_round_trip(tmp_path, status):
    path = tmp_path / "cell" / "metrics.json"  # parent folder is created
    record = _record(status)
    write_record(path, record)
    assert read_record(path) == record
    assert os.listdir(path.parent) == ["metrics.json"]


def test_nan_and_inf_become_null(tmp_path):
    path = tmp_path / "metrics.json"
    record = _record(
        result={
            "loss": float("nan"),
            "values": [1.0, float("inf"), float("-inf")],
            "nested": {"x": (float("nan"), 2)},
        }
    )
    write_record(path, record)
    text = path.read_text()
    assert "NaN" not in text and "Infinity" not in text
    back = read_record(path)
    assert back["result"] == {"loss": None, "values": [1.0, None, None], "nested": {"x": [None, 2]}}


def _write_raw(path, text):
    path.write_text(text)
    return path


def test_truncated_json_is_refused(tmp_path):
    path = tmp_path / "metrics.json"
    full = json.dumps(_record())
    _write_raw(path, full[: len(full) // 2])
    with pytest.raises(RecordError, match="not valid JSON") as info:
        read_record(path)
    assert str(path) in str(info.value)


def test_json_list_is_refused(tmp_path):
    path = _write_raw(tmp_path / "metrics.json", json.dumps([_record()]))
    with pytest.raises(RecordError, match="top level is list") as info:
        read_record(path)
    assert str(path) in str(info.value)


def test_other_schema_version_is_refused(tmp_path):
    path = _write_raw(tmp_path / "metrics.json", json.dumps(_record(schema_version=99)))
    with pytest.raises(RecordError, match="schema_version 99") as info:
        read_record(path)
    assert str(path) in str(info.value)


def test_missing_schema_version_is_refused(tmp_path):
    record = _record()
    del record["schema_version"]
    path = _write_raw(tmp_path / "metrics.json", json.dumps(record))
    with pytest.raises(RecordError, match="schema_version None"):
        read_record(path)


@pytest.mark.parametrize(
    "status, drop, where",
    [
        ("failed", "error", "(top level)"),
        ("unavailable", "reason", "(top level)"),
        ("ok", "result", "(top level)"),
        ("ok", "attempts", "(top level)"),
    ],
)
def test_record_missing_required_field_is_refused(tmp_path, status, drop, where):
    record = _record(status)
    del record[drop]
    path = _write_raw(tmp_path / "metrics.json", json.dumps(record))
    with pytest.raises(RecordError) as info:
        read_record(path)
    message = str(info.value)
    assert str(path) in message
    assert drop in message
    assert where in message


def test_bad_error_class_and_cell_are_refused(tmp_path):
    path = _write_raw(
        tmp_path / "a.json", json.dumps(_record("failed", error={"class": "gremlins"}))
    )
    with pytest.raises(RecordError, match="error/class") as info:
        read_record(path)
    assert str(path) in str(info.value)
    bad_cell = _record()
    bad_cell["cell"]["batch_size"] = 0
    path = _write_raw(tmp_path / "b.json", json.dumps(bad_cell))
    with pytest.raises(RecordError, match="cell/batch_size"):
        read_record(path)


def test_write_record_refuses_invalid_record_and_writes_nothing(tmp_path):
    path = tmp_path / "metrics.json"
    record = _record("failed")
    del record["error"]
    with pytest.raises(RecordError) as info:
        write_record(path, record)
    assert str(path) in str(info.value)
    assert not path.exists()
    assert os.listdir(tmp_path) == []


def test_missing_file_is_refused(tmp_path):
    path = tmp_path / "absent.json"
    with pytest.raises(RecordError, match="cannot be read") as info:
        read_record(path)
    assert str(path) in str(info.value)


def test_validate_record_names_source():
    with pytest.raises(RecordError, match="^somewhere.json: "):
        validate_record("not a dict", "somewhere.json")


# ----------------------------------------------------------------------------- atomic writes


def test_atomic_write_text_replaces_content(tmp_path):
    path = tmp_path / "out.txt"
    atomic_write_text(path, "old")
    atomic_write_text(path, "new")
    assert path.read_text() == "new"
    assert os.listdir(tmp_path) == ["out.txt"]


def test_atomic_write_keeps_old_content_when_rename_fails(tmp_path, monkeypatch):
    path = tmp_path / "out.txt"
    path.write_text("old content")

    def failing_replace(src, dst):
        raise OSError("disk on fire")

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(OSError, match="disk on fire"):
        atomic_write_text(path, "new content")
    monkeypatch.undo()
    assert path.read_text() == "old content"
    assert os.listdir(tmp_path) == ["out.txt"]  # the temp file was removed


def test_a_full_disk_keeps_the_old_file_and_says_what_to_do(tmp_path, monkeypatch):
    """ENOSPC while the new content is flushed: the old file stays whole, no temp file
    is left, and the error names the file and the fix (no chained traceback)."""
    path = tmp_path / "out.txt"
    path.write_text("old content")

    def full_disk(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full_disk)
    with pytest.raises(OSError, match="no space left on the device for .*out.txt") as info:
        atomic_write_text(path, "new content")
    monkeypatch.undo()
    assert info.value.errno == errno.ENOSPC and "Fix: free space" in str(info.value)
    assert info.value.__cause__ is None and info.value.__suppress_context__
    assert path.read_text() == "old content"
    assert os.listdir(tmp_path) == ["out.txt"]


def test_atomic_write_keeps_old_content_when_write_is_interrupted(tmp_path, monkeypatch):
    path = tmp_path / "out.txt"
    path.write_text("old content")

    def interrupted_fsync(fd):
        raise KeyboardInterrupt  # BaseException: cleanup must still happen

    monkeypatch.setattr(os, "fsync", interrupted_fsync)
    with pytest.raises(KeyboardInterrupt):
        atomic_write_text(path, "new content that never lands")
    monkeypatch.undo()
    assert path.read_text() == "old content"
    assert os.listdir(tmp_path) == ["out.txt"]


def test_atomic_write_json_unserializable_leaves_old_file(tmp_path):
    path = tmp_path / "data.json"
    atomic_write_json(path, {"a": 1})
    with pytest.raises(TypeError):
        atomic_write_json(path, {"a": object()})
    assert json.loads(path.read_text()) == {"a": 1}
    assert os.listdir(tmp_path) == ["data.json"]


def test_atomic_write_json_is_sorted_and_null_safe(tmp_path):
    path = tmp_path / "data.json"
    atomic_write_json(path, {"b": float("nan"), "a": 1})
    text = path.read_text()
    assert text.endswith("\n")
    assert text.index('"a"') < text.index('"b"')
    assert json.loads(text) == {"a": 1, "b": None}
