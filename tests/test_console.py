"""The terminal: one line per finished job with the cell's outcome, a closing summary
with the verdicts and the report's path, nothing else (trainbench.analysis.console)."""

from __future__ import annotations

import json
import logging

import pytest
from helpers import copy_workflow, run_snakemake, tiny_config, write_config
from trainbench.analysis.console import Console, cell_line, summary_lines


def write_record(tmp_path, status: str, **extra) -> str:
    path = tmp_path / "runs/image_cnn/cpu/bs32/rep0/metrics.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"status": status, **extra}))
    return str(path)


def test_an_ok_cell_shows_its_throughput_and_what_to_distrust(tmp_path):
    path = write_record(
        tmp_path,
        "ok",
        result={
            "kind": "training",
            "timed": {"samples_per_s": 1234.5, "short_window": True},
            "host": {"disturbed": True, "other_cpu_cores": 1.02},
        },
    )
    line = cell_line(path)
    assert line.startswith("image_cnn/cpu/bs32/rep0  ok 1,234 samples/s")
    assert "disturbed: others used 1.02 cores" in line and "short window" in line


def test_failed_and_unavailable_cells_say_why(tmp_path):
    failed = write_record(
        tmp_path, "failed", error={"class": "oom", "message": "MPS backend out of memory\n..."}
    )
    assert cell_line(failed).endswith("failed: oom — MPS backend out of memory")
    (tmp_path / "runs").rename(tmp_path / "old")
    absent = write_record(tmp_path, "unavailable", reason="this torch build has no MPS")
    assert cell_line(absent).endswith("unavailable: this torch build has no MPS")


def test_events_become_one_line_per_finished_job(tmp_path):
    path = write_record(tmp_path, "ok", result={"timed": {"samples_per_s": 10.0}})
    console = Console()
    info = {"jobid": 7, "rule_name": "run_cell", "output": [path], "wildcards": {}}
    assert console.handle("job_info", info, " Rule: run_cell, Jobid: 7", logging.INFO) == []
    assert console.handle("progress", {"done": 2, "total": 9}, "", logging.INFO) == []
    (line,) = console.handle("job_finished", {"job_id": 7}, "", logging.INFO)
    assert line == "[3/9] run_cell      image_cnn/cpu/bs32/rep0  ok 10 samples/s"
    assert console.handle(None, {}, "Select jobs to execute...", logging.INFO) == []
    assert console.handle(None, {}, "Nothing to be done (all up to date).", logging.INFO) == [
        "Nothing to be done (all up to date)."
    ]


def test_the_summary_names_the_verdicts_the_warnings_and_the_report(tmp_path):
    tables = tmp_path / "tables"
    tables.mkdir()
    (tables / "overview.csv").write_text("workload,records,ok,failed,unavailable\n(all),9,6,1,2\n")
    (tables / "verdicts.csv").write_text(
        "workload,device,status,symbol,text\n"
        "image_cnn,cuda,not working,❌,parity fails at bs 256: mrr 0.011 vs 0.035\n"
        "image_cnn,mps,unavailable,⚪,unavailable: no Metal device\n"
    )
    (tables / "attention.csv").write_text(
        "status,workload,device,error_class,detail,cells,batch_sizes\n"
        "unavailable,image_cnn,mps,,no Metal device,3,32\n"
    )
    (tables / "warnings.csv").write_text(
        "kind,workload,device,batch_size,rep,detail\ndisturbed,image_cnn,cpu,32,0,x\n"
    )
    lines = summary_lines(tmp_path / "report.md")
    assert lines[0] == "9 run records: 6 ok, 1 failed, 2 unavailable."
    assert "  ❌ image_cnn on cuda: parity fails at bs 256: mrr 0.011 vs 0.035" in lines
    assert "  ⚪ mps unavailable: no Metal device" in lines
    assert any("1 disturbed" in line for line in lines)
    assert lines[-1] == f"Report: {tmp_path / 'report.md'}"


def test_the_summary_counts_duplicates_and_conflicts_of_merged_folders(tmp_path):
    tables = tmp_path / "tables"
    tables.mkdir()
    (tables / "duplicates.csv").write_text(
        "kind,identity,records,kept,dropped,differs\n"
        + "duplicate,cell a,1,a,b,\n" * 10
        + "conflict,cell c,2,,c1; c2,result.timed\n"
    )
    lines = summary_lines(tmp_path / "report.md")
    assert (
        "  10 duplicate records dropped: reached twice through the merged folders, counted once"
        in lines
    )
    assert any(line.startswith("  ⚠️ 1 conflict: ") for line in lines)
    (tables / "duplicates.csv").write_text("kind,identity,records,kept,dropped,differs\n")
    assert not any("duplicate" in line for line in summary_lines(tmp_path / "report.md"))


@pytest.mark.e2e
@pytest.mark.slow
def test_the_console_of_a_run_is_one_line_per_job_and_a_summary(tmp_path):
    workflow = copy_workflow(tmp_path / "wf")
    write_config(workflow / "config.yaml", tiny_config(devices=["cpu", "mps"]))
    proc = run_snakemake(workflow, "--cores", "1", "results/report.md", timeout=300)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    lines = [line for line in (proc.stdout + proc.stderr).splitlines() if line.strip()]
    cells = [line for line in lines if "] run_cell" in line]
    assert len(cells) == 4  # image_cnn and matmul on cpu and mps
    assert sum("unavailable:" in line for line in cells) == 2
    assert not any("Select jobs" in line or "Shell command" in line for line in lines)
    assert lines[-2] == "Report: results/report.md" or lines[-1] == "Report: results/report.md"
    jobs = [line for line in lines if line.startswith("[")]
    others = [line for line in lines if not line.startswith(("[", "  "))]
    assert len(lines) <= len(jobs) + len(others) + 12  # the summary's verdict lines
    assert len(others) <= 7, others  # profile, DAG, counts, warnings, report, log
