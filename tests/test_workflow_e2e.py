"""The real Snakemake workflow on a tiny config, in a copy of the workflow tree.

Runs `python -m snakemake --cores 1 results/report.md` as a subprocess and checks
what a user would look at: the exit status, one record per cell, the tables and
the report. Accelerators absent here must give `unavailable` records, a crashing
cell a `failed` record (not a failed workflow), and a bad config a short message
before any job starts.
"""

from __future__ import annotations

import csv
import os
import re
import subprocess
import sys

import pytest
from helpers import backend_available, copy_workflow, run_snakemake, tiny_config, write_config
from trainbench.analysis.tables import sig
from trainbench.common.records import read_record

pytestmark = pytest.mark.e2e

TARGET = "results/report.md"


def read_runs_csv(workdir) -> list[dict]:
    with open(workdir / "results" / "tables" / "runs.csv", newline="") as fh:
        return list(csv.DictReader(fh))


def section(report: str, heading: str) -> str:
    """The text of one `## heading` section of the report."""
    match = re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^## |\Z)", report, re.M | re.S)
    assert match, f"report has no section {heading!r}:\n{report}"
    return match.group(1)


def table_rows(text: str) -> list[list[str]]:
    """Markdown table rows as lists of stripped cells (header and rule lines included)."""
    return [
        [cell.strip() for cell in line.strip().strip("|").split("|")]
        for line in text.splitlines()
        if line.startswith("|")
    ]


def output_of(proc) -> str:
    return proc.stdout + proc.stderr


@pytest.fixture
def workflow(tmp_path):
    return copy_workflow(tmp_path / "wf")


@pytest.fixture(scope="module")
def one_cell(tmp_path_factory):
    """The workflow once on the smallest matrix that still trains (one image_cnn cell on
    the CPU, one repeat) through the report, then once more as a dry run: the fast
    suite's end-to-end check, shared by the tests below. The tiny matrix of every
    device is test_tiny_matrix_end_to_end (make test-slow)."""
    workflow = copy_workflow(tmp_path_factory.mktemp("one_cell") / "wf")
    config = tiny_config(devices=["cpu"])
    config["workloads"] = {"image_cnn": config["workloads"]["image_cnn"]}
    # What a cell measures is tested in-process; here its short window is published as
    # it is (no extension steps) and its diagnostic pass is two steps.
    config["timing"] = {
        "extend_short_windows": False,
        "step_breakdown": {"max_steps": 2, "min_steps": 2},
    }
    write_config(workflow / "config.yaml", config)
    proc = run_snakemake(workflow, "--cores", "1", TARGET, timeout=240)
    again = run_snakemake(workflow, "--cores", "1", "--dry-run", TARGET, timeout=120)
    return workflow, proc, again


def test_one_cell_runs_through_the_workflow_to_the_report(one_cell):
    workflow, proc, _ = one_cell
    assert proc.returncode == 0, output_of(proc)[-6000:]
    path = workflow / "results" / "runs" / "image_cnn" / "cpu" / "bs32" / "rep0"
    record = read_record(path / "metrics.json")
    assert record["status"] == "ok", record.get("error")
    assert record["cell"] == {"workload": "image_cnn", "device": "cpu", "batch_size": 32, "rep": 0}
    assert record["numerics"]["status"] == "pass"
    rate = record["result"]["timed"]["samples_per_s"]
    assert rate > 0
    rows = read_runs_csv(workflow)
    assert [(r["workload"], r["device"], r["status"]) for r in rows] == [("image_cnn", "cpu", "ok")]
    assert float(rows[0]["samples_per_s"]) == pytest.approx(rate)
    report = (workflow / TARGET).read_text()
    speed_rows = table_rows(section(report, "Speedup"))
    assert any(r[:3] == ["image_cnn", "cpu", "32"] and sig(rate) in r for r in speed_rows), report


def test_a_finished_workflow_has_nothing_left_to_do(one_cell):
    _, proc, again = one_cell
    assert proc.returncode == 0, output_of(proc)[-3000:]
    assert again.returncode == 0, output_of(again)[-3000:]
    assert "Nothing to be done" in output_of(again)


