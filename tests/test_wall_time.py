"""Where a cell's wall time goes (trainbench.measure.wall_time): the breakdown from marks and
results, a real cell through the launcher, a failed one, and the ``cell_time`` table."""

from __future__ import annotations

import copy
import math

import pandas as pd
import pytest
from helpers import FAULTS_ENV, tiny_config
from trainbench import config as tbconfig
from trainbench.analysis.aggregate import RUN_COLUMNS, run_row
from trainbench.analysis.stats.cell_time import CELL_TIME_COLUMNS, cell_time_table
from trainbench.common.records import read_record
from trainbench.launch.launcher import run_cell
from trainbench.measure import wall_time
from trainbench.measure.wall_time import MEASUREMENT, PHASES, breakdown, measured_phases
from trainbench.workloads import image_cnn

# A training result as the loop writes it: 4 epoch steps (step 0 first), 2 extension
# steps, a window from step 2, two evaluation passes.
TRAINING = {
    "kind": "training",
    "steps": {"seconds": [[0.5, 0.25, 0.125, 0.125]], "extension_seconds": [[0.125, 0.125]]},
    "warmup": {"steps": 2, "seconds": 0.75},
    "timed": {"seconds": 0.5},
    "eval": {"passes": [{"seconds": 0.25, "cold": True}, {"seconds": 0.0625, "cold": False}]},
}
OK_MARKS = {
    "child_start": 0.05,
    "imports": 2.0,
    "device_ready": 2.25,
    "canary_start": 2.25,
    "canary_end": 2.5,
    "workload_start": 2.5,
    "entry_loaded": 2.75,
    "parts_built": 3.0,
    "loop_start": 3.0,
    "analysis_start": 5.5,
    "analysis_end": 5.75,
    "loop_end": 6.0,
    "run_end": 6.0,
    "result_written": 6.25,
}


def test_an_ok_attempt_adds_up_phase_by_phase():
    wall = breakdown(OK_MARKS, 6.5, TRAINING)
    phases = wall["phases"]
    assert list(phases) == list(PHASES)
    assert math.fsum(phases.values()) == pytest.approx(6.5, abs=1e-12)
    assert phases["process_start_and_imports"] == 2.0 + 0.25  # the workload's import too
    assert phases["device_initialisation"] == 0.25
    assert phases["canary"] == 0.25
    assert phases["data_and_model_setup"] == 0.25
    # The loop (3 s): warm-up 0.75 (step 0 and step 1), window 0.25 + extension 0.25
    # (result.timed.seconds), evaluation 0.3125, analysis 0.25, the rest bookkeeping.
    assert (phases["warmup"], phases["timed_training"], phases["extension"]) == (0.75, 0.25, 0.25)
    assert phases["warmup"] == TRAINING["warmup"]["seconds"]
    assert phases["timed_training"] + phases["extension"] == TRAINING["timed"]["seconds"]
    assert phases["evaluation"] == 0.3125
    assert phases["analysis"] == 0.25
    assert phases["training_bookkeeping"] == pytest.approx(3.0 - 0.75 - 0.5 - 0.3125 - 0.25)
    assert (phases["writing"], phases["exit"], phases["unattributed"]) == (0.25, 0.25, 0.0)
    assert wall["interrupted"] is None
    assert wall["measurement_seconds"] == pytest.approx(sum(phases[p] for p in MEASUREMENT))
    assert wall["outside_measurement_seconds"] == pytest.approx(6.5 - wall["measurement_seconds"])
    assert wall["marks"]["popen"] == 0.0 and wall["marks"]["exit"] == 6.5


def test_a_warmup_reaching_into_the_extension_is_counted_once():
    result = copy.deepcopy(TRAINING)
    result["warmup"]["steps"] = 5  # every epoch step and the first extension step
    phases = measured_phases(result)
    assert phases["warmup"] == 1.125
    assert (phases["timed_training"], phases["extension"]) == (0.0, 0.125)


def test_a_microbenchmark_counts_its_warmup_and_timed_calls():
    result = {
        "kind": "microbenchmark",
        "sizes": [
            {"warmup_s": 0.01, "mean_s": 0.001, "runs": 10, "number_per_run": 5},
            {"warmup_s": 0.02, "mean_s": 0.002, "runs": 4, "number_per_run": 2},
        ],
    }
    phases = measured_phases(result)
    assert phases["warmup"] == pytest.approx(0.03)
    assert phases["timed_training"] == pytest.approx(0.05 + 0.016)


