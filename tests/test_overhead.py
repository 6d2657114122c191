"""Workflow-overhead changes, and the overhead benchmark's own bookkeeping.

Correctness only: how fast anything is gets measured by
benchmarks/workflow_overhead.py, never asserted here.
"""

from __future__ import annotations

import copy
import json
import sys

import pytest
from helpers import REPO, backend_available, tiny_config
from trainbench import config as tbconfig
from trainbench.analysis.aggregate import build_tables, load_records
from trainbench.analysis.loss_tables import loss_tables, read_references
from trainbench.common.records import RecordError, read_record, validate_record
from trainbench.launch import availability, launcher
from trainbench.launch.environment import cell_environment

sys.path.insert(0, str(REPO / "benchmarks"))
from overhead import measure, render, synthetic, workflow  # noqa: E402  (benchmarks/overhead)
from overhead import trace as traces  # noqa: E402

RUN = {"pid": 4242, "started": 1795316200.31}


def cuda_cell(rep: int) -> tbconfig.Cell:
    return tbconfig.Cell("matmul", "cuda", 1, rep)


def spec_for(cell: tbconfig.Cell) -> dict:
    config = tbconfig.validate_config(tiny_config())
    return tbconfig.cell_spec(config, cell)


def record_path(root, cell: tbconfig.Cell):
    return root / "results" / "runs" / cell.relpath / "metrics.json"


def run(tmp_path, cell: tbconfig.Cell) -> tuple[dict, str]:
    log = tmp_path / f"{cell.device}-{cell.rep}.log"
    record = launcher.run_cell(spec_for(cell), record_path(tmp_path, cell), log)
    assert read_record(record_path(tmp_path, cell)) == json.loads(json.dumps(record))
    return record, log.read_text()


def without_run_seed(environment: dict) -> dict:
    return {k: v for k, v in environment.items() if k != "run_seed"}


# ----------------------------------------------------------------------------- availability memo

needs_no_cuda = pytest.mark.skipif(backend_available("cuda"), reason="a CUDA device is visible")


@pytest.mark.slow
@needs_no_cuda
def test_unavailable_device_is_remembered_within_one_snakemake_run(tmp_path, monkeypatch):
    monkeypatch.setattr(availability, "_snakemake_run", lambda: dict(RUN))
    first, _ = run(tmp_path, cuda_cell(0))
    second, log = run(tmp_path, cuda_cell(1))

    # The first cell's child found the device missing; the second started no child.
    assert first["attempts"][0]["returncode"] == 0
    assert "availability" not in first["attempts"][0]
    assert second["attempts"][0]["returncode"] is None
    assert second["attempts"][0]["availability"]["cell"] == "matmul/cuda/bs1/rep0"
    assert "no child started" in log
    # ...and its record says the same as a child would have.
    assert first["status"] == second["status"] == "unavailable"
    assert second["reason"] == first["reason"] and "cuda" in second["reason"].lower()
    assert without_run_seed(second["environment"]) == without_run_seed(first["environment"])
    assert second["environment"]["torch_version"]
    assert second["result"] is None and second["error"] is None


@pytest.mark.slow
@needs_no_cuda
def test_another_snakemake_run_asks_the_device_again(tmp_path, monkeypatch):
    monkeypatch.setattr(availability, "_snakemake_run", lambda: dict(RUN))
    run(tmp_path, cuda_cell(0))
    monkeypatch.setattr(availability, "_snakemake_run", lambda: {**RUN, "pid": RUN["pid"] + 1})
    second, log = run(tmp_path, cuda_cell(1))
    assert second["attempts"][0]["returncode"] == 0
    assert "availability" not in second["attempts"][0]
    assert "no child started" not in log


def for_cell(spec: dict, output):
    """The memo of a cell, keyed on its environment computed once (as run_cell does)."""
    return launcher.AvailabilityMemo.for_cell(spec, output, cell_environment(spec))


def test_memo_only_for_accelerator_records_under_a_snakemake_run(tmp_path, monkeypatch):
    cell = cuda_cell(0)
    output = record_path(tmp_path, cell)
    monkeypatch.setattr(availability, "_snakemake_run", lambda: None)
    assert for_cell(spec_for(cell), output) is None
    monkeypatch.setattr(availability, "_snakemake_run", lambda: dict(RUN))
    memo = for_cell(spec_for(cell), output)
    assert memo is not None and memo.path.parent == tmp_path / "results" / "availability"
    assert for_cell(spec_for(cell), tmp_path / "metrics.json") is None
    cpu = tbconfig.Cell("matmul", "cpu", 1, 0)
    assert for_cell(spec_for(cpu), record_path(tmp_path, cpu)) is None
    # Other device settings: another memo file.
    other = spec_for(cell)
    other["device_settings"] = {**other["device_settings"], "device_index": 1}
    assert for_cell(other, output).path != memo.path


