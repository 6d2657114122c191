"""Runs one cell in a child process and turns whatever happens into a record.

The parent never imports torch: a crash, hang or abort in the child cannot take
the workflow down. Each attempt gets a timeout; a death is classified from the
child's own report or, for crashes, from the signal and stderr (waiting on the
child and stopping it: :mod:`.child_process`). Retries happen here so every attempt
is counted, and the record is written atomically. A failed cell is a result: the
record says ``failed`` and the rule succeeds.

A device found unavailable by a child is remembered for the rest of the same
Snakemake run (``results/availability/``): its other cells get the same
``unavailable`` record, reason and environment without starting a child that would
import torch only to find the device missing again.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from trainbench.common.code_identity import code_identity
from trainbench.common.records import SCHEMA_VERSION, write_record
from trainbench.config import FAULTS_ENV
from trainbench.config.registry import WORKLOADS
from trainbench.launch import fork_client
from trainbench.launch.availability import AvailabilityMemo, _snakemake_run
from trainbench.launch.cell_lock import WATCHDOG_FD_VARIABLE, CellLock, child_guard
from trainbench.launch.child_process import SpawnedChild, forward_stop_signals, wait_for_child
from trainbench.launch.classify import classify, find_silent_corruption, signal_name
from trainbench.launch.environment import (
    BEHAVIOUR_VARIABLES,
    INHERITED_THREAD_VARIABLES,
    CellEnvironment,
    cell_environment,
    git_commit,
    host_facts,
)
from trainbench.measure import wall_time
from trainbench.measure.placement import LauncherPlacement


@dataclass
class ChildRun:
    """What one attempt's child left: how it ended, its output, its result file."""

    returncode: int
    timed_out: bool
    peak_rss_bytes: int | None
    started: float  # the Unix time the child was started
    duration: float  # seconds, perf_counter
    stdout: str
    stderr: str
    result: dict | None  # the child's result.json; None when absent, unreadable or timed out
    marks: dict  # the child's wall-time marks, seconds since Popen (trainbench.measure.wall_time)
    start: dict  # how the child started: method (fork_server or spawn), why, the server


def run_attempt(
    spec: dict, attempt: int, log, lock: CellLock | None = None, *, environment: CellEnvironment
) -> dict:
    """One attempt in a fresh child, started with the cell's ``environment``. Returns
    the attempt's outcome (status, error...).

    The child holds the cell's lock with the launcher and dies with the launcher:
    the kernel kills it when the launcher dies (Linux), and its watchdog thread
    stops its process group when the pipe from the launcher closes (everywhere)."""
    # The attempt's files live in the cell's own folder (cleaned by the next
    # launcher of the cell if this one is killed), else in the system's temp folder.
    folder = lock.path.parent if lock is not None else None
    with tempfile.TemporaryDirectory(prefix=".attempt-", dir=folder) as tmp:
        run = run_child(spec, attempt, Path(tmp), lock, environment=environment)
        _log_attempt(log, attempt, run)
    tail = "\n".join(run.stderr.splitlines()[-int(spec["launcher"]["stderr_tail_lines"]) :])
    outcome = _outcome_facts(attempt, run)
    child = run.result
    if child is not None and child.get("status") in ("ok", "unavailable"):
        return _finished_outcome(outcome, child, run.stderr, tail)
    return _failed_outcome(outcome, spec, child or {}, run, tail)


def start_method(spec: dict) -> tuple[str, dict | None, str]:
    """How this attempt's child starts: ``("fork_server", owner, why)`` or
    ``("spawn", None, why)``. ``auto`` forks from a pre-imported server on Linux under
    a local Snakemake run (the server lives as long as that run); a cluster job, a
    launcher outside Snakemake, macOS and Windows spawn (trainbench.launch.fork_server)."""
    asked = spec["launcher"].get("start_method", "auto")
    if asked == "spawn":
        return "spawn", None, "launcher.start_method is spawn"
    if not sys.platform.startswith("linux"):
        return "spawn", None, f"fork is unsafe or unavailable on {sys.platform}"
    owner = _snakemake_run()
    if asked == "auto":
        if "SLURM_JOB_ID" in os.environ:
            return "spawn", None, "a cluster job runs one cell: no later cell shares a server"
        if owner is None:
            return "spawn", None, "not under a local Snakemake run: no run to share a server"
        return "fork_server", owner, "auto: Linux, under a local Snakemake run"
    if owner is None:  # asked for by name outside Snakemake: the server lives with us
        import psutil

        owner = {"pid": os.getpid(), "started": psutil.Process().create_time()}
    return "fork_server", owner, "launcher.start_method is fork_server"


