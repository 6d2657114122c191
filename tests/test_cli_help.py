"""Every command-line entry point answers ``--help`` with its usage and does nothing
else: the benchmarks, the scripts a person runs (the Snakemake rule scripts, which
read the injected ``snakemake`` object, are not commands) and the steady-state
recorder. parity_power.py's help once crashed on the `%` of its column names, and
recover.py once acted on the current folder when asked for help."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from helpers import REPO

RULE_SCRIPT_MARKERS = ("snakemake.input", "snakemake.output", "snakemake.params", "snakemake.log")
# Commands whose imports (torch) take seconds before their help: make test-slow. The
# fast suite's speed guard (tests/speed_guard.py) names any other that should be here.
IMPORT_TORCH_FIRST = {
    "benchmarks/canary_cost.py",
    "benchmarks/conv_precision.py",
    "benchmarks/eval_handoff_race.py",
    "benchmarks/false_alarm.py",
    "benchmarks/parity_power.py",
    "benchmarks/step_overhead.py",
    "benchmarks/throughput.py",
    "tests/data/steady/record.py",
}


def commands() -> list[Path]:
    files = [
        *sorted((REPO / "benchmarks").glob("*.py")),
        *sorted((REPO / "scripts").glob("*.py")),
        REPO / "tests" / "data" / "steady" / "record.py",
    ]
    return [f for f in files if not any(m in f.read_text() for m in RULE_SCRIPT_MARKERS)]


def test_the_commands_are_found():
    names = {f.name for f in commands()}
    assert {"parity_power.py", "throughput.py", "recover.py", "check_config.py"} <= names
    assert "run_cell.py" not in names  # a rule script


def _params() -> list:
    return [
        pytest.param(
            f,
            id=f.relative_to(REPO).as_posix(),
            marks=[pytest.mark.slow]
            if f.relative_to(REPO).as_posix() in IMPORT_TORCH_FIRST
            else [],
        )
        for f in commands()
    ]


def test_the_slow_commands_are_commands():
    assert {f.relative_to(REPO).as_posix() for f in commands()} >= IMPORT_TORCH_FIRST


@pytest.mark.parametrize("script", _params())
def test_help_prints_usage_and_acts_on_nothing(script: Path, tmp_path: Path):
    before = set(tmp_path.iterdir())
    proc = subprocess.run(
        [sys.executable, str(script), "--help"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith("usage:"), proc.stdout[:500]
    assert set(tmp_path.iterdir()) == before
