"""`make gpu-evidence` is one call (trainbench.evidence.run): each part's wall time and
their sum are written into every folder the call made, failed parts named, and after
each part, so that a call stopped part-way says so."""

import json
import subprocess

import pytest
from trainbench.evidence import run as evidence_run


def _fake_part(root, name, folder, seconds, clock, fail=False):
    def run_part(part_name, root_, logs):
        clock[0] += seconds
        if fail:
            raise subprocess.CalledProcessError(1, ["x"], output="boom")
        dest = root / "docs" / "measured" / folder
        dest.mkdir(parents=True, exist_ok=True)
        meta = {"commit": "abc", "code": {"label": "src", "source_from": "records"}}
        (dest / "EVIDENCE.json").write_text(json.dumps(meta))
        return meta

    return run_part


def test_every_folder_of_the_call_records_each_parts_wall_and_their_sum(
    tmp_path, monkeypatch, capsys
):
    clock = [0.0]
    parts = {"a": ("fa", 200.0, False), "b": ("fb", 150.0, True), "c": ("fc", 300.0, False)}
    folders = {name: spec[0] for name, spec in parts.items()}

    def run_part(name, root, logs):
        folder, seconds, fail = parts[name]
        return _fake_part(tmp_path, name, folder, seconds, clock, fail)(name, root, logs)

    monkeypatch.setattr(evidence_run, "PARTS", dict.fromkeys(parts))
    monkeypatch.setattr(evidence_run, "cuda_problem", lambda: None)
    monkeypatch.setattr(evidence_run, "run_part", run_part)
    monkeypatch.setattr(evidence_run, "_folder", lambda name, root: folders[name])
    monkeypatch.setattr(evidence_run.time, "perf_counter", lambda: clock[0])

    assert evidence_run.make_evidence(["a", "b", "c"], tmp_path) == 1
    for folder in ("fa", "fc"):
        meta = json.loads((tmp_path / "docs/measured" / folder / "EVIDENCE.json").read_text())
        assert meta["commit"] == "abc"  # what the part wrote is kept
        assert meta["call"] == {
            "parts_seconds": {"a": 200.0, "b": 150.0, "c": 300.0},
            "total_seconds": 650.0,
            "limit_seconds": 600,
            "failed_parts": ["b"],
            "finished": True,
        }
    assert not (tmp_path / "docs/measured/fb").exists()
    out = capsys.readouterr().out
    assert "650 s in all (a 200 s, b 150 s, c 300 s; limit 600 s)" in out


def test_a_call_stopped_part_way_leaves_the_parts_it_got_through(tmp_path, monkeypatch):
    """A call killed in its second part (a command's time limit) keeps, in the folder
    its first part made, that part's wall and ``finished: false``."""
    clock = [0.0]

    def run_part(name, root, logs):
        if name == "b":
            clock[0] += 50.0
            raise KeyboardInterrupt  # stands for the signal that ends the call
        return _fake_part(tmp_path, name, "fa", 200.0, clock)(name, root, logs)

    monkeypatch.setattr(evidence_run, "PARTS", dict.fromkeys(["a", "b"]))
    monkeypatch.setattr(evidence_run, "cuda_problem", lambda: None)
    monkeypatch.setattr(evidence_run, "run_part", run_part)
    monkeypatch.setattr(evidence_run, "_folder", lambda name, root: "fa")
    monkeypatch.setattr(evidence_run.time, "perf_counter", lambda: clock[0])

    with pytest.raises(KeyboardInterrupt):
        evidence_run.make_evidence(["a", "b"], tmp_path)
    meta = json.loads((tmp_path / "docs/measured/fa/EVIDENCE.json").read_text())
    assert meta["call"]["finished"] is False
    assert meta["call"]["parts_seconds"]["a"] == 200.0 and meta["call"]["failed_parts"] == []
