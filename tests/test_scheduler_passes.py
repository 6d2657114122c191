"""Snakemake's reevaluation timers: one pending at a time (trainbench.launch.scheduler_passes).

The fast tests hold the rule on a stand-in scheduler and check that the installed
Snakemake still has the method this replaces, as it was; the slow one counts the
scheduler's passes of a real workflow with and without the patch."""

from __future__ import annotations

import inspect
import textwrap
import threading
import time

import pytest
from trainbench.bench import scheduler_timers
from trainbench.launch import scheduler_passes
from trainbench.launch.scheduler_passes import coalesce_reevaluations


class StandIn:
    """Snakemake 9.27's scheduler, as far as the timers go."""

    def __init__(self) -> None:
        self._open_jobs = threading.Semaphore(0)

    def _schedule_reevalutation(self, delay: int) -> None:
        threading.Timer(
            delay,
            lambda: self._open_jobs.release(),
        ).start()


def wakes(scheduler: StandIn, within: float) -> int:
    """How many times the timers woke the scheduler within `within` seconds."""
    count, deadline = 0, time.monotonic() + within
    while scheduler._open_jobs.acquire(timeout=max(deadline - time.monotonic(), 0.001)):
        count += 1
    return count


def test_unpatched_every_call_adds_a_wake_up():
    scheduler = StandIn()
    for _ in range(5):
        scheduler._schedule_reevalutation(0.05)
    assert wakes(scheduler, 0.3) == 5


def test_one_pending_timer_wakes_once_and_a_later_call_schedules_again():
    class Patched(StandIn):
        pass

    assert coalesce_reevaluations(Patched)
    assert coalesce_reevaluations(Patched)  # a second application changes nothing
    scheduler = Patched()
    for _ in range(5):
        scheduler._schedule_reevalutation(0.05)
    assert wakes(scheduler, 0.3) == 1
    scheduler._schedule_reevalutation(0.05)  # the next pass, after the wake-up
    assert wakes(scheduler, 0.3) == 1


def test_a_sooner_pass_is_not_held_back_by_a_later_pending_one():
    class Patched(StandIn):
        pass

    coalesce_reevaluations(Patched)
    scheduler = Patched()
    scheduler._schedule_reevalutation(1.5)  # short: a pending Timer holds the process's exit
    started = time.monotonic()
    scheduler._schedule_reevalutation(0.05)
    assert scheduler._open_jobs.acquire(timeout=1)
    assert time.monotonic() - started < 1


def test_a_class_without_the_method_is_left_alone():
    assert coalesce_reevaluations(type("Other", (), {})) is False


def test_the_installed_snakemake_has_the_body_this_replaces():
    """A Snakemake upgrade that changes the method fails here: read its new body and
    decide whether the patch is still right (or still needed)."""
    from snakemake.scheduling.job_scheduler import JobScheduler

    method = JobScheduler.__dict__["_schedule_reevalutation"]
    if getattr(method, scheduler_passes.MARK, False):  # patched by a workflow run here
        pytest.skip("JobScheduler already patched in this process")
    source = "".join(textwrap.dedent(inspect.getsource(method)).split("\n", 1)[1].split())
    assert source == scheduler_passes.REPLACED_BODY


@pytest.mark.slow
def test_a_real_workflow_runs_one_pass_a_second_not_one_more_per_finished_job(tmp_path):
    """Eight jobs of 1.2 s, one at a time: unpatched, the k-th job waits beside k timer
    chains (about 1.2 * k passes); patched, about one pass a second plus one a job."""
    plain = scheduler_timers.run_toy(tmp_path / "plain", patch=False)
    patched = scheduler_timers.run_toy(tmp_path / "patched", patch=True)
    assert plain["passes"] >= 30, plain
    assert patched["passes"] <= 25, patched
