"""Where a cell's wall time goes: marks on one clock, taken by the launcher and its
child, and the breakdown of an attempt's duration into named phases (the record's
``wall_time``; docs/statistics.md section 1).

The clock is ``time.perf_counter``: ``CLOCK_MONOTONIC`` on Linux,
``mach_absolute_time`` on macOS, ``QueryPerformanceCounter`` on Windows. Each is
system-wide, so a mark the child takes compares with the launcher's ``Popen`` and
exit marks (the attempt's ``duration_s`` is read on the same clock).

The child appends one line per mark, ``name seconds``, to ``RESULT.marks`` beside its
result file, each line written through at once: a child that crashes or is killed
leaves the marks it reached. The launcher reads them after the child has exited and
:func:`breakdown` turns them (with the child's result) into phases that add up to the
attempt's duration, the residual named ``unattributed``.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Iterator, Mapping
from typing import IO

from trainbench.common.vocabulary import MEASUREMENT, PHASES

CLOCK = (
    "time.perf_counter: CLOCK_MONOTONIC on Linux, mach_absolute_time on macOS, "
    "QueryPerformanceCounter on Windows; system-wide, shared by the launcher and its child"
)
MARKS_SUFFIX = ".marks"

# The training loop (run_training, a microbenchmark's run, a float64 reference), split
# by :func:`loop_phases` into the measurement phases, analysis and bookkeeping.
LOOP = "training_loop"
# (phase, start mark, end mark): the time between two marks. "popen" and "exit" are the
# launcher's; the workload's own import counts with the imports.
SEGMENTS = (
    ("process_start_and_imports", "popen", "imports"),
    ("device_initialisation", "imports", "device_ready"),
    ("canary", "canary_start", "canary_end"),
    ("process_start_and_imports", "workload_start", "entry_loaded"),
    ("data_and_model_setup", "entry_loaded", "parts_built"),
    (LOOP, "loop_start", "loop_end"),
    ("writing", "run_end", "result_written"),
    ("exit", "result_written", "exit"),
)
METHOD = (
    "marks on one clock (see clock) at the launcher's Popen and the child's exit, and in "
    "the child: module reached (child_start), imports done, device ready, canary, workload "
    "entry imported, parts built, training loop, result() (analysis), result written; "
    "a phase is the time between its marks. The training loop is split by the result's "
    "own step and pass timings: warm-up steps (step 0 included), window steps of the "
    "configured epochs, extension steps, evaluation passes, the diagnostic pass after them "
    "(step_breakdown), evaluation parity after that (eval_parity); training_bookkeeping is the "
    "rest of the loop (tracker set-up and idle power, step 0's checks, region edges, "
    "between-epoch work such as hard-negative mining, evaluation scoring, the "
    "workload's finish). unattributed: the attempt's duration not inside any phase "
    "(gaps between marks; after a failure, the phase interrupted and every one not reached)"
)

_marks_file: IO[str] | None = None


# -- the child: taking marks ------------------------------------------------------------


def open_marks(path: str) -> None:
    """Record this process's marks in ``path`` (line-buffered: each mark is written
    through at once). Until this is called, :func:`mark` does nothing."""
    global _marks_file
    _marks_file = open(path, "a", buffering=1)  # noqa: SIM115 - open for the process's life


def mark(name: str, at: float | None = None) -> None:
    """Mark ``name`` now (or at ``at``, a perf_counter reading)."""
    if _marks_file is not None:
        _marks_file.write(f"{name} {time.perf_counter() if at is None else at!r}\n")


@contextlib.contextmanager
def span(name: str) -> Iterator[None]:
    """``name_start`` before the block and ``name_end`` after it (not on an exception:
    the phase was interrupted)."""
    mark(f"{name}_start")
    yield
    mark(f"{name}_end")


# -- the launcher: reading marks and breaking the attempt down ------------------------


def read_marks(path: str, origin: float) -> dict[str, float]:
    """The marks in ``path`` as seconds since ``origin`` (the launcher's Popen mark);
    a partial last line (a child killed mid-write) is left out; empty without a file."""
    try:
        with open(path) as fh:
            lines = fh.read().splitlines()
    except OSError:
        return {}
    marks: dict[str, float] = {}
    for line in lines:
        name, _, value = line.partition(" ")
        try:
            marks[name] = float(value) - origin
        except ValueError:
            continue
    return marks


def measured_phases(result: Mapping | None) -> dict[str, float]:
    """The measurement inside the training loop, from the result's own timings, without
    overlap: a training result's warm-up (every step before the window, step 0
    included: ``result.warmup.seconds``), the window's steps of the configured epochs
    and of the extension (together ``result.timed.seconds``) and every evaluation pass
    (``result.eval.passes``); a microbenchmark's warm-up calls and timed calls."""
    phases = dict.fromkeys(("warmup", "timed_training", "extension", "evaluation"), 0.0)
    result = result or {}
    if result.get("kind") == "training":
        steps = result.get("steps") or {}
        epochs = [float(s) for epoch in steps.get("seconds") or [] for s in epoch]
        extension = [float(s) for region in steps.get("extension_seconds") or [] for s in region]
        start = int((result.get("warmup") or {}).get("steps") or 0)
        phases["warmup"] = math.fsum((epochs + extension)[:start])
        phases["timed_training"] = math.fsum(epochs[start:])
        phases["extension"] = math.fsum(extension[max(0, start - len(epochs)) :])
        passes = (result.get("eval") or {}).get("passes") or []
        phases["evaluation"] = math.fsum(float(p.get("seconds") or 0.0) for p in passes)
    elif result.get("kind") == "microbenchmark":
        sizes = result.get("sizes") or []
        phases["warmup"] = math.fsum(float(row.get("warmup_s") or 0.0) for row in sizes)
        # blocked_autorange's blocks: runs x number_per_run calls at mean_s each
        phases["timed_training"] = math.fsum(
            float(row.get("mean_s") or 0.0)
            * (row.get("runs") or 0)
            * (row.get("number_per_run") or 0)
            for row in sizes
        )
    return phases


