"""The launcher with real child processes: real exceptions, real signals, a real hang.

Each test builds a cell spec from a validated tiny config, runs
``trainbench.launch.launcher.run_cell`` (which starts ``python -m trainbench.launch.child``),
and checks the record it wrote. Faults that fire at the start of a workload run
on the matmul cell (no data, no training); the two faults that live in the
training loop (nan_loss, silent_corruption) run on the tiny image_cnn cell.
"""

from __future__ import annotations

import copy
import json

import pytest
from helpers import FAULTS_ENV, backend_available, tiny_config
from trainbench import config as tbconfig
from trainbench.common.records import read_record
from trainbench.launch.launcher import run_cell
from trainbench.workloads import image_cnn

MATMUL_CPU = tbconfig.Cell("matmul", "cpu", 1, 0)
CNN_CPU = tbconfig.Cell("image_cnn", "cpu", 32, 0)
WARMUP_STEPS = 1
STEPS_PER_EPOCH = 128 // 32  # n_train // batch size (the last partial batch is dropped)


@pytest.fixture(autouse=True)
def _no_fault_env(monkeypatch):
    """Faults are switched on by the config only, never by a leftover variable."""
    monkeypatch.delenv(FAULTS_ENV, raising=False)


@pytest.fixture(scope="module")
def cnn_data(tmp_path_factory) -> str:
    """The tiny image_cnn data set, prepared once for the module."""
    config = tbconfig.validate_config(tiny_config())
    out = tmp_path_factory.mktemp("data") / "image_cnn"
    meta = image_cnn.prepare_data(config["workloads"]["image_cnn"], out, config["seed"])
    assert meta["n_train"] == 128 and meta["n_test"] == 64
    assert meta["shape"] == [3, 16, 16]
    return str(out)


def with_faults(config: dict, *faults: dict) -> dict:
    config = copy.deepcopy(config)
    config["launcher"]["allow_fault_injection"] = True
    config["fault_injection"] = list(faults)
    return config


def make_spec(config: dict, cell: tbconfig.Cell, data_path: str | None = None) -> dict:
    config = tbconfig.validate_config(copy.deepcopy(config))
    return tbconfig.cell_spec(config, cell, data_path=data_path)


def launch(tmp_path, spec: dict) -> tuple[dict, str]:
    """Run the cell; return (the record as read back from disk, the cell log)."""
    out = tmp_path / "metrics.json"
    log = tmp_path / "cell.log"
    returned = run_cell(spec, out, log)
    record = read_record(out)  # validates against the record schema
    assert record == json.loads(json.dumps(returned)), "the returned record is the written one"
    assert record["cell"] == spec["cell"]
    assert len(record["attempts"]) >= 1
    assert record["attempts"][-1]["status"] == record["status"]
    return record, log.read_text()


def data_for(cell: tbconfig.Cell, cnn_data: str) -> str | None:
    return cnn_data if cell.workload == "image_cnn" else None


# ----------------------------------------------------------------------------- faults

# fault -> (cell, expected error class, exception type in the record, signal name)
FAULT_CASES = {
    "exception": (MATMUL_CPU, "unknown", "InjectedFault", None),
    "sigabrt": (MATMUL_CPU, "signal", None, "SIGABRT"),
    "segfault": (MATMUL_CPU, "signal", None, "SIGSEGV"),
    "sigkill": (MATMUL_CPU, "signal", None, "SIGKILL"),
    "cuda_oom": (MATMUL_CPU, "oom", "OutOfMemoryError", None),
    "mps_oom": (MATMUL_CPU, "oom", "RuntimeError", None),
    "mps_unsupported_op": (MATMUL_CPU, "unsupported_op", "NotImplementedError", None),
    "mps_placeholder": (MATMUL_CPU, "placement", "RuntimeError", None),
    "nan_loss": (CNN_CPU, "nan_loss", "NonFiniteLossError", None),
}


# Both ways a child starts (trainbench.launch.fork_server): each attempt its own process.
START_METHODS = ["spawn", "fork_server"]


def started(method: str, **overrides) -> dict:
    config = tiny_config(**overrides)
    config["launcher"]["start_method"] = method
    return config