def test_a_failed_attempt_keeps_the_phases_it_finished():
    """An exception in the training loop: its phases so far, writing and exit; the
    loop's time is unattributed and named."""
    marks = {k: v for k, v in OK_MARKS.items() if not k.startswith(("analysis", "loop_end"))}
    wall = breakdown(marks, 6.5, None)
    phases = wall["phases"]
    assert wall["interrupted"] == wall_time.LOOP
    assert "warmup" not in phases and "analysis" not in phases
    assert phases["data_and_model_setup"] == 0.25 and phases["writing"] == 0.25
    assert phases["unattributed"] == pytest.approx(3.0)  # loop_start to run_end
    assert math.fsum(phases.values()) == pytest.approx(6.5)


def test_a_child_that_left_no_mark():
    wall = breakdown({}, 1.5, None)
    assert wall["interrupted"] == "process_start_and_imports"
    assert wall["phases"] == {"unattributed": 1.5}
    assert wall["measurement_share"] == 0.0


# ----------------------------------------------------------------------------- real cells


@pytest.fixture(autouse=True)
def _no_fault_env(monkeypatch):
    monkeypatch.delenv(FAULTS_ENV, raising=False)


def _quick(config: dict) -> dict:
    """A cell that spends little time measuring: short windows are published, not extended."""
    config["timing"] = {"min_timed_seconds": 0.05, "min_timed_steps": 2, "max_eval_passes": 2,
                        "extend_short_windows": False, "min_energy_seconds": 0.05}  # fmt: skip
    return config


def _launch(tmp_path, config: dict, cell: tbconfig.Cell, data_path: str | None = None) -> dict:
    spec = tbconfig.cell_spec(tbconfig.validate_config(config), cell, data_path=data_path)
    run_cell(spec, tmp_path / "metrics.json", tmp_path / "cell.log")
    return read_record(tmp_path / "metrics.json")  # validated


@pytest.mark.slow
def test_a_real_cell_accounts_for_its_attempt(tmp_path):
    """The phases of a real training cell add up to its attempt's duration, each
    measured (>= 0), and less than 0.5 s is left unattributed."""
    config = _quick(tiny_config())
    settings = tbconfig.validate_config(copy.deepcopy(config))["workloads"]["image_cnn"]
    data = tmp_path / "data"
    image_cnn.prepare_data(settings, data, config["seed"])
    record = _launch(tmp_path, config, tbconfig.Cell("image_cnn", "cpu", 32, 0), str(data))

    assert record["status"] == "ok", record.get("error")
    wall = record["wall_time"]
    attempt = record["attempts"][-1]
    assert wall["attempt_seconds"] == attempt["duration_s"]
    assert set(wall["phases"]) == set(PHASES)  # (the record's keys are sorted)
    assert all(seconds >= 0 for seconds in wall["phases"].values()), wall["phases"]
    assert math.fsum(wall["phases"].values()) == pytest.approx(wall["attempt_seconds"], abs=0.5)
    assert 0 <= wall["unattributed_seconds"] < 0.5
    assert wall["interrupted"] is None
    for phase in ("process_start_and_imports", "data_and_model_setup", "warmup", "evaluation"):
        assert wall["phases"][phase] > 0, phase
    result = record["result"]
    assert wall["phases"]["warmup"] == pytest.approx(result["warmup"]["seconds"])
    assert wall["phases"]["timed_training"] + wall["phases"]["extension"] == pytest.approx(
        result["timed"]["seconds"]
    )
    order = ("popen", "child_start", "imports", "device_ready", "canary_end", "parts_built",
             "analysis_start", "loop_end", "result_written", "exit")  # fmt: skip
    times = [wall["marks"][name] for name in order]
    assert times == sorted(times)  # the launcher's and the child's marks on one clock
    assert attempt["wall_time"]["phases"] == wall["phases"]
    launcher = wall["launcher"]
    assert launcher["cell_seconds"] >= launcher["attempts_seconds"] == attempt["duration_s"]

    row = run_row(record, "metrics.json")
    assert row["wall_attempt_seconds"] == wall["attempt_seconds"]
    assert row["wall_warmup_seconds"] == wall["phases"]["warmup"]
    assert {f"wall_{p}_seconds" for p in PHASES} <= set(RUN_COLUMNS)


