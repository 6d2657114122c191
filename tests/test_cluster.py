"""The workflow on a real Slurm: a single-node cluster started by tests/cluster/slurm.sh
(slurmctld, slurmd, munge, slurmdbd + MariaDB), driven through Snakemake's Slurm
executor plugin with docs/cluster.md's own command and profiles/slurm.

Needs root and apt (it installs Debian's Slurm packages); elsewhere every test here
skips with the reason, unless TRAINBENCH_REQUIRE_CLUSTER=1 (CI), where a missing
cluster is an error. The fixture stops, by PID, every daemon its start started.
"""

from __future__ import annotations

import csv
import datetime as dt
import importlib.util
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import REPO, cells_here, copy_workflow, run_snakemake, tiny_config, write_config
from trainbench.common.records import read_record

pytestmark = [pytest.mark.cluster, pytest.mark.e2e]

SLURM_SH = REPO / "tests" / "cluster" / "slurm.sh"
SLURM_BASE = Path(os.environ.get("SLURM_BASE", "/tmp/trainbench-slurm"))
REQUIRE = os.environ.get("TRAINBENCH_REQUIRE_CLUSTER") == "1"
# What the test cluster is: tests/cluster/slurm.sh makes partition `debug`; with
# slurmdbd running, `root` is an account.
PARTITION, ACCOUNT = "debug", "root"
TARGET = "results/report.md"


def readme_cluster_command() -> str:
    """The command of docs/cluster.md, "Running on a cluster" (the README links to it)."""
    doc = (REPO / "docs" / "cluster.md").read_text()
    match = re.search(r"^# Running on a cluster\n(.*)", doc, re.M | re.S)
    assert match, "docs/cluster.md has no section 'Running on a cluster'"
    commands = re.findall(
        r"^\s*(?:\.venv/bin/)?(snakemake --workflow-profile profiles/slurm[^\n]*)$", match[1], re.M
    )
    assert commands, "docs/cluster.md shows no `snakemake --workflow-profile` command"
    return commands[0].strip()  # the venv's snakemake: run_snakemake runs that one


def _unavailable(reason: str):
    if REQUIRE:
        pytest.fail(f"TRAINBENCH_REQUIRE_CLUSTER=1 but {reason}")
    pytest.skip(reason)


def _started() -> list[str]:
    path = SLURM_BASE / "started"
    return path.read_text().split() if path.exists() else []


@pytest.fixture(scope="module")
def slurm():
    """A running single-node Slurm; afterwards only what this start started is stopped."""
    if not sys.platform.startswith("linux") or os.geteuid() != 0:
        _unavailable("the cluster tests need root on Linux (they install and start Slurm)")
    if shutil.which("apt-get") is None:
        _unavailable("the cluster tests need apt-get to install Debian's Slurm packages")
    if importlib.util.find_spec("snakemake_executor_plugin_slurm") is None:
        _unavailable('snakemake-executor-plugin-slurm is not installed (pip install -e ".[slurm]")')
    before = set(_started())
    env = dict(os.environ, SLURM_BASE=str(SLURM_BASE), PARTITION=PARTITION)
    proc = subprocess.run(
        ["bash", str(SLURM_SH)], env=env, capture_output=True, text=True, timeout=900
    )
    ours = [p for p in _started() if p not in before]
    try:
        if proc.returncode != 0:
            _unavailable(
                f"tests/cluster/slurm.sh failed ({proc.returncode}):\n"
                + (proc.stdout + proc.stderr)[-3000:]
            )
        yield {"partition": PARTITION, "account": ACCOUNT}
    finally:
        if ours:
            subprocess.run(["bash", str(SLURM_SH), "stop", *ours], env=env, timeout=120)


def node_memory_mb() -> int:
    out = subprocess.run(
        ["scontrol", "show", "node", "-o"], capture_output=True, text=True, check=True
    ).stdout
    return int(re.search(r"RealMemory=(\d+)", out)[1])


