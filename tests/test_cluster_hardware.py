"""Records from a cluster stay comparable: each names its node, hardware and Slurm
job, and the tables group by the hardware actually used (identical nodes pool,
different node types are never averaged together). No Slurm needed here."""

from __future__ import annotations

import os
import stat

import pytest
import yaml
from helpers import REPO
from trainbench.analysis import aggregate, hardware
from trainbench.analysis.stats import speedup_table
from trainbench.analysis.stats.frames import choose_baselines, prepare_runs
from trainbench.common.records import write_record
from trainbench.launch import environment

XEON = "Intel(R) Xeon(R) Platinum 8480+ @ 2.00GHz"
EPYC = "AMD EPYC 7763 64-Core Processor"
H100 = "NVIDIA H100 80GB HBM3"
A100 = "NVIDIA A100-SXM4-40GB"


def record(device="cpu", host="node01", cpu=XEON, cores=112, gpu=None, rate=100.0, rep=0,
           status="ok", workload="image_cnn", gpu_models=None, job="1"):  # fmt: skip
    env = {"host": host, "cpu_model": cpu, "logical_cores": cores, "slurm_job_id": job,
           "slurm_node": host, "torch_version": "2.13.0", "gpu_models": gpu_models}  # fmt: skip
    if gpu is not None:
        env["device"] = {"backend": "cuda", "name": gpu}
    base = {
        "schema_version": 2,
        "status": status,
        "cell": {"workload": workload, "device": device, "batch_size": 32, "rep": rep},
        "backend": device.split("-")[0],
        "attempts": [{"attempt": 1, "status": status}],
        "environment": env,
        "spec": {},
    }
    if status == "ok":
        base["result"] = {
            "kind": "training",
            "timed": {"samples": rate * 10, "seconds": 10.0, "samples_per_s": rate},
            "epochs": [],
            "task": {"primary_metric": "accuracy", "final": 0.9},
        }
    else:
        base["error"] = {"class": "signal"}
    return base


def tables(tmp_path, *recs):
    paths = []
    for i, rec in enumerate(recs):
        path = tmp_path / f"r{i}" / "metrics.json"
        write_record(path, rec)
        paths.append(str(path))
    records, _ = aggregate.load_records(paths)
    return aggregate.build_tables(records)


def medians(runs, baseline="cpu"):
    runs = prepare_runs(runs)
    summary = speedup_table(runs, choose_baselines(runs, {}, baseline))
    return dict(zip(summary["device"], summary["median"], strict=True))


def test_two_nodes_of_one_type_pool(tmp_path):
    runs = tables(
        tmp_path,
        record(host="node01", rate=100.0, job="11"),
        record(host="node02", rate=110.0, rep=1, job="12"),
        record("cuda", host="node01", gpu=H100, rate=900.0, job="13"),
        record("cuda", host="node02", gpu=H100, rate=1000.0, rep=1, job="14"),
    )["runs"]
    assert set(runs["device"]) == {"cpu", "cuda"}
    assert medians(runs) == {"cpu": 105.0, "cuda": 950.0}
    assert set(runs["hardware"]) == {"Intel Xeon Platinum 8480+", H100}
    assert set(runs["slurm_job_id"].astype(str)) == {"11", "12", "13", "14"}


def test_different_gpu_node_types_are_never_averaged_together(tmp_path):
    runs = tables(
        tmp_path,
        record(host="cpu01", rate=100.0),
        record(host="cpu02", rate=100.0, rep=1),
        record("cuda", host="gpu-h100-01", gpu=H100, rate=1000.0),
        record("cuda", host="gpu-a100-07", gpu=A100, rate=600.0, rep=1),
    )["runs"]
    # cpu cells ran on one CPU type: one group; cuda on two GPU types: two groups.
    assert medians(runs, "cpu@Intel Xeon Platinum 8480+") == {
        "cpu@Intel Xeon Platinum 8480+": 100.0,
        f"cuda@{H100}": 1000.0,
        f"cuda@{A100}": 600.0,
    }


def test_same_gpu_on_different_cpus_is_split_by_cpu(tmp_path):
    runs = tables(
        tmp_path,
        record("cuda", host="a", cpu=XEON, gpu=H100, rate=1000.0),
        record("cuda", host="b", cpu=EPYC, cores=256, gpu=H100, rate=800.0),
    )["runs"]
    assert set(runs["device"]) == {
        f"cuda@{H100}, Intel Xeon Platinum 8480+",
        f"cuda@{H100}, AMD EPYC 7763 64-Core",
    }


def test_same_cpu_model_with_other_core_counts_is_split_by_cores(tmp_path):
    runs = tables(
        tmp_path,
        record(host="small", cores=56, rate=60.0),
        record(host="big", cores=112, rate=100.0),
    )["runs"]
    assert set(runs["device"]) == {
        "cpu@Intel Xeon Platinum 8480+, 56 cores",
        "cpu@Intel Xeon Platinum 8480+, 112 cores",
    }


