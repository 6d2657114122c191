"""Shared fixtures for the trainbench unit tests (kept small on purpose)."""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = REPO_ROOT / "scripts"
if str(SCRIPTS) not in sys.path:  # the package is installed editable; this is a safety net
    sys.path.insert(0, str(SCRIPTS))

# Tiny modules of each kernel kind a test may need under CPU autocast; the marker
# ``@pytest.mark.cpu_autocast("bfloat16", "LSTM")`` probes them with the workloads'
# own detection (trainbench.measure.cpu_features) and skips with its one-line reason.
_PROBE_MODULES = {
    "LSTM": lambda nn: nn.LSTM(8, 8, batch_first=True),
    "GRU": lambda nn: nn.GRU(8, 8, batch_first=True),
    "Linear": lambda nn: nn.Linear(8, 8),
    "Conv2d": lambda nn: nn.Conv2d(3, 4, 3),
    "MultiheadAttention": lambda nn: nn.MultiheadAttention(8, 2, batch_first=True),
}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--durations-file",
        default=None,
        help="write every test's own seconds and the shared fixtures' to this JSON file "
        "(checked by `python tests/speed_guard.py FILE`, which `make test` runs)",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "cpu_autocast(dtype, *kernels): needs these kernels under CPU autocast in dtype; "
        "skips with the reason where this CPU (or ONEDNN_MAX_CPU_ISA) cannot run them",
    )
    from speed_guard import SpeedGuard

    path = config.getoption("--durations-file")
    config.pluginmanager.register(SpeedGuard(Path(path) if path else None), "speed_guard")


def cpu_autocast_skip_reason(dtype: str, kernels: tuple[str, ...]) -> str | None:
    """Why this CPU cannot run ``kernels`` under CPU autocast in ``dtype``, or None."""
    from torch import nn
    from trainbench.measure.cpu_features import autocast_unavailable

    model = nn.ModuleList([_PROBE_MODULES[k](nn) for k in kernels])
    return autocast_unavailable(model, dtype)


def pytest_runtest_setup(item: pytest.Item) -> None:
    for mark in item.iter_markers("cpu_autocast"):
        reason = cpu_autocast_skip_reason(mark.args[0], tuple(mark.args[1:]))
        if reason:
            pytest.skip(reason)


_SMALL_CONFIG = {
    "seed": 0,
    "repeats": 1,
    "devices": ["cpu"],
    "workloads": {
        "image_cnn": {
            "batch_sizes": [8],
            "epochs": 1,
            "warmup_steps": 1,
            "max_steps_per_epoch": 4,
            "data": {"source": "synthetic", "n_train": 64, "n_test": 32, "image_size": 8},
        },
        "matmul": {"sizes": [16, 32], "min_run_time_s": 0.01},
    },
}


def small_config() -> dict:
    """A fresh copy of a small valid config; everything else comes from the schema defaults."""
    return copy.deepcopy(_SMALL_CONFIG)


@pytest.fixture
def schema_defaults_config() -> dict:
    """A small valid config dict (not yet validated, so defaults are not filled in)."""
    return small_config()


@pytest.fixture
def repo_root() -> Path:
    return REPO_ROOT


@pytest.fixture
def shared_data() -> Path:
    """The development checkout's data folder, ``../shared/data`` beside the repository
    (real data sets, e.g. goemotions/original); a plain clone has none, and the tests
    that need it skip."""
    path = REPO_ROOT.parent / "shared" / "data"
    if not path.is_dir():
        pytest.skip(f"shared data folder {path} is absent (tests needing real data sets skip)")
    return path
