"""Snakemake's scheduler passes while a timed cell runs: one timer at a time.

Snakemake 9 limits job starts with ``--max-jobs-per-timespan`` (default ``100/1s``, so a
limiter always exists). After every scheduling pass that leaves a job waiting for a
resource, ``JobScheduler._schedule_reevalutation`` starts a new ``threading.Timer`` that
wakes the scheduler one timespan later for another pass. A pass woken by a finished job
schedules a timer as well, so each finished job adds one more chain of timers that
never ends while a job waits: after n finished jobs, about n passes a second. In this
workflow every later cell waits (for ``timed_slot``), so the scheduler's passes grow
round by round beside the timed cell: measured on a toy workflow by
``benchmarks/scheduler_timers.py``, and beside the CUDA cells of a GPU host in
docs/how-it-measures.md. The same growth is reported upstream as Snakemake using "a
lot of CPU" after hours of a large workflow run with ``--max-jobs-per-second``
(snakemake/snakemake#2354).

:func:`coalesce_reevaluations` replaces that method so that a pass is scheduled only when
no timer that fires as soon or sooner is pending. No pass is lost: the pending timer
wakes the scheduler within the same timespan, and a pass it wakes schedules the next.
The rate limit itself is unchanged.
"""

from __future__ import annotations

import threading
import time

MARK = "_trainbench_coalesced"
# The body this replaces, as Snakemake 9.27 has it, without whitespace
# (tests/test_scheduler_passes.py checks the installed one): a new Timer on every call,
# whatever is pending.
REPLACED_BODY = "threading.Timer(delay,lambda:self._open_jobs.release(),).start()"
_LOCK = threading.Lock()


def coalesce_reevaluations(scheduler_class: type | None = None) -> bool:
    """Patch ``scheduler_class._schedule_reevalutation`` (Snakemake's ``JobScheduler``
    when none is given) to keep one pending timer; True when patched (now or before),
    False when the class has no such method (a Snakemake that changed it)."""
    if scheduler_class is None:
        from snakemake.scheduling.job_scheduler import JobScheduler

        scheduler_class = JobScheduler
    original = getattr(scheduler_class, "_schedule_reevalutation", None)
    if original is None:
        return False
    if getattr(original, MARK, False):
        return True

    def schedule_once(self, delay: float) -> None:
        due = time.monotonic() + delay
        with _LOCK:
            pending = getattr(self, "_trainbench_reevaluation_due", None)
            if pending is not None and pending <= due:
                return
            self._trainbench_reevaluation_due = due

        def wake() -> None:
            with _LOCK:
                if getattr(self, "_trainbench_reevaluation_due", None) == due:
                    self._trainbench_reevaluation_due = None
            self._open_jobs.release()

        threading.Timer(delay, wake).start()

    setattr(schedule_once, MARK, True)
    schedule_once.__doc__ = (original.__doc__ or "") + " (one pending timer: trainbench)"
    scheduler_class._schedule_reevalutation = schedule_once
    return True