def test_a_crashed_gpu_cell_keeps_its_node_type(tmp_path):
    """A CUDA cell that died before naming its GPU takes the node's GPU model from
    nvidia-smi (or from its host's other CUDA records): no spurious split."""
    runs = tables(
        tmp_path,
        record("cuda", host="n1", gpu=H100, rate=1000.0),
        record("cuda", host="n1", status="failed", rep=1, gpu_models=[H100]),
        record("cuda", host="n2", gpu=H100, rate=1000.0, rep=2),
        record("cuda", host="n2", status="failed", rep=3),  # nvidia-smi gave no answer
    )["runs"]
    assert set(runs["device"]) == {"cuda"}
    assert set(runs["hardware"]) == {H100}


def test_a_cuda_cell_on_a_node_without_gpu_is_its_own_group(tmp_path):
    runs = tables(
        tmp_path,
        record("cuda", host="gpu01", gpu=H100, rate=1000.0),
        record("cuda", host="cpu01", status="failed", rep=1, gpu_models=[]),
        record("cuda", host="cpu02", status="failed", rep=2),
    )["runs"]
    assert set(runs["device"]) == {f"cuda@{H100}", "cuda@no GPU", "cuda@GPU unknown"}


def test_records_without_a_cpu_model_fall_back_to_the_host(tmp_path):
    runs = tables(
        tmp_path,
        record(host="linux-box", cpu=None, rate=100.0),
        record(host="mac-mini", cpu=None, rate=50.0),
    )["runs"]
    assert set(runs["device"]) == {"cpu@linux-box", "cpu@mac-mini"}


def test_every_table_carries_the_hardware_and_environments_list_the_jobs(tmp_path):
    result = tables(
        tmp_path,
        record(host="node01", job="21"),
        record(host="node02", rep=1, job="22"),
        record("cuda", host="node01", gpu=H100, job="23"),
        record("cuda", host="gpu-a100", gpu=A100, rep=1, job="24"),
    )
    env = result["environments"]
    assert "hardware" in env.columns and "hardware" in result["runs"].columns
    cpu_rows = env[env["device"].str.startswith("cpu")]
    # One row per host and device (not per record); each lists its Slurm jobs.
    assert sorted(cpu_rows["host"]) == ["node01", "node02"]
    assert sorted(env["slurm_job_ids"].astype(str)) == ["21", "22", "23", "24"]
    assert set(env["device"]) == {
        "cpu@Intel Xeon Platinum 8480+",
        f"cuda@{H100}",
        f"cuda@{A100}",
    }


@pytest.mark.parametrize(
    "name, short",
    [
        (XEON, "Intel Xeon Platinum 8480+"),
        (EPYC, "AMD EPYC 7763 64-Core"),
        ("Intel(R) Core(TM) i7-9750H CPU @ 2.60GHz", "Intel Core i7-9750H"),
        ("Apple M2 Pro", "Apple M2 Pro"),
    ],
)
def test_short_cpu_names(name, short):
    assert hardware.short_cpu_name(name) == short


def test_host_facts_name_the_node_its_gpus_and_the_slurm_job(tmp_path, monkeypatch):
    fake = tmp_path / "nvidia-smi"
    fake.write_text(f"#!/bin/sh\necho '{H100}'\necho '{H100}'\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    monkeypatch.setenv("SLURMD_NODENAME", "gpu07")
    monkeypatch.setenv("SLURM_JOB_PARTITION", "gpu")
    facts = environment.host_facts()
    assert facts["gpu_models"] == [H100, H100]
    assert (facts["slurm_job_id"], facts["slurm_node"], facts["slurm_partition"]) == (
        "4242",
        "gpu07",
        "gpu",
    )
    assert facts["host"] and facts["cpu_model"] and facts["logical_cores"]


def test_without_nvidia_smi_the_gpus_are_unknown(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert environment.gpu_models() is None


def test_slurm_profile_marks_what_the_user_fills_in():
    profile = yaml.safe_load((REPO / "profiles" / "slurm" / "config.yaml").read_text())
    assert profile["executor"] == "slurm"
    defaults = profile["default-resources"]
    assert defaults["slurm_partition"] == "FILL_IN_PARTITION"
    assert defaults["slurm_account"] == "FILL_IN_ACCOUNT"
    assert {"runtime", "mem_mb", "cpus_per_task"} <= set(defaults)
    # No GPU by default (only CUDA cells ask for one, in rules/run.smk), and none of
    # the default profile's local caps, which would serialise the cluster.
    assert not {"gpu", "gpu_model", "slurm_extra"} & set(defaults)
    assert "resources" not in profile
    assert profile["rerun-incomplete"] is True


def test_a_crashed_mps_cell_on_one_mac_keeps_plain_names(tmp_path):
    """MPS's hardware is the Apple chip (the CPU model): a crash that left no device
    facts does not split the MPS column."""
    mac = {"host": "mac", "cpu": "Apple M2 Pro", "cores": 12}
    runs = tables(
        tmp_path,
        record(**mac, rate=50.0),
        record("mps", **mac, rate=300.0),
        record("mps", **mac, status="failed", rep=1),
    )["runs"]
    assert set(runs["device"]) == {"cpu", "mps"}
