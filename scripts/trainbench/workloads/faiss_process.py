"""FAISS in a process of its own: one OpenMP runtime per process on every platform.

On a Mac, torch's wheel ships its own ``libomp.dylib`` and faiss-cpu's wheel a second
copy. Once torch has started its OpenMP, the first FAISS call that starts the other
copy stops the process: LLVM's runtime prints "OMP: Error #15: Initializing
libomp.dylib, but found libomp.dylib already initialized" and aborts (faiss PR #2482,
faiss-wheels issue #40). ``KMP_DUPLICATE_LIB_OK=TRUE`` would let it run, but the same
message warns that this "may cause crashes or silently produce incorrect results". On
Linux both wheels use GNU OpenMP and never meet the error, which is why it went unseen.

So a cell never imports FAISS. :class:`FaissProcess` starts this file as a script
(``python -P faiss_process.py``: numpy and faiss only, never torch, never trainbench)
and sends it numpy arrays over a pipe; the worker searches with its own OpenMP runtime
and its own thread count, and refuses to serve if torch was imported into it. The
same path runs on Linux, so every test of the workload exercises it.

The worker's OpenMP threads wait passively (``OMP_WAIT_POLICY=PASSIVE``, set whatever
the cell's environment says): by default GNU OpenMP spins each idle thread for about
300,000 iterations (milliseconds) after a parallel region, so after a search on 16
threads 15 spinning threads would share the cores with the first timed steps that
follow it. Passive, they sleep as soon as the search ends.

Protocol: pickled ``(op, args)`` requests on the worker's stdin; pickled ``("ok",
result)`` or ``("error", text)`` answers on a private copy of its stdout (fd 1 itself
is pointed at stderr, so nothing FAISS prints can corrupt an answer). The worker ends
at end of input: when its cell exits, however it exits, the pipe closes and so does
the worker.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pickle
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

WORKER_SCRIPT = Path(__file__).resolve()
# Modules that bring an OpenMP runtime of their own into a process (torch's libomp on a
# Mac, MKL's libiomp5): the worker refuses to serve beside any of them.
OTHER_RUNTIME_MODULES = ("torch",)
# The worker's OpenMP wait policy (module docstring): idle threads sleep, never spin.
WAIT_POLICY = "PASSIVE"


class FaissProcessError(RuntimeError):
    """The FAISS process could not start, answer, or died (its stderr is the cell's)."""


# ----------------------------------------------------------------------------- worker


def _search(faiss: Any, queries: np.ndarray, docs: np.ndarray, k: int) -> tuple:
    """Exact inner-product search (``faiss.IndexFlatIP``): (scores, int64 ids)."""
    index = faiss.IndexFlatIP(docs.shape[1])
    index.add(docs)
    scores, ids = index.search(queries, k)
    return scores, ids.astype(np.int64)


def _set_threads(faiss: Any, threads: int) -> int:
    """``faiss.omp_set_num_threads``; the count in force after it."""
    faiss.omp_set_num_threads(int(threads))
    return int(faiss.omp_get_max_threads())


OPERATIONS = {"search": _search, "set_threads": _set_threads}


def _send(out: BinaryIO, message: tuple) -> None:
    pickle.dump(message, out, protocol=pickle.HIGHEST_PROTOCOL)
    out.flush()


def serve(requests: BinaryIO, answers: BinaryIO) -> int:
    """The worker's loop: a ready message with the facts of this process, then one
    answer per request until end of input. Returns the exit status."""
    others = [name for name in OTHER_RUNTIME_MODULES if name in sys.modules]
    if others:
        _send(answers, ("error", f"{', '.join(others)} imported into the FAISS process"))
        return 1
    try:
        import faiss
    except ImportError as exc:
        _send(answers, ("import_error", str(exc), getattr(exc, "name", None)))
        return 1
    facts = {
        "faiss_version": faiss.__version__,
        "pid": os.getpid(),
        "threads": int(faiss.omp_get_max_threads()),
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
        "modules_with_an_openmp_runtime": [m for m in OTHER_RUNTIME_MODULES if m in sys.modules],
    }
    _send(answers, ("ready", facts))
    while True:
        try:
            op, args = pickle.load(requests)
        except EOFError:
            return 0
        try:
            _send(answers, ("ok", OPERATIONS[op](faiss, *args)))
        except Exception:  # noqa: BLE001 (the answer carries it; the cell raises it)
            _send(answers, ("error", traceback.format_exc(limit=4)))


def main() -> int:
    answers = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # stray prints go to stderr
    return serve(sys.stdin.buffer, answers)


# ----------------------------------------------------------------------------- client


class FaissProcess:
    """The cell's side: starts the worker, waits for it to be ready, and hands it
    searches. ``facts`` holds what the worker reported about itself."""

    def __init__(self, python: str = sys.executable, env: dict | None = None) -> None:
        t0 = time.perf_counter()
        self.proc = subprocess.Popen(
            [python, "-P", str(WORKER_SCRIPT)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env={**(os.environ if env is None else env), "OMP_WAIT_POLICY": WAIT_POLICY},
        )
        self.owner = os.getpid()
        answer = self._receive()
        if answer[0] == "import_error":
            self.close()
            raise ModuleNotFoundError(answer[1], name=answer[2])
        self.facts: dict = self._result(answer)
        # From Popen to ready: the interpreter's start and numpy's and faiss's imports.
        self.facts["start_seconds"] = time.perf_counter() - t0

    def _receive(self) -> tuple:
        try:
            return pickle.load(self.proc.stdout)
        except (EOFError, pickle.UnpicklingError) as exc:
            status = self.proc.wait()
            raise FaissProcessError(
                f"the FAISS process (pid {self.proc.pid}) ended with {_status_text(status)} "
                "without answering; its stderr is above"
            ) from exc

    def _result(self, answer: tuple) -> Any:
        if answer[0] in ("ok", "ready"):
            return answer[1]
        raise FaissProcessError(f"the FAISS process failed: {answer[1]}")

    def call(self, op: str, *args: Any) -> Any:
        """One request and its answer."""
        if self.proc.poll() is not None:
            raise FaissProcessError(
                f"the FAISS process (pid {self.proc.pid}) has ended "
                f"({_status_text(self.proc.returncode)})"
            )
        with contextlib.suppress(BrokenPipeError):  # the worker died: _receive says how
            pickle.dump((op, args), self.proc.stdin, protocol=pickle.HIGHEST_PROTOCOL)
            self.proc.stdin.flush()
        return self._result(self._receive())

    def search(self, queries: np.ndarray, docs: np.ndarray, k: int) -> tuple:
        """Exact inner-product search of float32 C-contiguous (n, dim) arrays."""
        return self.call("search", queries, docs, int(k))

    def warm_up(self, dim: int, k: int, queries: int = 256, docs: int = 1024) -> float:
        """One search of random unit vectors of ``dim`` (``k`` nearest of ``docs``) at
        the thread count in force: the OpenMP team, the BLAS kernels' code (read from
        disk where the page cache is cold) and the worker's buffers meet this process
        before any search that counts. Its seconds, also kept in ``facts``."""
        rng = np.random.default_rng(0)
        q = rng.standard_normal((queries, dim), dtype=np.float32)
        d = rng.standard_normal((docs, dim), dtype=np.float32)
        t0 = time.perf_counter()
        self.search(q, d, min(int(k), docs))
        self.facts["warmup_search_seconds"] = time.perf_counter() - t0
        return self.facts["warmup_search_seconds"]

    def set_threads(self, threads: int) -> int:
        """The worker's OpenMP thread count; the count in force after it."""
        self.facts["threads"] = self.call("set_threads", int(threads))
        return self.facts["threads"]

    def close(self) -> None:
        """End of input, then wait: the worker exits on its own."""
        if self.proc.poll() is None:
            for stream in (self.proc.stdin, self.proc.stdout):
                with contextlib.suppress(OSError):
                    stream.close()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def _status_text(status: int | None) -> str:
    if status is not None and status < 0:
        try:
            return f"signal {signal.Signals(-status).name}"
        except ValueError:
            return f"signal {-status}"
    return f"exit status {status}"


_SHARED: FaissProcess | None = None


def faiss_process() -> FaissProcess:
    """This process's FAISS process, started on first use (a forked child starts its
    own: a worker's pipes belong to the process that started it)."""
    global _SHARED
    if _SHARED is None or _SHARED.owner != os.getpid() or _SHARED.proc.poll() is not None:
        _SHARED = FaissProcess()
    return _SHARED


@atexit.register
def _close_shared() -> None:
    if _SHARED is not None and _SHARED.owner == os.getpid():
        _SHARED.close()


if __name__ == "__main__":
    sys.exit(main())