@pytest.mark.slow
@pytest.mark.parametrize("start", START_METHODS)
@pytest.mark.parametrize("fault", list(FAULT_CASES))
def test_fault_is_recorded_as_classified_failure(tmp_path, cnn_data, fault, start):
    cell, error_class, exception, signal = FAULT_CASES[fault]
    config = with_faults(
        started(start), {"workload": cell.workload, "device": cell.device, "fault": fault}
    )
    spec = make_spec(config, cell, data_for(cell, cnn_data))
    assert spec["faults"] == [{"workload": cell.workload, "device": cell.device, "fault": fault}]

    record, log = launch(tmp_path, spec)

    assert record["status"] == "failed"
    assert record["spec"]["faults_allowed"] is True
    assert len(record["attempts"]) == 1  # max_attempts 1
    error = record["error"]
    assert error["class"] == error_class, error
    assert error["exception"] == exception
    attempt = record["attempts"][0]
    assert attempt["status"] == "failed"
    assert attempt["error"]["class"] == error_class
    assert attempt["timed_out"] is False
    assert attempt["signal"] == signal
    assert attempt["start"]["method"] == start
    if signal is not None:
        # A native death: no Python exception, the message names the signal.
        assert attempt["returncode"] < 0
        assert signal in error["message"]
    else:
        # A Python exception: the child reported it and exited with 1.
        assert attempt["returncode"] == 1
        assert error["message"].startswith(f"{exception}: ")
        assert error["traceback"] and exception in error["traceback"]
        # The traceback stays in the final error but not in the per-attempt copy.
        assert "traceback" not in attempt["error"]
    assert "record status: failed" in log
    assert record["result"] is None
    # The environment is recorded even when the child died.
    assert record["environment"]["host"]
    assert record["environment"]["config_hash"] == spec["config_hash"]


@pytest.mark.slow
def test_fault_messages_and_hints(tmp_path):
    """The MPS OOM gets its hint; the stderr tail of an abort holds the fault's own line."""
    config = with_faults(tiny_config(), {"workload": "matmul", "device": "cpu", "fault": "mps_oom"})
    record, _ = launch(tmp_path / "oom", make_spec(config, MATMUL_CPU))
    assert "MPS backend out of memory" in record["error"]["message"]
    assert "high_watermark_ratio" in (record["error"]["hint"] or "")

    config = with_faults(tiny_config(), {"workload": "matmul", "device": "cpu", "fault": "sigabrt"})
    record, log = launch(tmp_path / "abort", make_spec(config, MATMUL_CPU))
    assert "injected fault: abort()" in record["error"]["stderr_tail"]
    assert "injected fault: abort()" in log
    assert "exit -6" in log


@pytest.mark.slow
def test_silent_corruption_fails_a_finished_run(tmp_path, cnn_data):
    config = with_faults(
        tiny_config(), {"workload": "image_cnn", "device": "cpu", "fault": "silent_corruption"}
    )
    record, log = launch(tmp_path, make_spec(config, CNN_CPU, cnn_data))

    assert record["status"] == "failed"
    error = record["error"]
    assert error["class"] == "accelerator_error"
    assert error["silent"] is True
    assert error["exception"] is None
    assert "command buffer exited with error status" in error["message"]
    attempt = record["attempts"][0]
    assert attempt["returncode"] == 0  # the child finished normally...
    assert record["result"]["kind"] == "training"  # ...and its numbers are kept, flagged
    assert "command buffer exited with error status" in log


@pytest.mark.slow
@pytest.mark.parametrize("start", START_METHODS)
def test_hang_is_killed_at_the_workload_timeout(tmp_path, start):
    config = with_faults(started(start), {"workload": "matmul", "device": "cpu", "fault": "hang"})
    config["launcher"]["timeout_s"] = 120
    config["workloads"]["matmul"]["timeout_s"] = 8  # the workload's timeout wins
    spec = make_spec(config, MATMUL_CPU)
    assert spec["launcher"]["timeout_s"] == 8

    record, log = launch(tmp_path, spec)

    assert record["status"] == "failed"
    assert record["error"]["class"] == "timeout"
    assert "8 s timeout" in record["error"]["message"]
    attempt = record["attempts"][0]
    assert attempt["timed_out"] is True
    # The timeout counts from the child's start (not a fork server's start-up).
    assert 8 <= attempt["duration_s"] - attempt["start"]["wait_s"] < 8 + 10
    # SIGTERM reaches the child first; faulthandler dumps where it hung.
    assert "faults.py" in record["error"]["stderr_tail"]
    assert "(timed out)" in log
    # The wall-time breakdown names the phase the hang interrupted; the rest adds up.
    wall = record["wall_time"]
    assert wall["interrupted"] == "training_loop"
    assert wall["attempt_seconds"] == attempt["duration_s"]
    assert wall["phases"]["unattributed"] >= 8 - wall["marks"]["loop_start"]
    assert sum(wall["phases"].values()) == pytest.approx(wall["attempt_seconds"])


# ----------------------------------------------------------------------------- retries


