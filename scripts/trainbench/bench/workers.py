"""Benchmark jobs in worker processes that stop with the benchmark.

A :class:`concurrent.futures.ProcessPoolExecutor` outlives a parent killed by a stop
signal: its workers keep taking the queued jobs, each starting a cell, orphans that
burn the machine's cores (and, on a shared machine, disturb whatever is timed next).
:func:`run_in_workers` stops them: on a stop signal or an exception in the parent, no
queued job starts, and every worker gets SIGTERM, which the launcher running a cell
in it forwards to the cell's process group (:func:`trainbench.launch.child_process.
forward_stop_signals`)."""

from __future__ import annotations

import multiprocessing
import signal
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Any

_STOP = None  # the stop event, in a worker
SKIPPED = "skipped: the benchmark is stopping"


def _remember(stop) -> None:
    global _STOP
    _STOP = stop


def _unless_stopping(function: Callable, args: Sequence) -> Any:
    if _STOP is not None and _STOP.is_set():
        return SKIPPED
    return function(*args)


def _interrupt(signum, frame):
    raise KeyboardInterrupt(f"stopped by {signal.Signals(signum).name}")


def run_in_workers(
    function: Callable,
    calls: Iterable[Sequence],
    workers: int,
    done: Callable[[Any], None],
) -> None:
    """``function(*args)`` for each ``args`` of ``calls`` in ``workers`` spawned
    processes; ``done`` gets each result in this process as it finishes. On SIGTERM,
    SIGHUP, Ctrl-C or an exception here: no further job starts, the running ones are
    stopped, and the exception (KeyboardInterrupt for a signal) propagates. Call it
    from the main thread (it sets signal handlers)."""
    context = multiprocessing.get_context("spawn")
    stop = context.Event()
    handled = (signal.SIGTERM, signal.SIGHUP)
    previous = {sig: signal.signal(sig, _interrupt) for sig in handled}
    try:
        with ProcessPoolExecutor(
            max_workers=workers, mp_context=context, initializer=_remember, initargs=(stop,)
        ) as pool:
            futures = [pool.submit(_unless_stopping, function, tuple(args)) for args in calls]
            try:
                for future in as_completed(futures):
                    result = future.result()
                    if result != SKIPPED:
                        done(result)
            except BaseException:
                stop.set()
                for future in futures:
                    future.cancel()
                # The executor keeps no public handle on its processes.
                for process in list((getattr(pool, "_processes", None) or {}).values()):
                    if process.is_alive():
                        process.terminate()
                raise
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