def preload_modules(spec: dict) -> list[str]:
    """The bundled workload module the run's fork server imports before it forks this
    cell (once per run: the cells of that workload then share its imports), or none
    for a workload of your own. A cell's spec names its workload in ``cell``."""
    info = WORKLOADS.get((spec.get("cell") or {}).get("workload", ""))
    return [info.module] if info is not None and info.bundled else []


def _start_child(spec: dict, env: dict, argv: list[str], fds: dict[str, int], lock):
    """The attempt's child, forked by the run's server or spawned; with how it
    started (the record's ``start``)."""
    method, owner, why = start_method(spec)
    if method == "fork_server":
        preload = preload_modules(spec)
        try:
            try:
                path = fork_client.ensure_server(env, owner)
                child = fork_client.fork_child(path, argv, env, fds, preload)
            except fork_client.StaleSocket:
                # A socket whose server is gone (killed): start a fresh server, once.
                with contextlib.suppress(OSError):
                    fork_client.socket_path(env, owner).unlink()
                path = fork_client.ensure_server(env, owner)
                child = fork_client.fork_child(path, argv, env, fds, preload)
            return child, {"method": "fork_server", "why": why, "server": child.server}
        except fork_client.ForkServerUnavailable as exc:
            why = f"fork server unavailable, spawned instead: {exc}"
    proc = subprocess.Popen(
        [sys.executable, "-X", "faulthandler", "-m", *argv],
        stdout=fds["stdout"],
        stderr=fds["stderr"],
        env=env,
        start_new_session=True,
        stdin=subprocess.DEVNULL,
        pass_fds=tuple(fd for name, fd in fds.items() if name in ("watchdog", "lock")),
        preexec_fn=child_guard(os.getpid()),
    )
    return SpawnedChild(proc), {"method": "spawn", "why": why}


def run_child(
    spec: dict,
    attempt: int,
    folder: Path,
    lock: CellLock | None = None,
    *,
    environment: CellEnvironment,
) -> ChildRun:
    """Start ``python -m trainbench.launch.child`` on ``spec`` in its own process group
    (forked by the run's pre-imported server, or spawned) with the cell's
    ``environment``, the attempt's files in ``folder``, and wait for it (the launcher's
    timeout)."""
    watch_read, watch_write = os.pipe()
    env = {**environment.variables, WATCHDOG_FD_VARIABLE: str(watch_read)}
    spec_path, result_path = folder / "spec.json", folder / "result.json"
    stdout_path, stderr_path = folder / "stdout.txt", folder / "stderr.txt"
    spec_path.write_text(json.dumps(spec))
    argv = ["trainbench.launch.child", str(spec_path), str(result_path), str(attempt)]
    started = time.time()
    # The Popen mark, the clock of trainbench.measure.wall_time: a fork server's start-up, when
    # this attempt waits for one, counts with its process start and imports.
    t0 = time.perf_counter()
    with open(stdout_path, "wb") as out, open(stderr_path, "wb") as err:
        fds = {"stdout": out.fileno(), "stderr": err.fileno(), "watchdog": watch_read}
        if lock is not None and lock.fd is not None:
            fds["lock"] = lock.fd
        # The child chooses its CPUs from the mask it inherits: this launcher's own.
        placement = LauncherPlacement(spec)
        try:
            child, start = _start_child(spec, env, argv, fds, lock)
        finally:
            os.close(watch_read)
        # Until the child existed: a server's start-up when this attempt waited for it.
        start["wait_s"] = time.perf_counter() - t0
        if lock is not None:
            lock.set_child(child.pid)
        placement.while_cell_runs()  # off the cell's CPUs while it is timed
        try:
            with forward_stop_signals(child):
                returncode, timed_out, child_rss = wait_for_child(
                    child, float(spec["launcher"]["timeout_s"])
                )
        finally:
            placement.restore()
            os.close(watch_write)
    duration = time.perf_counter() - t0
    return ChildRun(
        returncode=returncode,
        timed_out=timed_out,
        peak_rss_bytes=child_rss,
        started=started,
        duration=duration,
        stdout=stdout_path.read_text(errors="replace") if stdout_path.exists() else "",
        stderr=stderr_path.read_text(errors="replace") if stderr_path.exists() else "",
        result=_read_result(result_path) if not timed_out else None,
        marks=wall_time.read_marks(str(result_path) + wall_time.MARKS_SUFFIX, t0),
        start=start,
    )