@pytest.mark.slow
def test_retry_after_a_flaky_signal_succeeds(tmp_path):
    config = with_faults(
        tiny_config(),
        {"workload": "matmul", "device": "cpu", "fault": "sigabrt", "attempts": [1]},
    )
    config["launcher"].update(max_attempts=2, retry_on=["signal", "timeout"])
    record, log = launch(tmp_path, make_spec(config, MATMUL_CPU))

    assert record["status"] == "ok"
    assert [a["status"] for a in record["attempts"]] == ["failed", "ok"]
    first, second = record["attempts"]
    assert first["attempt"] == 1 and second["attempt"] == 2
    assert first["signal"] == "SIGABRT"
    assert first["error"]["class"] == "signal"
    assert "error" not in second
    assert record["error"] is None
    assert record["result"]["kind"] == "microbenchmark"
    assert "attempt 1 failed (signal); retrying" in log


@pytest.mark.slow
def test_every_attempt_is_recorded_when_all_fail(tmp_path):
    config = with_faults(tiny_config(), {"workload": "matmul", "device": "cpu", "fault": "sigkill"})
    config["launcher"].update(max_attempts=2, retry_on=["signal"])
    record, _ = launch(tmp_path, make_spec(config, MATMUL_CPU))

    assert record["status"] == "failed"
    assert [a["status"] for a in record["attempts"]] == ["failed", "failed"]
    assert [a["signal"] for a in record["attempts"]] == ["SIGKILL", "SIGKILL"]
    assert record["error"]["class"] == "signal"


@pytest.mark.slow
def test_class_not_in_retry_on_is_not_retried(tmp_path):
    config = with_faults(
        tiny_config(), {"workload": "matmul", "device": "cpu", "fault": "cuda_oom"}
    )
    config["launcher"].update(max_attempts=3, retry_on=["signal", "timeout"])
    record, log = launch(tmp_path, make_spec(config, MATMUL_CPU))

    assert record["status"] == "failed"
    assert len(record["attempts"]) == 1
    assert record["error"]["class"] == "oom"
    assert "not retrying: class oom is not in launcher.retry_on" in log


# ----------------------------------------------------------------------------- fault gate


@pytest.mark.slow
@pytest.mark.parametrize("env_allows", [False, True])
def test_faults_need_the_config_switch_or_the_test_variable(tmp_path, monkeypatch, env_allows):
    """A spec carrying faults without the switch runs normally; the test variable alone enables them."""
    spec = make_spec(tiny_config(), MATMUL_CPU)
    assert spec["launcher"]["allow_fault_injection"] is False
    spec["faults"] = [{"workload": "matmul", "device": "cpu", "fault": "exception"}]
    if env_allows:
        monkeypatch.setenv(FAULTS_ENV, "1")

    record, _ = launch(tmp_path, spec)

    assert record["spec"]["faults_allowed"] is env_allows
    if env_allows:
        assert record["status"] == "failed"
        assert record["error"]["exception"] == "InjectedFault"
    else:
        assert record["status"] == "ok"


# ----------------------------------------------------------------------------- normal runs


@pytest.mark.slow
@pytest.mark.parametrize("start", START_METHODS)
def test_ok_training_record(tmp_path, cnn_data, start):
    spec = make_spec(started(start), CNN_CPU, cnn_data)
    record, log = launch(tmp_path, spec)
    assert record["attempts"][0]["start"]["method"] == start

    assert record["status"] == "ok", record.get("error")
    assert record["error"] is None and record["reason"] is None
    assert record["backend"] == "cpu" and record["device_label"] == "cpu"
    assert [a["status"] for a in record["attempts"]] == ["ok"]
    assert record["attempts"][0]["returncode"] == 0
    assert record["spec"]["faults_allowed"] is False

    result = record["result"]
    assert result["kind"] == "training"
    # Warm-up is excluded from the timed region and reported apart. A window shorter
    # than timing.min_timed_seconds (a fast, quiet machine) is extended by timed steps
    # after the last epoch: they count in the window, and are reported as such.
    # At least the configured warm-up: over a long extension the steady-state search may
    # find a longer one on a busy machine.
    warm = result["warmup"]["steps"]
    assert warm >= WARMUP_STEPS and result["warmup"]["configured_steps"] == WARMUP_STEPS
    assert result["warmup"]["samples"] == warm * 32
    extended = result["extension"]["steps"]
    assert result["timed"]["steps"] == STEPS_PER_EPOCH - warm + extended
    assert result["timed"]["samples"] == (STEPS_PER_EPOCH - warm + extended) * 32
    assert result["timed"]["seconds"] > 0
    assert result["timed"]["samples_per_s"] > 0
    assert result["timed"]["samples_per_s_all_steps"] == pytest.approx(
        result["timed"]["samples"] / result["timed"]["seconds"]
    )
    # A stall is judged alone: the largest one above max_stall_share is left out of
    # samples_per_s (several small ones together may exceed the share and stay in).
    stalls = result["timed"]["stalls"]
    assert stalls["excluded"] == (stalls["largest_share"] > stalls["max_share"])
    if not stalls["excluded"]:
        assert result["timed"]["samples_per_s"] == result["timed"]["samples_per_s_all_steps"]
    assert result["settings"]["warmup_steps"] == WARMUP_STEPS
    assert result["settings"]["steps_per_epoch"] == STEPS_PER_EPOCH
    assert len(result["epochs"]) == 1
    assert result["epochs"][0]["eval_samples"] == 64
    assert 0.0 <= result["task"]["final"] <= 1.0
    assert result["verification"]["all_on_device"] is True
    # The diagnostic pass after the timed window: its own wall-time phase.
    breakdown = result["step_breakdown"]
    assert breakdown["steps"] >= 1 and breakdown["seconds"] > 0 and breakdown["step_s"] > 0
    assert record["wall_time"]["phases"]["step_breakdown"] == pytest.approx(breakdown["seconds"])

    settings = record["settings_in_force"]
    assert isinstance(settings["torch_threads"], int) and settings["torch_threads"] >= 1
    assert settings["amp"]["enabled"] is False
    environment = record["environment"]
    assert environment["config_hash"] == spec["config_hash"]
    assert environment["run_seed"] == spec["run_seed"]
    assert environment["torch_version"]
    assert environment["env_overrides"] == {}
    assert "record status: ok" in log


