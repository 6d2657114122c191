"""A pre-imported parent that forks each cell's child: imports paid once per run.

Starting a cell's child costs more than many a cell measures: ``import torch`` and the
workloads' libraries (3-9 s on a GPU host), then, once per process, the lazy import
that building the first optimizer triggers inside torch (``torch._dynamo``: 2-6 s).
The fork server pays them once per Snakemake run: a process that imports torch,
trainbench's core and scikit-learn's metrics, builds one optimizer on a CPU tensor,
freezes its heap (``gc.freeze``) and then forks one child per cell attempt; a bundled
workload's modules (and transformers, for text) are imported by the server on the first
request of a cell that runs that workload, so later cells of it share them.

Isolation is the spawn path's: every attempt is still its own process, in its own
process group and session, with the launcher's stdout, stderr, watchdog pipe and cell
lock (passed over the socket, SCM_RIGHTS) and the exact environment the launcher
computed. A segfault, abort, OOM kill or CUDA error ends that child alone; the server
reports its wait status and peak RSS to the launcher, which classifies it as it would
a spawned child's.

What makes fork safe here: the server never touches a device (no CUDA call, no MPS; it
checks ``torch.cuda.is_initialized()`` is false after its imports), runs no parallel
CPU work (no OpenMP pool exists to be lost in the fork), starts no thread, and only
serves children whose environment, as far as it can have been read at import time,
equals its own: the socket's name holds a hash of that environment, so a cell with
other variables gets (or starts) its own server. It runs only on Linux; elsewhere
(macOS, where fork after Apple's frameworks load is unsafe, and Windows) every cell is
spawned. It lives as long as its owner (the Snakemake run, else the launcher's
process) and stops, with any child it still has, when the owner is gone.

Protocol, one connection per attempt: the launcher sends an 8-byte length with the
file descriptors, then a JSON request (argv, env, cwd); the server answers one JSON line
``{"pid": ..., "server": {...}}`` after the fork and one ``{"status": ..., "maxrss": ...}``
when the child has been reaped.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import select
import signal
import socket
import struct
import sys
import time
import traceback
from pathlib import Path

from trainbench.launch.process_group import signal_group

# Variables that differ between two launchers of one run and that nothing reads at
# import time: they are set in each child, never part of the server's key. Every other
# variable is: a cell whose environment differs in any of them gets its own server.
PER_ATTEMPT_VARIABLES = ("TRAINBENCH_WATCHDOG_FD", "PYTEST_CURRENT_TEST")
# The descriptors a request may carry (the cell lock is optional).
DESCRIPTORS = ("stdout", "stderr", "watchdog", "lock")
# Seconds a launcher waits for a server it started to be ready (its imports).
START_TIMEOUT_S = 300.0
UNIX_PATH_MAX = 100  # sun_path is 108 bytes on Linux, 104 on macOS


class ForkServerUnavailable(RuntimeError):
    """No fork server for this attempt (said why); the launcher spawns the child."""


class StaleSocket(ForkServerUnavailable):
    """A socket left by a server that is gone: start a fresh one."""


# -- the server ---------------------------------------------------------------------


# torch.cuda.is_available() and device_count() ask the CUDA runtime (cudaGetDeviceCount)
# unless this is set, and once the runtime has been asked, torch marks every later fork
# "bad": the child cannot use CUDA ("Cannot re-initialize CUDA in forked subprocess"),
# and a CPU child's optimizer step fails on its CUDA graph-capture check. A library may
# ask while it is imported; with this set during the imports, torch asks NVML instead,
# which leaves the runtime untouched.
NVML_CHECK = "PYTORCH_NVML_BASED_CUDA_CHECK"


@contextlib.contextmanager
def nvml_based_cuda_checks():
    previous = os.environ.get(NVML_CHECK)
    os.environ[NVML_CHECK] = "1"
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(NVML_CHECK, None)
        else:
            os.environ[NVML_CHECK] = previous


def check_fork_is_clean() -> None:
    """Fork once and ask torch, in the child, whether CUDA is usable there; raise when
    it is not (the imports initialised the CUDA runtime): cells are then spawned."""
    pid = os.fork()
    if pid == 0:
        code = 3
        try:
            import torch

            code = 3 if torch.cuda._is_in_bad_fork() else 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(
            "a child forked after the imports could not use CUDA (a library initialised "
            "the CUDA runtime while being imported): cells are spawned instead"
        )


# What every cell's child imports, whatever its workload: imported when the server starts.
CORE_MODULES = (
    "trainbench.launch.child",
    "trainbench.measure.canary",
    "trainbench.measure.context",
    "trainbench.measure.trackers",
    "trainbench.measure.numeric_fault",
    "trainbench.measure.training",
    "sklearn.metrics",
)


class Preloader:
    """The server's imports, each timed: torch and :data:`CORE_MODULES` at the start,
    then a bundled workload's modules on the first request of a cell that runs it
    (between two forks; the run's later cells of that workload share them)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.not_imported: dict[str, str] = {}

    def _timed(self, name: str, action) -> None:
        t0 = time.perf_counter()
        try:
            action()
        except Exception as exc:  # an optional library: its cells import it themselves
            self.not_imported[name] = f"{type(exc).__name__}: {exc}"[:200]
        self.seconds[name] = round(time.perf_counter() - t0, 4)

    def core(self) -> None:
        import importlib

        with nvml_based_cuda_checks():
            self._timed("torch", lambda: importlib.import_module("torch"))
            for module in CORE_MODULES:
                self._timed(module, lambda m=module: importlib.import_module(m))
            # torch imports torch._dynamo the first time an optimizer gets a parameter group.
            self._timed("first optimizer", _first_optimizer)
        self._check()

    def workload(self, modules: list[str]) -> bool:
        """Import ``modules`` (bundled workloads) and what they need; True when anything
        was imported now (the fork is then checked again)."""
        import importlib

        new = [m for m in modules if m not in self.seconds and m in _bundled_modules()]
        with nvml_based_cuda_checks():
            for module in new:
                self._timed(module, lambda m=module: importlib.import_module(m))
                for name, action in WORKLOAD_EXTRAS.get(module, ()):
                    self._timed(name, action)
        if new:
            self._check()
        return bool(new)

    def _check(self) -> None:
        import torch

        if torch.cuda.is_initialized():  # pragma: no cover - a library touched CUDA
            raise RuntimeError("CUDA was initialised while pre-importing: forking is unsafe")
        check_fork_is_clean()

    def facts(self) -> dict:
        return {"seconds": dict(self.seconds), "not_imported": dict(self.not_imported)}


def _bundled_modules() -> set[str]:
    from trainbench.config.registry import WORKLOADS

    return {info.module for info in WORKLOADS.values() if info.bundled}


def _import(name: str):
    import importlib

    return lambda: importlib.import_module(name)


def _touch_transformers() -> None:
    from transformers import AutoTokenizer, DistilBertConfig, PreTrainedTokenizerFast

    del AutoTokenizer, DistilBertConfig, PreTrainedTokenizerFast


# What a bundled workload's cells import inside its functions (lazily), besides its module.
WORKLOAD_EXTRAS = {
    "trainbench.workloads.text_multilabel": (
        ("trainbench.workloads.text_multilabel_model",
         _import("trainbench.workloads.text_multilabel_model")),
        ("transformers tokenizers", _touch_transformers),
    ),
}  # fmt: skip


def _first_optimizer() -> None:
    import torch

    param = torch.nn.Parameter(torch.zeros(1))
    torch.optim.SGD([param], lr=0.1)
    torch.optim.AdamW([param], lr=0.1)


def _owner_alive(pid: int, started: float | None) -> bool:
    import psutil

    try:
        proc = psutil.Process(pid)
        return started is None or abs(proc.create_time() - started) < 1.0
    except psutil.Error:
        return False


def _recv_exact(conn: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            raise ConnectionError("the launcher closed the connection mid-request")
        data += chunk
    return data


def _send_line(conn: socket.socket, message: dict) -> None:
    with contextlib.suppress(OSError):
        conn.sendall((json.dumps(message) + "\n").encode())


class Server:
    """The accept loop: one fork per request, reaping children as SIGCHLD arrives."""

    def __init__(self, path: str, owner_pid: int, owner_started: float | None):
        self.path, self.owner_pid, self.owner_started = path, owner_pid, owner_started
        self.children: dict[int, socket.socket] = {}
        self.served = 0
        self.facts: dict = {}
        self.preloader = Preloader()

    def serve(self) -> None:
        t0 = time.perf_counter()
        started = time.time()
        self.preloader.core()
        gc.collect()
        gc.freeze()  # the children's collections never walk (and so never copy) these pages
        self.facts = {
            "pid": os.getpid(),
            "started_unix": started,
            "startup_s": round(time.perf_counter() - t0, 4),
        }
        print(json.dumps({"ready": self.facts}), flush=True)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        temporary = f"{self.path}.{os.getpid()}.tmp"
        listener.bind(temporary)
        listener.listen(64)
        os.rename(temporary, self.path)  # the path appears only once it accepts
        wake_read, wake_write = os.pipe()
        os.set_blocking(wake_write, False)
        signal.set_wakeup_fd(wake_write)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        try:
            self._loop(listener, wake_read)
        except RuntimeError as exc:
            with contextlib.suppress(OSError):
                Path(self.path[: -len(".sock")] + ".failed").write_text(str(exc))
            raise
        finally:
            for leftover in (self.path, self.path[: -len(".sock")] + ".lock"):
                with contextlib.suppress(OSError):
                    os.unlink(leftover)
            for pid in self.children:
                signal_group(pid, signal.SIGKILL)  # each its own group (setsid)

    def _loop(self, listener: socket.socket, wake_read: int) -> None:
        last_owner_check = 0.0
        while True:
            ready, _, _ = select.select([listener, wake_read], [], [], 1.0)
            if wake_read in ready:
                with contextlib.suppress(BlockingIOError):
                    os.read(wake_read, 4096)
            if listener in ready:
                conn, _ = listener.accept()
                self._start_child(conn, listener, wake_read)
            self._reap()
            now = time.monotonic()
            if now - last_owner_check > 1.0:
                last_owner_check = now
                if not _owner_alive(self.owner_pid, self.owner_started):
                    print("owner gone: stopping", flush=True)
                    return

    def _start_child(self, conn: socket.socket, listener: socket.socket, wake_read: int) -> None:
        conn.settimeout(30)
        try:
            header, fds, _, _ = socket.recv_fds(conn, 8, len(DESCRIPTORS))
            (size,) = struct.unpack("!Q", header)
            request = json.loads(_recv_exact(conn, size))
        except (OSError, ValueError, ConnectionError, struct.error) as exc:
            print(f"bad request: {exc}", flush=True)
            conn.close()
            return
        try:
            t0 = time.perf_counter()
            if self.preloader.workload(list(request.get("preload") or [])):
                gc.collect()
                gc.freeze()
                self.facts["startup_s"] = round(
                    self.facts["startup_s"] + time.perf_counter() - t0, 4
                )
        except RuntimeError as exc:  # the new imports left CUDA unusable in a fork: stop
            _send_line(conn, {"error": str(exc)})
            conn.close()
            for fd in fds:
                os.close(fd)
            raise
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # the cell's child: never returns
            listener.close()
            conn.close()
            for other in self.children.values():
                other.close()
            _become_child(request, dict(zip(request["descriptors"], fds, strict=True)), wake_read)
        for fd in fds:
            os.close(fd)
        self.served += 1
        self.children[pid] = conn
        server = {**self.facts, "preimported": self.preloader.facts(), "cells_served": self.served}
        _send_line(conn, {"pid": pid, "server": server})

    def _reap(self) -> None:
        while self.children:
            try:
                pid, status, usage = os.wait4(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            conn = self.children.pop(pid, None)
            if conn is not None:
                _send_line(conn, {"status": status, "maxrss": usage.ru_maxrss * 1024})
                conn.close()


def _become_child(request: dict, fds: dict[str, int], wake_read: int) -> None:
    """In the forked child: take the launcher's descriptors, environment and folder,
    then run trainbench.launch.child's main as ``python -m trainbench.launch.child`` would."""
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        os.close(wake_read)
        os.setsid()  # its own session and process group, as start_new_session gives
        if sys.platform.startswith("linux"):
            import ctypes

            from trainbench.launch.cell_lock import PR_SET_PDEATHSIG

            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(fds["stdout"], 1)
        os.dup2(fds["stderr"], 2)
        for fd in (null, fds["stdout"], fds["stderr"]):
            os.close(fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        os.environ["TRAINBENCH_WATCHDOG_FD"] = str(fds["watchdog"])
        sys.path[0] = request["cwd"]
        sys.argv = ["-m", *request["argv"]]
        from trainbench.launch import child

        code = child.main_forked(request["argv"][1:])
    except BaseException:
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--socket", required=True)
    parser.add_argument("--owner", type=int, required=True)
    parser.add_argument("--owner-started", type=float, default=None)
    args = parser.parse_args(argv)
    Server(args.socket, args.owner, args.owner_started).serve()
    return 0


if __name__ == "__main__":
    sys.exit(main())