@pytest.mark.parametrize(
    ("cmdline", "expected"),
    [
        (["/venv/bin/python3", "/venv/bin/snakemake", "--cores", "1"], True),
        (["python", "-m", "snakemake", "--cores", "1"], True),
        (["snakemake", "-n"], True),
        (["python", "-m", "pytest", "tests"], False),
        (["bash", "/home/me/snakemake-runs/go.sh"], False),
    ],
)
def test_snakemake_process_detection(cmdline, expected):
    assert availability._is_snakemake(cmdline) is expected


# ----------------------------------------------------------------------------- records


def test_cached_validator_reports_like_jsonschema_validate():
    record = {"schema_version": 2, "status": "failed", "cell": {}, "attempts": [{}]}
    record |= {"environment": {}, "spec": {}, "error": {"class": "no such class"}}
    with pytest.raises(RecordError, match=r"<record>: invalid metrics record at "):
        validate_record(record)


# ----------------------------------------------------------------------------- benchmark


def _event(event, pid, ppid, t, **fields):
    return json.dumps({"event": event, "pid": pid, "ppid": ppid, "t": t, **fields})


def test_cell_phases_split_the_cell_wall_time(tmp_path):
    output = tmp_path / "results/runs/matmul/cpu/bs1/rep0/metrics.json"
    output.parent.mkdir(parents=True)
    output.write_text(json.dumps({"status": "ok"}))
    lines = [
        _event("start", 1, 0, 100.0, created=100.0, argv=["-m", "snakemake"]),
        _event("start", 2, 1, 101.1, created=101.0, argv=["tmp.run_cell.py"]),
        _event("call", 2, 1, 102.0, what="trainbench.launch.launcher.run_cell", arg=str(output)),
        _event("start", 3, 2, 102.2, created=102.1, argv=["-m", "trainbench.launch.child"]),
        _event("call", 3, 2, 103.5, what="trainbench.measure.devices.get_device"),
        _event("call", 3, 2, 104.0, what="trainbench.common.records.atomic_write_json"),
        _event("call", 2, 1, 104.3, what="trainbench.common.records.atomic_write_json"),
        _event("exit", 2, 1, 104.4, rule="run_cell"),
        _event("exit", 1, 0, 105.0),
    ]
    trace = tmp_path / "trace.jsonl"
    trace.write_text("\n".join(lines) + "\n")
    procs = traces.read_trace(trace)
    (row,) = traces.cell_phases(procs, tmp_path / "results" / "runs")
    assert row["cell"] == "matmul/cpu/bs1/rep0" and row["status"] == "ok"
    assert row["snakemake_gap_s"] == pytest.approx(1.0)
    assert row["launcher_start_imports_s"] == pytest.approx(1.0)
    assert row["child_spawn_imports_s"] == pytest.approx(1.5)
    assert row["work_s"] == pytest.approx(0.5)
    assert row["child_exit_and_record_s"] == pytest.approx(0.4)
    parts = ("snakemake_gap_s", "launcher_start_imports_s", "child_spawn_imports_s", "work_s")
    parts += ("child_exit_and_record_s",)
    assert sum(row[p] for p in parts) == pytest.approx(row["cell_wall_s"])
    assert row["overhead_s"] == pytest.approx(row["cell_wall_s"] - row["work_s"])
    assert traces.snakemake_fixed(procs)["start_to_first_job_s"] == pytest.approx(1.0)


def _not_ok(template: dict, status: str) -> dict:
    record = copy.deepcopy(template)
    record.update(status=status, result=None, settings_in_force=None, warnings=None)
    if status == "unavailable":
        record.update(reason="this torch build has no CUDA support", error=None)
    else:
        record.update(reason=None, error={"class": "oom", "message": "out of memory"})
    return record


