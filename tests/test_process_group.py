"""A cell's process group signalled as macOS answers: ``killpg`` fails with EPERM, not
ESRCH, when the group holds only a zombie (asv #304, cylc-flow #4221). The launcher's
timeout kill and the cell lock's take-over of an orphaned cell must read it as "gone"
and carry on to the record. No Mac exists here: ``os.killpg`` is patched to deliver
the signal for real (so the child does exit) and then fail as macOS would, which is
the race a timeout kill runs against a child's own exit."""

from __future__ import annotations

import contextlib
import copy
import errno
import fcntl
import json
import os
import signal
import subprocess
import sys
import time

import pytest
from helpers import FAULTS_ENV, tiny_config
from trainbench import config as tbconfig
from trainbench.common.records import read_record
from trainbench.launch import cell_lock
from trainbench.launch.child_process import SpawnedChild, wait_for_child
from trainbench.launch.launcher import run_cell
from trainbench.launch.process_group import signal_group

EPERM = PermissionError(errno.EPERM, "Operation not permitted")


def killpg_as_macos_on_a_zombie(monkeypatch) -> list[int]:
    """``os.killpg`` that, for a real signal, kills the group (its child exits and stays
    a zombie until reaped) and then raises EPERM as macOS does for a zombie-only group;
    a probe (signal 0) is answered truly. Returns the signals asked for."""
    real_killpg = os.killpg
    asked: list[int] = []

    def killpg(pgid: int, sig: int) -> None:
        asked.append(sig)
        if sig == 0:
            real_killpg(pgid, 0)
            return
        with contextlib.suppress(ProcessLookupError):
            real_killpg(pgid, signal.SIGKILL)
        raise EPERM

    monkeypatch.setattr(os, "killpg", killpg)
    return asked


@contextlib.contextmanager
def sleeping_group(**popen):
    """A ``sleep`` in a process group (and session) of its own, as a cell's child is;
    killed and reaped at the end whatever happened."""
    child = subprocess.Popen(["sleep", "60"], start_new_session=True, **popen)
    try:
        yield child
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child.pid, signal.SIGKILL)
        child.wait()


@pytest.mark.parametrize(
    "error", [EPERM, ProcessLookupError(errno.ESRCH, "No such process")], ids=["EPERM", "ESRCH"]
)
def test_a_group_that_answers_eperm_or_esrch_is_gone(monkeypatch, error):
    def killpg(pgid: int, sig: int) -> None:
        raise error

    monkeypatch.setattr(os, "killpg", killpg)
    assert signal_group(12345, signal.SIGTERM) is False
    assert signal_group(12345, 0) is False


def test_a_living_group_is_signalled_and_other_errors_are_raised():
    with sleeping_group() as child:
        assert signal_group(child.pid, 0) is True
        with pytest.raises(OSError) as raised:
            signal_group(child.pid, -1)  # no such signal: EINVAL, a bug to show
        assert raised.value.errno == errno.EINVAL
        assert signal_group(child.pid, signal.SIGKILL) is True
        assert child.wait(timeout=10) == -signal.SIGKILL


def test_a_timeout_kill_that_gets_eperm_still_ends_the_wait(monkeypatch):
    with sleeping_group() as proc:
        asked = killpg_as_macos_on_a_zombie(monkeypatch)
        returncode, timed_out, _ = wait_for_child(SpawnedChild(proc), timeout=0.2)
    assert timed_out is True
    assert returncode == -signal.SIGKILL
    assert asked[0] == signal.SIGTERM


def test_the_launcher_writes_the_timeout_record_when_killpg_gets_eperm(tmp_path, monkeypatch):
    """The whole launcher: a hanging cell past its timeout, the kill answered with EPERM:
    the record is written and says timeout (before, the PermissionError ended the
    launcher with no record)."""
    monkeypatch.delenv(FAULTS_ENV, raising=False)
    config = copy.deepcopy(tiny_config())
    config["launcher"].update(start_method="spawn", allow_fault_injection=True)
    config["fault_injection"] = [{"workload": "matmul", "device": "cpu", "fault": "hang"}]
    config["workloads"]["matmul"]["timeout_s"] = 1
    spec = tbconfig.cell_spec(
        tbconfig.validate_config(config), tbconfig.Cell("matmul", "cpu", 1, 0)
    )
    asked = killpg_as_macos_on_a_zombie(monkeypatch)
    out, log = tmp_path / "metrics.json", tmp_path / "cell.log"

    run_cell(spec, out, log)

    record = read_record(out)
    assert record["status"] == "failed"
    assert record["error"]["class"] == "timeout"
    assert record["attempts"][0]["timed_out"] is True
    assert signal.SIGTERM in asked
    assert "record status: failed" in log.read_text()


def test_an_orphaned_cell_answering_eperm_is_taken_over(tmp_path, monkeypatch):
    """A dead launcher's cell still holds the lock; stopping its group gets EPERM (it
    exited meanwhile): the new launcher takes the lock and goes on."""
    lock_path = tmp_path / ".lock"
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # a launcher pid that no longer exists
    with sleeping_group(pass_fds=(fd,)) as orphan:
        os.close(fd)  # the orphan alone holds the lock now
        lock_path.write_text(json.dumps({"launcher_pid": gone.pid, "child_pgid": orphan.pid}))
        asked = killpg_as_macos_on_a_zombie(monkeypatch)
        with open(tmp_path / "cell.log", "w") as log, cell_lock.CellLock(tmp_path, log) as lock:
            assert lock.fd is not None
            assert json.loads(lock_path.read_text())["launcher_pid"] == os.getpid()
        assert orphan.wait(timeout=10) == -signal.SIGKILL
    assert signal.SIGTERM in asked
    assert "still runs: stopping it" in (tmp_path / "cell.log").read_text()


def test_stopping_a_group_whose_probe_gets_eperm_ends_without_sigkill(monkeypatch):
    """SIGTERM is delivered; the group then holds only a zombie, whose probe macOS
    answers with EPERM: the group is gone, no wait for the grace period, no SIGKILL."""
    real_killpg = os.killpg
    asked: list[int] = []

    def killpg(pgid: int, sig: int) -> None:
        asked.append(sig)
        if sig == 0:
            raise EPERM
        real_killpg(pgid, sig)

    with sleeping_group() as child:
        monkeypatch.setattr(os, "killpg", killpg)
        t0 = time.monotonic()
        with open(os.devnull, "w") as log:
            cell_lock._stop_group(child.pid, log)
        assert time.monotonic() - t0 < cell_lock.STOP_GRACE_S
        assert child.wait(timeout=10) == -signal.SIGTERM
    assert asked == [signal.SIGTERM, 0]
