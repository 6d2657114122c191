"""The pre-imported fork server (trainbench.launch.fork_server): what decides which server a
cell's child comes from, and that a server lives only as long as its owner. Crash
isolation on the fork path: tests/test_launcher.py runs every fault on both paths."""

from __future__ import annotations

import os
import subprocess
import sys

import psutil
import pytest
from trainbench.launch import fork_client, fork_server
from trainbench.launch.environment import child_environment
from trainbench.launch.launcher import preload_modules, start_method


def test_a_per_attempt_variable_shares_the_server_and_any_other_does_not():
    env = {"PATH": "/usr/bin", "TRAINBENCH_WATCHDOG_FD": "5", "PYTEST_CURRENT_TEST": "a"}
    same = env | {"TRAINBENCH_WATCHDOG_FD": "9", "PYTEST_CURRENT_TEST": "b"}
    assert fork_client.server_key(env) == fork_client.server_key(same)
    for other in ({"OMP_NUM_THREADS": "2"}, {"CUBLAS_WORKSPACE_CONFIG": ":4096:8"}):
        assert fork_client.server_key(env) != fork_client.server_key(env | other)


def test_auto_forks_only_under_a_local_snakemake_run_on_linux(monkeypatch):
    spec = {"launcher": {"start_method": "auto"}}
    monkeypatch.setattr("trainbench.launch.launcher._snakemake_run", lambda: None)
    assert start_method(spec)[0] == "spawn"
    run = {"pid": os.getpid(), "started": psutil.Process().create_time()}
    monkeypatch.setattr("trainbench.launch.launcher._snakemake_run", lambda: run)
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    expected = "fork_server" if sys.platform.startswith("linux") else "spawn"
    assert start_method(spec)[:2] == (expected, run if expected == "fork_server" else None)
    monkeypatch.setenv("SLURM_JOB_ID", "7")
    assert start_method(spec)[0] == "spawn"
    monkeypatch.setattr("trainbench.launch.launcher.sys.platform", "darwin")
    assert start_method({"launcher": {"start_method": "fork_server"}})[0] == "spawn"
    assert start_method({"launcher": {"start_method": "spawn"}})[0] == "spawn"


def test_the_server_preloads_the_cell_workload_read_from_its_spec():
    """A cell's spec names its workload under ``cell`` (rules/common.smk's run_spec):
    the server imports a bundled workload's modules before forking it (text: its
    model and transformers, once per run instead of in every cell's set-up)."""
    cell = {"workload": "text_multilabel", "device": "cpu", "batch_size": 8, "rep": 0}
    assert preload_modules({"cell": cell}) == ["trainbench.workloads.text_multilabel"]
    assert fork_server.WORKLOAD_EXTRAS["trainbench.workloads.text_multilabel"]
    own = {"cell": cell | {"workload": "mine"}}
    assert preload_modules(own) == []
    assert preload_modules({}) == []


def test_a_server_is_refused_for_an_owner_that_is_gone():
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    env, _ = child_environment({"backend": "cpu", "device_settings": {}})
    with pytest.raises(fork_client.ForkServerUnavailable, match="not alive"):
        fork_client.ensure_server(env, {"pid": gone.pid, "started": None})


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the fork server is Linux-only")
def test_the_server_stops_with_its_owner_and_a_stale_socket_is_replaced():
    owner_proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    owner = {"pid": owner_proc.pid, "started": psutil.Process(owner_proc.pid).create_time()}
    env, _ = child_environment({"backend": "cpu", "device_settings": {}})
    try:
        path = fork_client.ensure_server(env, owner)
        assert path.exists() and path == fork_client.ensure_server(env, owner)
        servers = [
            p for p in psutil.process_iter(["cmdline"]) if str(path) in (p.info["cmdline"] or [])
        ]
        assert len(servers) == 1
        owner_proc.kill()
        owner_proc.wait()
        servers[0].wait(timeout=10)  # gone within its 1 s owner check
        assert not path.exists() and not path.with_suffix(".lock").exists()
    finally:
        owner_proc.kill()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the fork server is Linux-only")
def test_a_server_whose_imports_left_cuda_unusable_in_a_fork_refuses_to_serve(monkeypatch):
    """torch marks a fork bad once the parent asked the CUDA runtime anything (a library
    calling torch.cuda.is_available() at import, on a CUDA build): the server finds out
    with one test fork and stops before serving, so every cell is spawned."""
    import torch

    fork_server.check_fork_is_clean()  # this process never asked CUDA
    monkeypatch.setattr(torch.cuda, "_is_in_bad_fork", lambda: True)
    with pytest.raises(RuntimeError, match="could not use CUDA"):
        fork_server.check_fork_is_clean()


def test_cuda_checks_use_nvml_only_while_importing(monkeypatch):
    monkeypatch.delenv(fork_server.NVML_CHECK, raising=False)
    with fork_server.nvml_based_cuda_checks():
        assert os.environ[fork_server.NVML_CHECK] == "1"
    assert fork_server.NVML_CHECK not in os.environ


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the fork server is Linux-only")
def test_a_server_that_cannot_start_is_tried_once_per_run(monkeypatch, tmp_path):
    """Its reason is kept for the run: the next launchers spawn at once with it."""
    owner = {"pid": os.getpid(), "started": psutil.Process().create_time()}
    env, _ = child_environment({"backend": "cpu", "device_settings": {}})
    broken = tmp_path / "trainbench"
    broken.mkdir()
    (broken / "__init__.py").write_text("raise ImportError('a broken install')\n")
    env = env | {"PYTHONPATH": str(tmp_path)}  # this trainbench cannot be imported: it fails
    with pytest.raises(fork_client.ForkServerUnavailable, match="exited") as first:
        fork_client.ensure_server(env, owner)
    with pytest.raises(fork_client.ForkServerUnavailable) as again:
        fork_client.ensure_server(env, owner)
    assert str(again.value) == str(first.value)
