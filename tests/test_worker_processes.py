"""The analysis jobs' worker processes: forked on Linux, spawned on macOS (where fork is
unsafe), and entry scripts that a spawned worker can run again without redoing the job.
(No Mac here: sys.platform is patched.)"""

from __future__ import annotations

import runpy
import sys

import pytest
from helpers import REPO
from trainbench.analysis.worker_processes import worker_context, worker_start_method


@pytest.mark.parametrize(("platform", "method"), [("linux", "fork"), ("darwin", "spawn")])
def test_the_start_method_is_fork_on_linux_and_spawn_on_macos(monkeypatch, platform, method):
    monkeypatch.setattr(sys, "platform", platform)
    assert worker_start_method() == method
    assert worker_context("job", 2).get_start_method() == method
    if method == "spawn":
        assert worker_context("job", 1, spawn_pays=False) is None
    else:
        assert worker_context("job", 1, spawn_pays=False).get_start_method() == "fork"


@pytest.mark.parametrize("script", ["figures.py", "compute_statistics.py"])
def test_a_spawned_worker_can_rerun_the_entry_script(script):
    """A spawned worker runs the job's main script again as ``__mp_main__``, and under
    Snakemake that is this file, without the ``snakemake`` object: it must define
    things and do nothing (else the worker dies and the pool breaks)."""
    runpy.run_path(str(REPO / "scripts" / script), run_name="__mp_main__")