@pytest.mark.slow
def test_synthetic_records_are_valid_and_aggregate(tmp_path):
    archives = sorted(workflow.REPO.glob(measure.TEMPLATE_ARCHIVES))
    templates = synthetic.load_templates(archives, [])
    assert templates
    for workload in synthetic.synthetic_config()["workloads"]:
        base = next(r for _, r in templates if r["cell"]["workload"] == workload)
        templates += [(f"made:{workload}:failed", _not_ok(base, "failed"))]

    config = synthetic.synthetic_config()
    counts, references = synthetic.write_synthetic_records(tmp_path, config, templates)
    assert counts == {"failed": 40, "ok": 710, "unavailable": 250}
    paths = sorted((tmp_path / "results" / "runs").glob("*/*/bs*/rep*/metrics.json"))
    assert len(paths) == 1000
    records, skipped = load_records(paths)  # every one valid against the record schema
    assert not skipped
    tables = build_tables(records)
    # Per-step losses of the cell's length; a float64 reference for every repeat of the
    # baseline (cpu-t1) of each training workload: 4 workloads x 6 batch sizes x 10.
    training = [r for _, r in records if r["status"] == "ok" and r["result"]["kind"] == "training"]
    for record in training:
        result = record["result"]
        losses = result["steps"]["losses"]
        assert len(losses) == result["settings"]["epochs"] == len(result["epochs"])
        assert {len(e) for e in losses} == {result["settings"]["steps_per_epoch"]}
        assert sum(map(len, result["steps"]["seconds"])) == len(result["steps"]["samples"])
        assert result["epochs"][-1]["train_loss"] == result["task"]["final_loss"]
    bs8 = next(r for r in training if r["cell"]["batch_size"] == 8)["result"]
    bs256 = next(r for r in training if r["cell"]["batch_size"] == 256)["result"]
    assert bs8["settings"]["steps_per_epoch"] == 32 * bs256["settings"]["steps_per_epoch"]
    refs = sorted((tmp_path / "results" / "references").glob("*/bs*/rep*/reference.json"))
    assert references == len(refs) == 240
    tables.update(loss_tables(records, read_references(refs)))
    assert (tables["references"]["status"] == "ok").all()
    assert tables["references"]["steps"].max() == 32  # fewer where an epoch is shorter
    assert set(tables["step_losses"]["kind"]) == {"run", "reference"}
    runs = tables["runs"]
    assert set(runs["workload"]) == set(config["workloads"])
    assert set(runs["device"]) == {"cpu-t1", "cpu-t2", "mps", "cuda"}, "one machine"
    assert (runs["host"] == synthetic.SYNTHETIC_HOST).all()
    ok = runs[runs["status"] == "ok"]
    assert (ok["samples_per_s"].notna() | (ok["workload"] == "matmul")).all()
    assert not tables["matmul"].empty and not tables["per_label_runs"].empty


def _result(value: float) -> dict:
    stats = {"n": 3, "cell_wall_s": value + 1, "overhead_s": value}
    return {
        "date": "2026-11-22",
        "json": "x.json",
        "json_link": "results/x.json",
        "goals": render.GOALS,
        "machine": {
            "host": "h",
            "cpu_model": "cpu",
            "logical_cores": 2,
            "memory_gib": 24.0,
            "os": "Linux",
            "python": "3.11.7",
            "packages": dict.fromkeys(
                ("torch", "snakemake", "pandas", "matplotlib", "seaborn"), "1.0"
            ),
        },
        "runs": {
            "before": {
                "argv": ["--label", "before"],
                "tree": {"commit": "abc"},
                "cells": {"runs": 1, "cells_per_run": 3, "all": stats, "by_status": {}},
                "downstream": {"records": 1000, "runs": 1, "wall_s": 40.0, "jobs": {}},
            }
        },
    }


def test_readme_section_comes_from_the_json_and_leaves_other_sections(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("# Benchmarks\n\n## Training speed\n\nTheirs.\n\n## Later\n\nAlso theirs.\n")
    render.update_readme(readme, render.markdown_section(_result(4.25)))
    render.update_readme(readme, render.markdown_section(_result(2.5)))
    text = readme.read_text()
    assert text.count(render.SECTION_HEADING) == 1
    assert "Theirs." in text and "## Later\n\nAlso theirs." in text
    assert "2.50 s (met)" in text and "4.25" not in text
    assert "40.00 s (not met)" in text


def test_readme_section_names_the_command_and_the_load(tmp_path):
    result = _result(2.5)
    run = result["runs"]["before"]
    run.update(load_average_at_start=[0.42, 0.3, 0.2], load_average_at_end=[1.5, 0.9, 0.5])
    run["downstream"].update(command="snakemake --cores 2 results/report.md", cores=2)
    run["downstream"]["load_average_at_start"] = [0.8, 0.5, 0.3]
    text = render.markdown_section(result)
    assert ".venv/bin/python benchmarks/workflow_overhead.py --label before" in text
    assert "`snakemake --cores 2 results/report.md`" in text
    assert "1-minute load average at the start 0.42" in text
    assert "when the downstream runs began 0.8, at the end 1.5" in text


def test_the_rerun_command_leaves_out_the_output_and_quotes_values():
    line = render.command_line(["--label", "x", "--output", "/tmp/o.json", "--note", "a b"])
    assert line == ".venv/bin/python benchmarks/workflow_overhead.py --label x --note 'a b'"


def test_wait_for_load_waits_until_the_load_is_below_the_limit(monkeypatch):
    clock = {"t": 0.0}
    # The load falls below 1 after 45 s of waiting.
    load = lambda: (3.0 if clock["t"] < 45 else 0.5, 1.0, 1.0)  # noqa: E731
    monkeypatch.setattr(measure.os, "getloadavg", load)
    monkeypatch.setattr(measure.time, "monotonic", lambda: clock["t"])
    monkeypatch.setattr(measure.time, "sleep", lambda s: clock.update(t=clock["t"] + s))
    assert measure.wait_for_load(1.0, at_most=600) == {"limit": 1.0, "waited_s": 45.0, "met": True}
    clock["t"] = 0.0
    monkeypatch.setattr(measure.os, "getloadavg", lambda: (5.0, 5.0, 5.0))
    assert measure.wait_for_load(1.0, at_most=30)["met"] is False