@pytest.mark.slow
def test_tiny_matrix_end_to_end(workflow):
    config = tiny_config(devices=["cpu", "mps", "cuda"])
    write_config(workflow / "config.yaml", config)

    proc = run_snakemake(workflow, "--cores", "1", TARGET, timeout=240)
    assert proc.returncode == 0, output_of(proc)[-6000:]

    # One valid record per cell, at the documented path.
    expected = {("image_cnn", device, 32, 0) for device in ("cpu", "mps", "cuda")} | {
        ("matmul", device, 1, 0) for device in ("cpu", "mps", "cuda")
    }
    records = {}
    for workload, device, bs, rep in sorted(expected):
        path = workflow / "results" / "runs" / workload / device / f"bs{bs}" / f"rep{rep}"
        record = read_record(path / "metrics.json")
        assert record["cell"] == {
            "workload": workload,
            "device": device,
            "batch_size": bs,
            "rep": rep,
        }
        records[(workload, device)] = record
    found = {
        p.relative_to(workflow / "results" / "runs").parts[:2]
        for p in (workflow / "results" / "runs").rglob("metrics.json")
    }
    assert found == {(w, d) for w, d, _, _ in expected}

    for (workload, device), record in records.items():
        if backend_available(device):
            assert record["status"] == "ok", (workload, device, record.get("error"))
        else:
            assert record["status"] == "unavailable", (workload, device, record["status"])
            assert record["reason"] and device in record["reason"].lower()
    cnn_cpu = records[("image_cnn", "cpu")]
    assert cnn_cpu["result"]["timed"]["samples_per_s"] > 0
    # Snakemake exports OMP_NUM_THREADS=1 (the job's threads) to every job; a CPU
    # cell with `threads: null` must still run with PyTorch's default thread count.
    default_threads = subprocess.run(
        [sys.executable, "-c", "import torch; print(torch.get_num_threads())"],
        env={k: v for k, v in os.environ.items() if not k.endswith("_NUM_THREADS")},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert cnn_cpu["settings_in_force"]["torch_threads"] == int(default_threads)
    assert "OMP_NUM_THREADS" not in cnn_cpu["environment"]["behaviour_variables"]
    # at least the configured warm-up; the steady-state search may find a longer one on a
    # busy machine (54 steps once here), and the timed window starts where it ends
    warmup = cnn_cpu["result"]["warmup"]
    assert warmup["configured_steps"] == 1 and warmup["steps"] >= 1
    assert cnn_cpu["result"]["steady_state"]["start_step"] == warmup["steps"]
    assert records[("matmul", "cpu")]["result"]["kind"] == "microbenchmark"

    # The tables: one row per record, status and throughput copied from the records.
    rows = read_runs_csv(workflow)
    assert len(rows) == len(expected)
    by_cell = {(r["workload"], r["device"]): r for r in rows}
    assert set(by_cell) == set(records)
    for key, record in records.items():
        assert by_cell[key]["status"] == record["status"]
        assert by_cell[key]["reason"] == (record["reason"] or "")
    cpu_rate = float(by_cell[("image_cnn", "cpu")]["samples_per_s"])
    assert cpu_rate == pytest.approx(cnn_cpu["result"]["timed"]["samples_per_s"])
    with open(workflow / "results" / "tables" / "matmul.csv", newline="") as fh:
        matmul_cpu = [r for r in csv.DictReader(fh) if r["device"] == "cpu"]
    assert [int(r["n"]) for r in matmul_cpu] == [16, 32]
    assert all(float(r["gflops"]) > 0 for r in matmul_cpu)

    # The report: every workload, the unavailable cells with their reasons, the cpu row.
    report = (workflow / TARGET).read_text()
    assert "image_cnn" in report and "matmul" in report
    assert "unavailable" in report
    speed_rows = table_rows(section(report, "Speedup"))
    cpu_row = next((r for r in speed_rows if r[:3] == ["image_cnn", "cpu", "32"]), None)
    assert cpu_row is not None, report
    assert sig(cpu_rate) in cpu_row  # the median of one repeat is the record's number
    assert "range of 1 run" in " ".join(cpu_row) and "95%" not in section(report, "Speedup")
    matmul_rows = table_rows(section(report, "`matmul` (seed report 004)"))
    assert [r[0] for r in matmul_rows if r[0].isdigit()] == ["16", "32"]
    attention = table_rows(section(report, "Failed and unavailable cells"))
    for (workload, device), record in records.items():
        if record["status"] == "unavailable":
            # one line per unavailable device, naming every workload it affects
            assert any(
                r[1:3] == [device, "unavailable"] and workload in r[0] and record["reason"] in r[-1]
                for r in attention
            ), (workload, device, attention)

    # Everything is up to date: a second run has nothing to do.
    again = run_snakemake(workflow, "--cores", "1", "--dry-run", TARGET, timeout=120)
    assert again.returncode == 0, output_of(again)[-3000:]
    assert "Nothing to be done" in output_of(again)


@pytest.mark.slow
def test_crashing_cell_is_a_failed_record_not_a_failed_workflow(workflow):
    config = tiny_config(
        devices=["cpu"],
        launcher={"allow_fault_injection": True, "max_attempts": 1, "progress": "never"},
        fault_injection=[
            {"workload": "matmul", "device": "cpu", "batch_size": 1, "fault": "sigabrt"}
        ],
    )
    config["workloads"] = {"matmul": {**config["workloads"]["matmul"], "batch_sizes": [1, 2]}}
    write_config(workflow / "config.yaml", config)

    # No TRAINBENCH_ALLOW_FAULTS: the config's switch alone enables the fault.
    proc = run_snakemake(workflow, "--cores", "1", TARGET, timeout=180)
    assert proc.returncode == 0, output_of(proc)[-6000:]

    runs = workflow / "results" / "runs" / "matmul" / "cpu"
    crashed = read_record(runs / "bs1" / "rep0" / "metrics.json")
    assert crashed["status"] == "failed"
    assert crashed["error"]["class"] == "signal"
    assert crashed["attempts"][0]["signal"] == "SIGABRT"
    # The cell ran the copied tree's code (PYTHONPATH points there).
    assert (
        str(workflow / "scripts" / "trainbench" / "measure" / "faults.py")
        in crashed["error"]["stderr_tail"]
    )
    fine = read_record(runs / "bs2" / "rep0" / "metrics.json")
    assert fine["status"] == "ok", fine.get("error")

    log = (
        workflow / "results" / "logs" / "runs" / "matmul" / "cpu" / "bs1" / "rep0.log"
    ).read_text()
    assert "injected fault: abort()" in log

    rows = {r["batch_size"]: r for r in read_runs_csv(workflow)}
    assert rows["1"]["status"] == "failed" and rows["1"]["error_class"] == "signal"
    assert rows["2"]["status"] == "ok"

    report = (workflow / TARGET).read_text()
    attention = table_rows(section(report, "Failed and unavailable cells"))
    failed = [r for r in attention if r[:3] == ["matmul", "cpu", "failed"]]
    assert len(failed) == 1, attention
    assert failed[0][3] == "signal"
    assert "SIGABRT" in failed[0][-1]
    assert "**failed** (signal)" in section(report, "Verdicts")


@pytest.fixture
def cpu_hog():
    """Another program burning a core while the workflow runs (not a descendant of
    any cell: a sibling of Snakemake, as a user's browser or build would be)."""
    proc = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    yield proc
    proc.kill()
    proc.wait()


@pytest.mark.slow
def test_a_cpu_hog_during_a_cell_marks_it_disturbed_and_the_report_warns(workflow, cpu_hog):
    config = tiny_config(devices=["cpu"])
    config["workloads"] = {"image_cnn": config["workloads"]["image_cnn"]}
    write_config(workflow / "config.yaml", config)

    proc = run_snakemake(workflow, "--cores", "1", TARGET, timeout=240)
    assert proc.returncode == 0, output_of(proc)[-6000:]

    record = read_record(workflow / "results/runs/image_cnn/cpu/bs32/rep0/metrics.json")
    host = record["result"]["host"]
    assert host["disturbed"] is True, host
    assert host["other_cpu_cores"] >= 0.5
    report = (workflow / TARGET).read_text()
    first_lines = "\n".join(report.splitlines()[:6])
    assert "⚠️" in first_lines and "disturbed" in first_lines, first_lines
    warnings = table_rows(section(report, "Measurement quality"))
    assert any(r[:3] == ["disturbed", "image_cnn", "cpu"] for r in warnings), warnings
    speed = table_rows(section(report, "Speedup"))
    assert any(r[:3] == ["image_cnn", "cpu", "32"] and "1 disturbed" in " ".join(r) for r in speed)


BAD_CONFIGS = {
    "batch_size_zero": (
        lambda c: c["workloads"]["image_cnn"].update(batch_sizes=[0]),
        "workloads.image_cnn.batch_sizes[0]",
    ),
    "unknown_key": (lambda c: c.update(epochs=3), "unknown key `epochs`"),
    "faults_without_switch": (
        lambda c: c.update(
            fault_injection=[{"workload": "matmul", "device": "cpu", "fault": "sigabrt"}]
        ),
        "launcher.allow_fault_injection",
    ),
}


@pytest.mark.parametrize("case", list(BAD_CONFIGS))
def test_bad_config_stops_before_any_job_with_a_short_message(workflow, case):
    break_config, expected = BAD_CONFIGS[case]
    config = tiny_config()
    break_config(config)
    write_config(workflow / "config.yaml", config)

    proc = run_snakemake(workflow, "--cores", "1", TARGET, timeout=120)
    out = output_of(proc)

    assert proc.returncode != 0, out
    assert expected in proc.stderr, out
    assert "Traceback" not in out
    assert len(out.splitlines()) < 15, out
    assert not (workflow / "results").exists()


@pytest.mark.slow
def test_a_named_run_keeps_its_results_apart_and_names_its_config_files(workflow):
    write_config(workflow / "config.yaml", tiny_config(devices=["cpu"]))
    other = tiny_config(devices=["cpu"], run_name="small")
    other["workloads"] = {"matmul": other["workloads"]["matmul"]}
    write_config(workflow / "small.yaml", {"run_name": "small", "workloads": other["workloads"]})
    # No target: the default target is the run's own report.
    proc = run_snakemake(workflow, "--cores", "1", "--configfile", "small.yaml", timeout=240)
    assert proc.returncode == 0, output_of(proc)[-4000:]
    report = (workflow / "results/small/report.md").read_text()
    assert "Config: `config.yaml`, overridden by `small.yaml`; run name `small`." in report
    assert (workflow / "results/small/runs/matmul/cpu/bs1/rep0/metrics.json").exists()
    assert not (workflow / "results/runs").exists()  # the default run's folder is untouched
