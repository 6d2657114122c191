"""The launcher's hold on a cell's child process while it runs.

The child runs in its own process group (see :func:`trainbench.launch.launcher.run_attempt`).
:func:`wait_for_child` waits for it with the attempt's timeout (SIGTERM to the group,
SIGKILL after a grace period) and gives its peak memory; the launcher's own parent
dying (Snakemake killed) and stop signals sent to the launcher (Snakemake stopping the
job) stop the child's group too and end the launcher with :class:`CellInterrupted`, so
no orphaned cell is left to disturb the next run's timing.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time

from trainbench.launch.process_group import signal_group

TERM_GRACE_S = 5.0


class SpawnedChild:
    """A child started with ``subprocess.Popen``: ``pid``, ``poll_exit`` and ``wait``
    (the same face as :class:`trainbench.launch.fork_client.ForkedChild`)."""

    def __init__(self, proc: subprocess.Popen):
        self.proc, self.pid = proc, proc.pid
        self.maxrss: int | None = None

    @property
    def returncode(self) -> int | None:
        return self.proc.returncode

    def poll_exit(self) -> tuple[int, int | None] | None:
        """(exit code as Popen gives it, peak RSS in bytes from wait4) once it has
        ended, else None."""
        if self.proc.returncode is None:
            pid, status, usage = os.wait4(self.pid, os.WNOHANG)
            if pid != self.pid:
                return None
            self.proc.returncode = os.waitstatus_to_exitcode(status)
            rss = usage.ru_maxrss if sys.platform == "darwin" else usage.ru_maxrss * 1024
            self.maxrss = int(rss)
        return self.proc.returncode, self.maxrss

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll_exit() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(self.proc.args, timeout)
            time.sleep(0.02)
        return self.proc.returncode


def wait_for_child(child, timeout: float) -> tuple[int, bool, int | None]:
    """Wait for the child (a :class:`SpawnedChild` or a forked one); kill its process
    group past the timeout, or when this launcher's own parent (Snakemake) dies: a
    launcher re-parented after a ``kill -9`` of Snakemake must not time a cell beside
    the next run's cells. Returns (returncode, timed_out, child's peak RSS in bytes)."""
    deadline = time.monotonic() + timeout
    timed_out = False
    sent_term_at = None
    parent = os.getppid()
    while True:
        if os.getppid() != parent:
            _stop_child(child)
            raise CellInterrupted("the launcher's parent (Snakemake) is gone")
        ended = child.poll_exit()
        if ended is not None:
            return ended[0], timed_out, ended[1]
        now = time.monotonic()
        if not timed_out and now > deadline:
            timed_out = True
            sent_term_at = now
            signal_group(child.pid, signal.SIGTERM)
        elif timed_out and now - sent_term_at > TERM_GRACE_S:
            signal_group(child.pid, signal.SIGKILL)
        time.sleep(0.05)


class CellInterrupted(BaseException):
    """The launcher itself was told to stop (Snakemake interrupted): no record is written."""


@contextlib.contextmanager
def forward_stop_signals(proc):
    """The child runs in its own process group (so a kill can take all of it, and a
    terminal's Ctrl-C does not reach it directly). When Snakemake stops this job,
    stop the child's group too instead of leaving it running as an orphan that
    would disturb the next run's timing."""

    def stop(signum, frame):
        _stop_child(proc)
        raise CellInterrupted(f"launcher stopped by {signal.Signals(signum).name}")

    previous = {
        sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
    }
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _stop_child(proc) -> None:
    signal_group(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=TERM_GRACE_S)
    except subprocess.TimeoutExpired:
        signal_group(proc.pid, signal.SIGKILL)