def loop_phases(loop_seconds: float, result: Mapping | None, marks: Mapping) -> dict[str, float]:
    """The training loop's seconds as measurement phases, analysis (the result's
    analysis: steady state, windows, summaries) and training_bookkeeping (the rest)."""
    phases = measured_phases(result)
    # The diagnostic pass after the timed window (trainbench.measure.step_breakdown): its own
    # phase, outside measurement (it explains the measurement, it is not part of it).
    # Evaluation parity after it (trainbench.measure.eval_parity): a verification, its own phase.
    training = (result or {}).get("kind") == "training"
    for phase in ("step_breakdown", "eval_parity"):
        part = ((result or {}).get(phase) or {}) if training else {}
        phases[phase] = float(part.get("seconds") or 0.0)
    start, end = marks.get("analysis_start"), marks.get("analysis_end")
    phases["analysis"] = end - start if start is not None and end is not None else 0.0
    phases["training_bookkeeping"] = loop_seconds - sum(phases.values())
    return phases


def breakdown(marks: Mapping[str, float], attempt_seconds: float, result: Mapping | None) -> dict:
    """The attempt's duration as phases (seconds), from ``marks`` (seconds since the
    Popen mark, the launcher's included) and the child's ``result`` (None when it left
    none). Phases add up to ``attempt_seconds``; a phase whose end was never marked is
    ``interrupted`` and its time, like every gap, ``unattributed``. A phase never
    reached is absent after a failure and 0 otherwise."""
    marks = {"popen": 0.0, **marks, "exit": attempt_seconds}
    phases: dict[str, float] = {}
    interrupted = None
    for phase, start, end in SEGMENTS:
        if start not in marks:
            continue
        if end not in marks:
            interrupted = interrupted or phase
            continue
        seconds = marks[end] - marks[start]
        split = loop_phases(seconds, result, marks) if phase == LOOP else {phase: seconds}
        for name, value in split.items():
            phases[name] = phases.get(name, 0.0) + value
    if interrupted is None:
        phases = {name: phases.get(name, 0.0) for name in PHASES[:-1]}
    phases["unattributed"] = attempt_seconds - math.fsum(phases.values())
    phases = {name: phases[name] for name in PHASES if name in phases}
    measurement = math.fsum(phases.get(name, 0.0) for name in MEASUREMENT)
    return {
        "attempt_seconds": attempt_seconds,
        "phases": phases,
        "measurement_seconds": measurement,
        "outside_measurement_seconds": attempt_seconds - measurement,
        "measurement_share": measurement / attempt_seconds if attempt_seconds > 0 else None,
        "unattributed_seconds": phases["unattributed"],
        "interrupted": interrupted,
        "marks": dict(sorted(marks.items(), key=lambda item: item[1])),
        "clock": CLOCK,
        "method": METHOD,
    }


def without_child(note: str) -> dict:
    """The breakdown of an attempt that started no child (nothing to break down)."""
    return {**breakdown({}, 0.0, None), "interrupted": None, "marks": {}, "note": note}


def slim(wall: Mapping | None) -> dict | None:
    """An attempt's breakdown for the record's ``attempts``: the clock and method are
    stated once, in the record's ``wall_time``."""
    if wall is None:
        return None
    return {k: v for k, v in wall.items() if k not in ("clock", "method")}


def launcher_facts(entered: float, attempts: list[Mapping]) -> dict:
    """The launcher's time around its children: from entering ``run_cell`` (the
    perf_counter reading ``entered``) to the record built (its write, a few
    milliseconds, cannot be in it), the attempts' durations and the rest (the cell's
    lock, the attempts' files, reading and classifying results, building the record);
    and how old the launcher's process was on entering (under Snakemake: its job's
    Python start and imports)."""
    import psutil

    now = time.perf_counter()
    attempts_seconds = math.fsum(float(a.get("duration_s") or 0.0) for a in attempts)
    try:
        age = time.time() - (now - entered) - psutil.Process().create_time()
    except psutil.Error:
        age = None
    return {
        "cell_seconds": now - entered,
        "attempts_seconds": attempts_seconds,
        "earlier_attempts_seconds": attempts_seconds - float(attempts[-1].get("duration_s") or 0.0),
        "launcher_seconds": now - entered - attempts_seconds,
        "process_age_at_entry_seconds": age,
    }