@pytest.mark.slow
def test_device_env_reaches_the_child(tmp_path, monkeypatch):
    """device_settings.cpu.env is set in the child only, wins over ours, and is recorded."""
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    config = tiny_config()
    config["device_settings"]["cpu"]["env"] = {"OMP_NUM_THREADS": "1"}
    record, _ = launch(tmp_path, make_spec(config, MATMUL_CPU))

    assert record["status"] == "ok", record.get("error")
    assert record["environment"]["env_overrides"] == {"OMP_NUM_THREADS": "1"}
    assert record["settings_in_force"]["torch_threads"] == 1
    assert record["result"]["settings"]["torch_threads"] == 1
    assert [row["n"] for row in record["result"]["sizes"]] == [16, 32]
    assert all(row["gflops"] > 0 for row in record["result"]["sizes"])


@pytest.mark.slow
@pytest.mark.skipif(backend_available("cuda"), reason="a CUDA device is visible here")
def test_cuda_cell_is_unavailable_with_a_reason(tmp_path):
    record, _ = launch(tmp_path, make_spec(tiny_config(), tbconfig.Cell("matmul", "cuda", 1, 0)))

    assert record["status"] == "unavailable"
    assert record["backend"] == "cuda"
    assert isinstance(record["reason"], str) and "cuda" in record["reason"].lower()
    assert record["result"] is None and record["error"] is None
    assert len(record["attempts"]) == 1
    assert record["environment"]["torch_version"]


def test_the_cells_environment_is_computed_once_and_handed_on(tmp_path, monkeypatch):
    """run_cell computes the child's environment once; the memo, every attempt (two
    here: the first fails with a retried class) and the record get that one."""
    from trainbench.launch import environment, launcher

    calls: list[dict] = []
    real = environment.child_environment

    def counted(spec: dict) -> tuple[dict, dict]:
        calls.append(spec)
        return real(spec)

    seen: list[dict] = []

    def fake_child(spec, attempt, folder, lock=None, *, environment):
        seen.append(environment.variables)
        ok = attempt == 2
        return launcher.ChildRun(
            returncode=0 if ok else -9, timed_out=False, peak_rss_bytes=None, started=0.0,
            duration=0.1, stdout="", stderr="", marks={}, start={"method": "spawn"},
            result={"status": "ok", "result": {"kind": "microbenchmark"}} if ok else None,
        )  # fmt: skip

    monkeypatch.setattr(environment, "child_environment", counted)
    monkeypatch.setattr(launcher, "run_child", fake_child)
    config = tiny_config()
    config["device_settings"]["cpu"]["env"] = {"TRAINBENCH_PROBE": "1"}
    config["launcher"].update(max_attempts=2, retry_on=["signal"])
    record, _ = launch(tmp_path, make_spec(config, MATMUL_CPU))
    assert len(calls) == 1 and len(seen) == 2
    assert all(env["TRAINBENCH_PROBE"] == "1" for env in seen)
    assert [a["status"] for a in record["attempts"]] == ["failed", "ok"]
    assert record["environment"]["env_overrides"] == {"TRAINBENCH_PROBE": "1"}
