"""One copy of a cell at a time, and no cell outliving its launcher.

:class:`CellLock` is an exclusive ``flock`` on ``<cell folder>/.lock`` whose file
holds the owner: the launcher's pid and its child's process group. The child
inherits the locked descriptor, so the lock lasts exactly as long as either of
them. A launcher that finds the lock held waits while the owning launcher lives (two
Snakemake runs asked for the same cell: they take turns, never overlap); when the
owner launcher is dead, the holder is an orphaned cell, whose process group it
stops before it starts its own.

:func:`child_guard` makes the child die with its launcher: ``PR_SET_PDEATHSIG`` on
Linux (the kernel sends SIGKILL when the launcher dies, even ``kill -9`` or the OOM
killer), and everywhere a watchdog pipe whose end-of-file the child's watchdog
thread reads as "the launcher is gone" (see :func:`trainbench.launch.child.watch_launcher`).
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import json
import os
import shutil
import signal
import sys
import time
from pathlib import Path

from trainbench.common.records import current_umask
from trainbench.launch.process_group import signal_group

WATCHDOG_FD_VARIABLE = "TRAINBENCH_WATCHDOG_FD"
PR_SET_PDEATHSIG = 1
STOP_GRACE_S = 5.0


def _alive(pid: int | None) -> bool:
    """Whether a process ``pid`` (the lock's launcher) exists. EPERM means it does, as
    someone else's: this pid is not one we created, unlike a cell's process group
    (:func:`trainbench.launch.process_group.signal_group`, where EPERM means gone)."""
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _stop_group(pgid: int, log) -> None:
    """SIGTERM a cell's process group, then SIGKILL what is left after a grace period.
    The group is one of our launchers' children: EPERM (macOS, a zombie-only group)
    counts as gone, as ESRCH does."""
    if not signal_group(pgid, signal.SIGTERM):
        return
    deadline = time.monotonic() + STOP_GRACE_S
    while time.monotonic() < deadline:
        if not signal_group(pgid, 0):
            return
        time.sleep(0.1)
    if signal_group(pgid, signal.SIGKILL):
        log.write(f"process group {pgid} did not stop on SIGTERM; killed\n")


class CellLock:
    """``with CellLock(folder, log) as lock: ... lock.set_child(pgid)``."""

    def __init__(self, folder: str | os.PathLike, log):
        self.path = Path(folder) / ".lock"
        self.log = log
        self.fd: int | None = None

    def __enter__(self) -> CellLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666 & ~current_umask())
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._take_over()
        self._write({"launcher_pid": os.getpid(), "child_pgid": None, "since": time.time()})
        # Attempt folders of a killed launcher: nobody else can be using them now.
        for stale in self.path.parent.glob(".attempt-*"):
            shutil.rmtree(stale, ignore_errors=True)
        return self

    def _owner(self) -> dict:
        try:
            return json.loads(Path(self.path).read_text() or "{}")
        except (OSError, ValueError):
            return {}

    def _take_over(self) -> None:
        """The lock is held: wait for a living launcher; stop an orphaned cell."""
        owner = self._owner()
        launcher, child = owner.get("launcher_pid"), owner.get("child_pgid")
        if _alive(launcher):
            self.log.write(
                f"another launcher (pid {launcher}) is running this cell; waiting for it "
                "(two copies of a cell never run side by side)\n"
            )
        elif child and signal_group(int(child), 0):
            self.log.write(
                f"this cell's previous launcher (pid {launcher}) is gone but its process "
                f"group {child} still runs: stopping it before starting\n"
            )
            _stop_group(int(child), self.log)
        self.log.flush()
        fcntl.flock(self.fd, fcntl.LOCK_EX)  # blocks until the holder is gone

    def _write(self, owner: dict) -> None:
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, json.dumps(owner).encode(), 0)
        os.fsync(self.fd)

    def set_child(self, pgid: int) -> None:
        self._write({"launcher_pid": os.getpid(), "child_pgid": pgid, "since": time.time()})

    def __exit__(self, *exc) -> None:
        if self.fd is not None:
            with contextlib.suppress(OSError):
                self._write({})
            os.close(self.fd)  # the lock goes with the last open descriptor
            self.fd = None


def child_guard(launcher_pid: int):
    """``preexec_fn`` of the child: die when the launcher dies (Linux), and a guard
    against the launcher having died already between fork and this call."""

    def guard() -> None:
        if sys.platform.startswith("linux"):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != launcher_pid:
            os._exit(1)

    return guard