def cluster_workflow(path: Path, config: dict) -> Path:
    """A copy of the workflow with the profile filled in the way docs/cluster.md says
    (partition, account), plus two settings for a test cluster: the first status
    check after 5 s instead of 40, and memory the node has."""
    workflow = copy_workflow(path)
    write_config(workflow / "config.yaml", config)
    profile = workflow / "profiles" / "slurm" / "config.yaml"
    text = profile.read_text()
    for placeholder, value in (("FILL_IN_PARTITION", PARTITION), ("FILL_IN_ACCOUNT", ACCOUNT)):
        assert placeholder in text, f"profile has no {placeholder} to fill in"
        text = text.replace(placeholder, value)
    text = text.replace(
        "slurm-init-seconds-before-status-checks: 40", "slurm-init-seconds-before-status-checks: 5"
    )
    memory = node_memory_mb()
    if memory < 8000:
        text = text.replace("mem_mb: 8000", f"mem_mb: {memory // 2}")
    profile.write_text(text)
    return workflow


def run_readme_command(workflow: Path, timeout: float = 420, **kwargs):
    args = shlex.split(readme_cluster_command())
    assert args[0] == "snakemake"
    return run_snakemake(workflow, *args[1:], timeout=timeout, **kwargs)


def sacct(job_ids, since: str) -> dict[str, dict]:
    fields = ["JobID", "JobName", "State", "ReqTRES", "AllocTRES", "Start", "End", "NodeList"]
    out = subprocess.run(
        ["sacct", "-n", "-P", "-X", "-S", since, "-j", ",".join(job_ids), "-o", ",".join(fields)],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    rows = [dict(zip(fields, line.split("|"), strict=True)) for line in out.splitlines() if line]
    return {row["JobID"]: row for row in rows}


def jobs_named(name: str, since: str) -> set[str]:
    out = subprocess.run(
        ["sacct", "-n", "-P", "-X", "-S", since, "--name", name, "-o", "JobID"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    return set(out.split())


def tres(text: str) -> dict[str, str]:
    return dict(item.split("=", 1) for item in text.split(",") if "=" in item)


def output_of(proc) -> str:
    return proc.stdout + proc.stderr


# ----------------------------------------------------------------------------- a tiny matrix


def tiny_cluster_config() -> dict:
    """image_cnn on cpu and cuda (the test node's GPU is a stand-in: the cuda cell
    is scheduled with --gpus=1 and records `unavailable`), matmul on cpu with one
    cell crashing on purpose (SIGABRT)."""
    config = tiny_config(
        devices=["cpu", "cuda"],
        launcher={"allow_fault_injection": True, "max_attempts": 1, "progress": "never"},
        fault_injection=[
            {"workload": "matmul", "device": "cpu", "batch_size": 1, "fault": "sigabrt"}
        ],
    )
    config["workloads"]["matmul"].update(devices=["cpu"], batch_sizes=[1, 2])
    return config


CELLS = {
    "image_cnn/cpu/bs32/rep0": "ok",
    "image_cnn/cuda/bs32/rep0": "unavailable",
    "matmul/cpu/bs1/rep0": "failed",
    "matmul/cpu/bs2/rep0": "ok",
}


@pytest.fixture(scope="module")
def cluster_run(slurm, tmp_path_factory):
    since = (dt.datetime.now() - dt.timedelta(minutes=5)).strftime("%Y-%m-%dT%H:%M:%S")
    workflow = cluster_workflow(tmp_path_factory.mktemp("cluster") / "wf", tiny_cluster_config())
    t0 = time.monotonic()
    proc = run_readme_command(workflow)
    seconds = time.monotonic() - t0
    assert proc.returncode == 0, output_of(proc)[-8000:]
    records = {
        cell: read_record(workflow / "results" / "runs" / cell / "metrics.json") for cell in CELLS
    }
    return {"workflow": workflow, "proc": proc, "records": records, "since": since, "s": seconds}


def test_readme_command_is_the_one_run_here():
    assert (
        readme_cluster_command() == "snakemake --workflow-profile profiles/slurm results/report.md"
    )


def test_every_cell_ran_as_a_slurm_job(cluster_run):
    records = cluster_run["records"]
    job_ids = {}
    for cell, record in records.items():
        assert record["status"] == CELLS[cell], (cell, record.get("error"), record.get("reason"))
        env = record["environment"]
        assert env["slurm_job_id"], f"{cell} did not run in a Slurm job"
        assert env["slurm_node"] == env["host"]
        assert env["cpu_model"] and env["logical_cores"]
        assert "gpu_models" in env
        assert env["slurm_partition"] == PARTITION
        job_ids[cell] = env["slurm_job_id"]
    assert len(set(job_ids.values())) == len(CELLS), "two cells shared one Slurm job"

    jobs = sacct(job_ids.values(), cluster_run["since"])
    assert set(jobs) == set(job_ids.values())
    # Every cell's job succeeded, the crashed one included (its crash is its record).
    assert {j["State"] for j in jobs.values()} == {"COMPLETED"}
    # Only cells, the data set and the float64 references (parity's yardstick, one per
    # repeat of a training workload with a second device; rule run_reference) were
    # Slurm jobs; tables, figures and reports were local.
    (name,) = {j["JobName"] for j in jobs.values()}
    submitted = jobs_named(name, cluster_run["since"])
    assert set(job_ids.values()) <= submitted
    references = sorted(
        (cluster_run["workflow"] / "results" / "references").glob("*/bs*/rep*/reference.json")
    )
    assert [p.parent.relative_to(p.parents[3]).as_posix() for p in references] == [
        "image_cnn/bs32/rep0"
    ]
    assert len(submitted) == len(CELLS) + 1 + len(references)  # + prepare_data for image_cnn

    # runs.csv names each record's job.
    with open(cluster_run["workflow"] / "results" / "tables" / "runs.csv", newline="") as fh:
        rows = {f"{r['workload']}/{r['device']}/bs{r['batch_size']}/rep{r['rep']}": r for r in csv.DictReader(fh)}  # fmt: skip
    assert {cell: rows[cell]["slurm_job_id"] for cell in CELLS} == job_ids


def test_gpu_cells_ask_for_a_gpu_and_timed_cells_get_a_node_each(cluster_run):
    records = cluster_run["records"]
    ids = {cell: r["environment"]["slurm_job_id"] for cell, r in records.items()}
    jobs = sacct(ids.values(), cluster_run["since"])
    node_cpus = os.cpu_count()
    for cell, job_id in ids.items():
        requested = tres(jobs[job_id]["ReqTRES"])
        allocated = tres(jobs[job_id]["AllocTRES"])
        if "/cuda/" in cell:
            assert requested.get("gres/gpu") == "1", (cell, requested)
        else:
            assert "gres/gpu" not in requested, (cell, requested)
        # launcher.exclusive_timing (the default): --exclusive, the whole node.
        assert int(allocated["cpu"]) == node_cpus, (cell, allocated)
    spans = sorted(
        (dt.datetime.fromisoformat(j["Start"]), dt.datetime.fromisoformat(j["End"]), i)
        for i, j in jobs.items()
    )
    for (_, end_a, a), (start_b, _, b) in zip(spans, spans[1:], strict=False):
        assert start_b >= end_a, f"Slurm jobs {a} and {b} ran at the same time"


def test_a_cell_that_fails_on_the_cluster_is_a_failed_record(cluster_run):
    crashed = cluster_run["records"]["matmul/cpu/bs1/rep0"]
    assert crashed["status"] == "failed"
    assert crashed["error"]["class"] == "signal"
    assert crashed["attempts"][0]["signal"] == "SIGABRT"
    assert crashed["environment"]["slurm_job_id"]


def test_the_report_is_built_from_the_cluster_records(cluster_run):
    workflow = cluster_run["workflow"]
    report = (workflow / TARGET).read_text()
    counts = re.search(r"^4 run records: (.*)\.$", report, re.M)
    assert counts, report[:600]
    assert sorted(counts[1].split(", ")) == ["1 failed", "1 unavailable", "2 ok"]
    assert (workflow / "results" / "reports" / "image_cnn.md").exists()
    with open(workflow / "results" / "tables" / "environments.csv", newline="") as fh:
        environments = list(csv.DictReader(fh))
    # One row per machine and device, listing the Slurm jobs that ran there.
    assert environments and all(row["slurm_job_ids"] for row in environments)
    print(f"cluster matrix: {cluster_run['s']:.0f} s")


# ----------------------------------------------------------------------------- interruption


def slow_cluster_config() -> dict:
    """Three cpu cells of several seconds each: with --exclusive one runs, two wait."""
    config = tiny_config(devices=["cpu"], repeats=3)
    config["workloads"] = {
        "matmul": {"batch_sizes": [1], "sizes": [128, 256, 512], "min_run_time_s": 1.0}
    }
    return config


def our_queue(workflow: Path) -> dict[str, str]:
    """Slurm job id -> state of the jobs queued or running from ``workflow``."""
    out = subprocess.run(
        ["squeue", "-h", "-o", "%i|%T|%Z"], capture_output=True, text=True, check=True
    ).stdout
    jobs = {}
    for line in out.splitlines():
        job_id, state, workdir = line.split("|", 2)
        if Path(workdir).resolve() == workflow.resolve():
            jobs[job_id] = state
    return jobs


def test_interrupting_snakemake_cancels_its_slurm_jobs_and_a_rerun_finishes(slurm, tmp_path):
    since = (dt.datetime.now() - dt.timedelta(minutes=5)).strftime("%Y-%m-%dT%H:%M:%S")
    workflow = cluster_workflow(tmp_path / "wf", slow_cluster_config())
    args = shlex.split(readme_cluster_command())
    env = dict(os.environ, PYTHONPATH=str(workflow / "scripts"))
    proc = subprocess.Popen(
        [sys.executable, "-m", "snakemake", *args[1:]],
        cwd=workflow, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            queue = our_queue(workflow)
            if "RUNNING" in queue.values() and "PENDING" in queue.values():
                break
            assert proc.poll() is None, "snakemake ended before it could be interrupted"
            time.sleep(0.5)
        else:
            pytest.fail(f"never one cell running and one queued: {our_queue(workflow)}")
        submitted = set(our_queue(workflow))
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()

    # No orphans: nothing of ours left in the queue, no cell process left running.
    deadline = time.monotonic() + 30
    while our_queue(workflow) and time.monotonic() < deadline:
        time.sleep(1)
    assert not our_queue(workflow), f"jobs left in squeue: {our_queue(workflow)}"
    states = {j["State"].split()[0] for j in sacct(submitted, since).values()}
    assert "CANCELLED" in states, states
    time.sleep(2)
    assert not cells_here(workflow)
    before = {
        p: (p.read_bytes(), p.stat().st_mtime_ns)
        for p in (workflow / "results" / "runs").rglob("metrics.json")
    }

    # The same command again: finished records stay, cut-off cells rerun (rerun-incomplete).
    again = run_readme_command(workflow)
    assert again.returncode == 0, output_of(again)[-6000:]
    after = sorted((workflow / "results" / "runs").rglob("metrics.json"))
    assert len(after) == 3
    for path, (content, mtime) in before.items():
        assert (path.read_bytes(), path.stat().st_mtime_ns) == (content, mtime), f"{path} rerun"
    for path in after:
        record = read_record(path)
        assert record["status"] == "ok", record.get("error")
        assert record["environment"]["slurm_job_id"]
    assert (workflow / TARGET).exists()
