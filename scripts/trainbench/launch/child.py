"""Runs one cell inside its own process (started by the launcher as
``python -X faulthandler -m trainbench.launch.child SPEC RESULT``).

Writes RESULT atomically: ``unavailable`` with the reason, ``ok`` with the
workload's result, or ``failed`` with the exception. A crash (abort, segfault,
kill) writes nothing; the launcher then classifies the death itself.
"""

from __future__ import annotations

import atexit
import faulthandler
import json
import os
import signal
import sys
import time
import traceback

# The moment the interpreter reached this module (after the standard library above,
# before torch): the child's first mark (trainbench.measure.wall_time).
MODULE_REACHED = time.perf_counter()


def _exception_info(exc: BaseException) -> dict:
    return {
        "exception_type": type(exc).__name__,
        "exception_mro": [cls.__name__ for cls in type(exc).__mro__],
        "message": str(exc)[:4000],
        "traceback": "".join(traceback.format_exception(exc))[-8000:],
    }


def run(spec: dict, attempt: int, facts: dict) -> dict:
    """Run the cell. ``facts`` collects the environment (torch version, packages,
    the device's name) as soon as each is known, so a failed run still has them."""
    openmp_switch_at_start = os.environ.get("KMP_DUPLICATE_LIB_OK")  # before any library
    import torch
    from trainbench.launch.dispatch import run_workload
    from trainbench.launch.environment import package_versions
    from trainbench.launch.openmp_runtimes import openmp_in_force
    from trainbench.measure import wall_time
    from trainbench.measure.canary import run_canary
    from trainbench.measure.context import DeviceUnavailable, make_context
    from trainbench.measure.numeric_fault import fault_context
    from trainbench.measure.trackers import capture_warnings

    t_start = time.perf_counter()
    if spec.get("mps_emulator") is not None:  # make mps-ready: MPS's rules, CPU compute
        from trainbench.measure.mps_emulator import install

        facts["mps_emulator"] = install(spec["mps_emulator"]).facts
    facts.update(packages=package_versions(), torch_version=torch.__version__)
    wall_time.mark("imports")
    try:
        ctx = make_context(spec, attempt, facts)
    except DeviceUnavailable as exc:
        wall_time.mark("device_ready")  # found missing: its initialisation is over
        return {"status": "unavailable", "reason": str(exc), "child_environment": facts}
    wall_time.mark("device_ready")
    # The test fault silent_numeric_error (nothing otherwise) spans the canary,
    # training and evaluation: the device's math is wrong for the whole run.
    with fault_context(ctx):
        # Before training and outside every timed region; never raises (an error is
        # recorded). A float64 reference (trainbench.launch.reference) has no canary.
        with wall_time.span("canary"):
            numerics = None if spec.get("reference") else run_canary(ctx)
        with capture_warnings() as warning_log:
            ctx.warnings = warning_log
            try:
                result = run_workload(ctx)
            except DeviceUnavailable as exc:  # e.g. PrecisionUnavailable: no kernel
                return {"status": "unavailable", "reason": str(exc), "child_environment": facts}
    settings_in_force = ctx.settings_in_force
    # Threads can change during the run (set by a library); record the final value too.
    settings_in_force["torch_threads_at_end"] = torch.get_num_threads()
    settings_in_force["amp"] = ctx.amp.as_dict()
    settings_in_force["dataloader"] = ctx.device.dataloader_kwargs()
    settings_in_force["openmp"] = openmp_in_force(openmp_switch_at_start)
    settings_in_force["cpu_placement"] = facts.get("cpu_placement")
    return {
        "status": "ok",
        "result": result,
        "settings_in_force": settings_in_force,
        "warnings": warning_log.as_dict(),
        "fallback": bool(warning_log.fallback_ops),
        "numerics": numerics,
        "child_environment": facts,
        "child_seconds": time.perf_counter() - t_start,
    }


def watch_launcher() -> None:
    """Stop this cell's whole process group when the launcher is gone: a daemon
    thread reads the pipe the launcher holds open; end-of-file means it died (the
    portable twin of Linux's PR_SET_PDEATHSIG, which the launcher also sets)."""
    import threading

    from trainbench.launch.cell_lock import WATCHDOG_FD_VARIABLE

    fd = os.environ.get(WATCHDOG_FD_VARIABLE)
    if not fd:
        return

    def watch() -> None:
        try:
            while os.read(int(fd), 1):
                pass
        except OSError:
            pass
        os.killpg(os.getpgrp(), signal.SIGKILL)

    threading.Thread(target=watch, name="launcher-watchdog", daemon=True).start()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    spec_path, result_path = argv[0], argv[1]
    attempt = int(argv[2]) if len(argv) > 2 else 1
    # A hang killed by the launcher's SIGTERM leaves a stack trace in the log.
    faulthandler.enable()
    faulthandler.register(signal.SIGTERM, chain=True)
    with open(spec_path) as fh:
        spec = json.load(fh)
    from trainbench.measure.placement import pin_cell

    # Before this process starts any thread: every later one inherits the CPUs.
    facts: dict = {"cpu_placement": pin_cell(spec)}
    watch_launcher()
    from trainbench.common.records import atomic_write_json
    from trainbench.measure import wall_time

    wall_time.open_marks(result_path + wall_time.MARKS_SUFFIX)
    wall_time.mark("child_start", MODULE_REACHED)
    try:
        outcome = run(spec, attempt, facts)
        code = 0
    except BaseException as exc:  # recorded, never swallowed: the launcher classifies it
        traceback.print_exc()
        outcome = {"status": "failed", **_exception_info(exc), "child_environment": facts}
        code = 1
    if spec.get("mps_emulator") is not None:
        from trainbench.measure.mps_emulator import installed

        if installed() is not None:
            installed().refresh()  # the record's facts as the run left them
    wall_time.mark("run_end")
    atomic_write_json(result_path, outcome)
    wall_time.mark("result_written")
    return code


def main_forked(argv: list[str]) -> int:
    """:func:`main` in a child forked by :mod:`trainbench.launch.fork_server`: its first mark
    is the fork, not this module's import (done in the server long before), and the
    exit handlers run as at a normal exit (DataLoader workers are stopped)."""
    global MODULE_REACHED
    MODULE_REACHED = time.perf_counter()
    code = main(argv)
    atexit._run_exitfuncs()
    return code


def _skip_teardown(exit_code: list[int]) -> None:
    """The last exit handler: flush and leave without the interpreter's teardown.

    With torch loaded, freeing every module and object at exit takes ~0.45 s of a
    2-core machine's time, after the result is already written (and fsynced). By
    the time this runs, threads have been joined and every other exit handler has
    run (multiprocessing has stopped DataLoader workers), so nothing is lost."""
    if exit_code:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        os._exit(exit_code[0])


if __name__ == "__main__":
    # Registered before torch and multiprocessing add theirs, so it runs after them.
    code: list[int] = []
    atexit.register(_skip_teardown, code)
    code.append(main())
    sys.exit(code[0])