def _read_result(path: Path) -> dict | None:
    """The child's result file; None when it wrote none or an unreadable one."""
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError:
        return None


def _log_attempt(log, attempt: int, run: ChildRun) -> None:
    """The attempt's header line, then the child's stdout and stderr, into the cell's log."""
    log.write(
        f"----- attempt {attempt}: exit {run.returncode}{' (timed out)' if run.timed_out else ''}, {run.duration:.1f}s -----\n"
    )
    if run.stdout:
        log.write("[stdout]\n" + run.stdout + ("\n" if not run.stdout.endswith("\n") else ""))
    if run.stderr:
        log.write("[stderr]\n" + run.stderr + ("\n" if not run.stderr.endswith("\n") else ""))
    log.flush()


def _outcome_facts(attempt: int, run: ChildRun) -> dict:
    """The facts of every attempt's outcome: when, how long, how the child ended."""
    return {
        "attempt": attempt,
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(run.started)),
        "started_unix": run.started,
        "ended_unix": run.started + run.duration,
        "duration_s": run.duration,
        "returncode": run.returncode,
        "signal": signal_name(run.returncode),
        "timed_out": run.timed_out,
        "child_peak_rss_bytes": run.peak_rss_bytes,
        "start": run.start,
        "wall_time": wall_time.breakdown(run.marks, run.duration, (run.result or {}).get("result")),
    }


def _finished_outcome(outcome: dict, child: dict, stderr: str, tail: str) -> dict:
    """A child that reported ``ok`` or ``unavailable``: its status, unless the backend
    reported silent corruption on stderr during an ``ok`` run (then ``failed``)."""
    outcome["status"] = child["status"]
    outcome["child"] = child
    corruption = find_silent_corruption(stderr) if child["status"] == "ok" else None
    if corruption:
        # The run finished, but the backend said its results may be garbage.
        outcome["status"] = "failed"
        outcome["error"] = {
            "class": "accelerator_error",
            "exception": None,
            "message": f"silent accelerator error reported on stderr while training went on: {corruption!r}",
            "silent": True,
            "stderr_tail": tail,
        }
    return outcome


def _failed_outcome(outcome: dict, spec: dict, info: dict, run: ChildRun, tail: str) -> dict:
    """A failed attempt, classified from the child's report (``info``, empty when it
    wrote none) or from its signal, exit code and stderr."""
    result = classify(
        exception_type=info.get("exception_type"),
        exception_mro=info.get("exception_mro"),
        message=info.get("message", ""),
        returncode=run.returncode,
        timed_out=run.timed_out,
        stderr=run.stderr,
        nan_loss="NonFiniteLossError" in (info.get("exception_mro") or []),
    )
    message = _failure_message(spec, info, run)
    outcome["status"] = "failed"
    # What the child knew before it failed (torch version, device name), if it said.
    outcome["child_environment"] = info.get("child_environment")
    outcome["error"] = {
        "class": result.error_class,
        "exception": info.get("exception_type"),
        "message": message[:4000],
        "hint": result.hint,
        "traceback": info.get("traceback"),
        "stderr_tail": tail,
    }
    return outcome


def _failure_message(spec: dict, info: dict, run: ChildRun) -> str:
    """What went wrong, in one line: the timeout, the child's exception, a signal or an exit code."""
    if run.timed_out:
        return f"no result after the {spec['launcher']['timeout_s']} s timeout; the process group was killed"
    if info:
        return f"{info.get('exception_type')}: {info.get('message')}"
    if run.returncode < 0:
        return f"child killed by {signal_name(run.returncode)} (no Python exception: a native crash or kill)"
    return f"child exited with code {run.returncode} without writing a result"


