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
    """The shared data folder next to the repository (/work/shared/data)."""
    path = REPO_ROOT.parent / "shared" / "data"
    if not path.is_dir():
        pytest.skip(f"shared data folder {path} is absent (tests needing real data sets skip)")
    return path
