"""The launcher's side of the fork server (:mod:`trainbench.launch.fork_server`): find or
start the run's server for an environment, ask it to fork a cell, and watch that child
as a ``Popen`` would be watched."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from trainbench.launch.fork_server import (
    DESCRIPTORS,
    PER_ATTEMPT_VARIABLES,
    START_TIMEOUT_S,
    UNIX_PATH_MAX,
    ForkServerUnavailable,
    StaleSocket,
    _owner_alive,
)
from trainbench.launch.process_group import signal_group


def server_key(env: dict) -> str:
    """What a server's children may differ in: nothing but the per-attempt variables."""
    fixed = {k: v for k, v in env.items() if k not in PER_ATTEMPT_VARIABLES}
    payload = json.dumps([sys.executable, sorted(fixed.items())]).encode()
    return hashlib.sha256(payload).hexdigest()[:16]


def socket_path(env: dict, owner: dict) -> Path:
    folder = Path(tempfile.gettempdir()) / f"trainbench-{os.getuid()}"
    folder.mkdir(mode=0o700, exist_ok=True)
    name = f"fs-{owner['pid']}-{int(owner.get('started') or 0)}-{server_key(env)}.sock"
    path = folder / name
    if len(str(path)) > UNIX_PATH_MAX:
        raise ForkServerUnavailable(f"socket path too long for AF_UNIX: {path}")
    return path


def ensure_server(env: dict, owner: dict, timeout: float = START_TIMEOUT_S) -> Path:
    """The socket of this owner's server for ``env``, started here when absent (one
    launcher starts it, under a lock; the others wait for it)."""
    path = socket_path(env, owner)
    if path.exists():
        return path
    failed = path.with_suffix(".failed")
    if failed.exists():  # this run's server could not start: say why, start no other
        raise ForkServerUnavailable(failed.read_text(errors="replace"))
    if not _owner_alive(int(owner["pid"]), owner.get("started")):
        raise ForkServerUnavailable(f"the run's process {owner['pid']} is not alive to own one")
    log_path = path.with_suffix(".log")
    with open(path.with_suffix(".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if path.exists():
            return path
        command = [sys.executable, "-X", "faulthandler", "-m", "trainbench.launch.fork_server"]
        command += ["--socket", str(path), "--owner", str(owner["pid"])]
        if owner.get("started"):
            command += ["--owner-started", repr(owner["started"])]
        with open(log_path, "ab") as log:
            server = subprocess.Popen(
                command,
                env={k: v for k, v in env.items() if k not in PER_ATTEMPT_VARIABLES},
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while not path.exists():
            if server.poll() is not None:
                tail = log_path.read_text(errors="replace")[-600:]
                why = f"the fork server exited ({server.returncode}): {tail}"
                failed.write_text(why)
                raise ForkServerUnavailable(why)
            if time.monotonic() > deadline:
                server.kill()
                raise ForkServerUnavailable(f"the fork server was not ready in {timeout:.0f} s")
            time.sleep(0.02)
    return path


class ForkedChild:
    """A child the server forked: ``pid`` (its process group), ``poll_exit`` and
    ``wait`` as the launcher uses a spawned child's."""

    def __init__(self, conn: socket.socket, pid: int, server: dict):
        self.conn, self.pid, self.server = conn, pid, server
        self.returncode: int | None = None
        self.maxrss: int | None = None
        self._buffer = b""

    def poll_exit(self) -> tuple[int, int | None] | None:
        """(exit code as Popen gives it, peak RSS in bytes) once reaped, else None."""
        if self.returncode is not None:
            return self.returncode, self.maxrss
        ready, _, _ = select.select([self.conn], [], [], 0)
        if not ready:
            return None
        chunk = self.conn.recv(4096)
        self._buffer += chunk
        if b"\n" in self._buffer:
            report = json.loads(self._buffer.split(b"\n", 1)[0])
            self.returncode = os.waitstatus_to_exitcode(report["status"])
            self.maxrss = report.get("maxrss")
        elif not chunk:  # the server is gone; its children die with it (PDEATHSIG)
            signal_group(self.pid, signal.SIGKILL)
            self.returncode = -signal.SIGKILL
        if self.returncode is not None:
            self.conn.close()
            return self.returncode, self.maxrss
        return None

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll_exit() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(["forked child", str(self.pid)], timeout)
            time.sleep(0.02)
        return self.returncode


def fork_child(
    path: Path, argv: list[str], env: dict, fds: dict[str, int], preload: list[str] = ()
) -> ForkedChild:
    """Ask the server at ``path`` for a child running ``python -m`` ``argv``, after it
    has imported the bundled workload modules ``preload``."""
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(str(path))
        names = [name for name in DESCRIPTORS if name in fds]
        request = {"argv": argv, "env": env, "cwd": os.getcwd(), "descriptors": names,
                   "preload": list(preload)}  # fmt: skip
        payload = json.dumps(request).encode()
        socket.send_fds(conn, [struct.pack("!Q", len(payload))], [fds[n] for n in names])
        conn.sendall(payload)
        conn.settimeout(60)
        line = b""
        while not line.endswith(b"\n"):
            chunk = conn.recv(1)
            if not chunk:
                raise ForkServerUnavailable("the fork server closed the connection before forking")
            line += chunk
        conn.settimeout(None)
    except (ConnectionRefusedError, FileNotFoundError) as exc:
        conn.close()
        raise StaleSocket(f"no fork server at {path}: {exc}") from exc
    except OSError as exc:
        conn.close()
        raise ForkServerUnavailable(f"the fork server at {path} failed: {exc}") from exc
    reply = json.loads(line)
    if "error" in reply:
        conn.close()
        raise ForkServerUnavailable(reply["error"])
    return ForkedChild(conn, int(reply["pid"]), reply["server"])