def run_cell(spec: dict, output: str | os.PathLike, log_path: str | os.PathLike) -> dict:
    """Run every attempt of one cell and write its record. Never raises for a
    failed run: the record says what happened."""
    entered = time.perf_counter()
    spec = dict(spec)
    spec["faults_allowed"] = bool(spec.get("launcher", {}).get("allow_fault_injection")) or (
        os.environ.get(FAULTS_ENV) == "1"
    )
    # Once per cell, handed on to the memo, every attempt and the record.
    environment = cell_environment(spec)
    Path(log_path).parent.mkdir(parents=True, exist_ok=True)
    memo = AvailabilityMemo.for_cell(spec, output, environment)
    with open(log_path, "w") as log, CellLock(Path(output).parent, log) as lock:
        log.write(f"trainbench cell {json.dumps(spec['cell'])}\n")
        known = memo.recall() if memo else None
        if known:
            attempts = [known]
            log.write(
                f"{spec['backend']} unavailable, as found by cell {known['availability']['cell']} "
                f"at {known['availability']['at']} in this Snakemake run; no child started: "
                f"{known['child']['reason']}\n"
            )
        else:
            attempts = run_attempts(spec, log, lock, environment=environment)
            if memo and attempts[-1]["status"] == "unavailable":
                memo.remember(attempts[-1])
        record = build_record(spec, attempts, environment)
        record["wall_time"]["launcher"] = wall_time.launcher_facts(entered, attempts)
        log.write(f"record status: {record['status']}\n")
    write_record(output, record)
    return record


def run_attempts(
    spec: dict, log, lock: CellLock | None = None, *, environment: CellEnvironment
) -> list[dict]:
    """Attempts until one does not fail, its failure class is not retried, or
    launcher.max_attempts is reached; each child with the cell's ``environment``."""
    max_attempts = int(spec["launcher"]["max_attempts"])
    retry_on = set(spec["launcher"]["retry_on"])
    attempts: list[dict] = []
    for attempt in range(1, max_attempts + 1):
        outcome = run_attempt(spec, attempt, log, lock, environment=environment)
        attempts.append(outcome)
        if outcome["status"] != "failed":
            break
        error_class = outcome["error"]["class"]
        if error_class not in retry_on:
            log.write(f"not retrying: class {error_class} is not in launcher.retry_on\n")
            break
        if attempt < max_attempts:
            log.write(f"attempt {attempt} failed ({error_class}); retrying\n")
    return attempts


def build_record(spec: dict, attempts: list[dict], cell_env: CellEnvironment) -> dict:
    """The cell's record from its attempts; ``cell_env``: what its children started with."""
    overrides = cell_env.overrides
    final = attempts[-1]
    child = final.get("child") or {}
    environment = host_facts()
    environment.update(child.get("child_environment") or final.get("child_environment") or {})
    environment["git_commit"] = git_commit()
    # The code that ran, named even without .git: version, source fingerprint, commit.
    environment["code"] = code_identity(environment["git_commit"])
    environment["config_hash"] = spec.get("config_hash")
    environment["seed"] = spec.get("seed")
    environment["run_seed"] = spec.get("run_seed")
    environment["env_overrides"] = overrides
    child_env = cell_env.variables
    environment["behaviour_variables"] = {
        k: child_env[k] for k in BEHAVIOUR_VARIABLES if k in child_env
    }
    environment["thread_caps"] = cell_env.thread_caps
    environment["inherited_thread_variables_removed"] = {
        k: os.environ[k]
        for k in INHERITED_THREAD_VARIABLES
        if k in os.environ and k not in overrides
    }
    backend = spec["backend"]
    label = spec["cell"]["device"]
    if child.get("fallback"):
        label = f"{label}+cpu-fallback"
    slim_attempts = [
        {k: v for k, v in a.items() if k not in ("child", "child_environment", "wall_time")}
        | {"status": a["status"], "wall_time": wall_time.slim(a.get("wall_time"))}
        for a in attempts
    ]
    for a in slim_attempts:
        if a.get("error"):
            a["error"] = {k: v for k, v in a["error"].items() if k != "traceback"}
    record = {
        "schema_version": SCHEMA_VERSION,
        "status": final["status"],
        "cell": spec["cell"],
        "backend": backend,
        "device_label": label,
        "attempts": slim_attempts,
        "environment": environment,
        "spec": {k: v for k, v in spec.items() if k != "cell"},
        "settings_in_force": child.get("settings_in_force"),
        "warnings": child.get("warnings"),
        "result": child.get("result") if final["status"] != "unavailable" else None,
        "reason": child.get("reason") if final["status"] == "unavailable" else None,
        "error": final.get("error") if final["status"] == "failed" else None,
        "host_peak_rss_bytes": final.get("child_peak_rss_bytes"),
        # The numerical canary (trainbench.measure.canary), run before training; absent when the
        # cell never reached its device or the child died.
        "numerics": child.get("numerics"),
        # Where the final attempt's time went (trainbench.measure.wall_time; its own copy: the
        # launcher's facts are added to it).
        "wall_time": dict(final.get("wall_time") or wall_time.without_child("no attempt")),
    }
    return record