@pytest.mark.slow
def test_a_failed_cell_still_has_a_breakdown(tmp_path):
    config = tiny_config()
    config["launcher"]["allow_fault_injection"] = True
    config["fault_injection"] = [{"workload": "matmul", "device": "cpu", "fault": "exception"}]
    record = _launch(tmp_path, config, tbconfig.Cell("matmul", "cpu", 1, 0))

    assert record["status"] == "failed"
    wall = record["wall_time"]
    phases = wall["phases"]
    assert wall["interrupted"] == wall_time.LOOP  # the fault fires as the workload starts
    for phase in ("process_start_and_imports", "device_initialisation", "canary", "writing"):
        assert phases[phase] >= 0, phase
    assert "warmup" not in phases
    assert math.fsum(phases.values()) == pytest.approx(wall["attempt_seconds"])
    assert wall["attempt_seconds"] == record["attempts"][-1]["duration_s"]


# ----------------------------------------------------------------------------- the table


def _run(device: str, seconds: float | None, measurement: float = 0.0, **extra) -> dict:
    row = {"workload": "w", "device": device, "batch_size": 1, "rep": 0, "status": "ok"}
    if seconds is not None:
        row |= {
            "wall_attempt_seconds": seconds,
            "wall_measurement_seconds": measurement,
            "wall_outside_measurement_seconds": seconds - measurement,
            "wall_unattributed_seconds": 0.01,
            "wall_process_start_and_imports_seconds": seconds - measurement - 0.01,
        }
    return row | extra


def test_cell_time_shares_from_records():
    runs = pd.DataFrame(
        [
            _run("cpu", 10.0, 8.0),
            _run("cpu", 10.0, 6.0),
            _run("cpu", 20.0, 18.0),
            _run("cpu", None),  # a record from before the breakdown
            _run("cuda", 4.0, 1.0),
            _run("cuda", 100.0, 0.0, status="failed"),  # failed cells are not counted
        ]
    )
    table = cell_time_table(runs, {"w": ["cuda", "cpu"]})
    assert list(table.columns) == CELL_TIME_COLUMNS
    assert list(table["device"]) == ["cuda", "cpu"]  # the config's order
    cpu = table.set_index("device").loc["cpu"]
    assert (cpu["cells"], cpu["without_breakdown"]) == (3, 1)
    assert cpu["median_cell_seconds"] == 10.0
    assert cpu["median_measurement_share"] == pytest.approx(0.8)  # of 0.8, 0.6, 0.9
    assert cpu["median_outside_seconds"] == 2.0
    assert cpu["max_outside_seconds"] == 4.0
    assert cpu["median_process_start_and_imports_seconds"] == pytest.approx(1.99)
    assert cpu["max_unattributed_seconds"] == 0.01
    cuda = table.set_index("device").loc["cuda"]
    assert cuda["cells"] == 1 and cuda["median_measurement_share"] == 0.25
    assert cell_time_table(pd.DataFrame()).empty


def test_server_startup_is_each_servers_largest():
    """A server's start-up grows as it imports each workload's modules on that workload's
    first cell; every device that used it reports the server's whole start-up, once."""

    def forked(device, server, startup):
        return _run(device, 5.0, 4.0) | {
            "host": "h",
            "start_method": "fork_server",
            "start_server": server,
            "start_server_startup_seconds": startup,
        }

    runs = pd.DataFrame(
        [
            forked("cpu", "a", 10.6),  # forked before the later workloads' imports
            forked("cpu", "a", 12.9),
            forked("cuda", "a", 12.9),
            forked("cuda", "b", 3.0),  # a second server (another environment)
            _run("cpu", 5.0, 4.0) | {"start_method": "spawn"},
        ]
    )
    table = cell_time_table(runs).set_index("device")
    assert table.loc["cpu", "forked_cells"] == 2
    assert table.loc["cpu", "server_startup_seconds"] == pytest.approx(12.9)
    assert table.loc["cuda", "server_startup_seconds"] == pytest.approx(15.9)
