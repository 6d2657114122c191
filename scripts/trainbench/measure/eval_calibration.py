"""Evaluation timed to the minimum window, as pyperf calibrates its loops.

After training, the passes of the final model that bring the warm evaluation passes to
``timing.min_eval_seconds`` (by default ``timing.min_timed_seconds``) are counted from
the warm passes' median time with
:data:`~trainbench.measure.measurement.EXTENSION_MARGIN`, and timed — within a budget
of ``timing.max_eval_seconds`` of wall time and ``timing.max_eval_passes`` passes. A
budget that cannot reach the minimum times none of them: the cell's evaluation speed is
then "not measured" (:func:`trainbench.measure.measurement.eval_window`). See
docs/statistics.md §1, "Evaluation is timed like training".

The loop hands in the function that times one pass (outside every timed training
region, the device synchronized at both of its edges) and, for
:func:`calibrate_between`, its energy and host trackers.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence

from trainbench.measure.measurement import EXTENSION_MARGIN, TimingProtocol
from trainbench.measure.trackers.base import EVAL

# Rounds of calibration. A round times the passes counted from the median pass so far;
# the next makes up for passes that ran faster than that median (rarely needed).
MAX_ROUNDS = 3

METHOD = (
    "after training, the passes of the final model that bring the warm passes to "
    "timing.min_eval_seconds (default timing.min_timed_seconds) with a 20% margin, "
    "counted from the warm passes' median time (pyperf's calibration of loops), timed "
    "when timing.max_eval_seconds of wall time and timing.max_eval_passes passes can "
    "reach the minimum; none otherwise"
)


def _warm_seconds(passes: Sequence[dict]) -> list[float]:
    return [float(p["seconds"]) for p in passes if not p["cold"]]


def _limit_words(passes_left: int, budget_seconds: float, per_pass: float) -> str:
    """What keeps the minimum out of reach, in words."""
    by_time = math.floor(budget_seconds / per_pass) if math.isfinite(budget_seconds) else None
    if by_time is not None and by_time < passes_left:
        return f"timing.max_eval_seconds leaves {max(budget_seconds, 0.0):.3g} s: {by_time} passes"
    return f"timing.max_eval_passes allows {passes_left} more"


def eval_passes_needed(
    passes: Sequence[dict],
    protocol: TimingProtocol,
    budget_seconds: float = math.inf,
    passes_left: int | None = None,
) -> tuple[int, str | None]:
    """How many more evaluation passes to time now, and why the minimum is out of reach
    (None when it is not). ``(0, None)``: the warm passes already fill
    the evaluation minimum (``TimingProtocol.eval_minimum``). Passes are counted at the
    warm passes' median time, aiming at the minimum × :data:`EXTENSION_MARGIN`, and no more than ``budget_seconds`` and
    ``passes_left`` (default ``max_eval_passes``) allow; where what they allow cannot
    reach the minimum itself, none (0, and the reason). With no warm pass yet: one, to
    count from."""
    warm = _warm_seconds(passes)
    total, minimum = float(sum(warm)), protocol.eval_minimum
    if warm and total >= minimum:
        return 0, None
    left = protocol.max_eval_passes if passes_left is None else int(passes_left)
    if left <= 0 or budget_seconds <= 0:
        if left <= 0:
            return 0, f"no pass left within timing.max_eval_passes ({protocol.max_eval_passes})"
        return 0, f"no time left within timing.max_eval_seconds ({protocol.max_eval_seconds:g} s)"
    if not warm:
        return 1, None
    per_pass = max(statistics.median(warm), 1e-9)
    wanted = max(1, math.ceil((minimum * EXTENSION_MARGIN - total) / per_pass))
    affordable = min(wanted, left)
    if math.isfinite(budget_seconds):
        affordable = min(affordable, math.floor(budget_seconds / per_pass))
    if total + affordable * per_pass < minimum:
        reach = math.ceil((minimum - total) / per_pass)
        limit = _limit_words(left, budget_seconds, per_pass)
        return 0, f"{reach} more passes of {per_pass:.3g} s were needed; {limit}"
    return affordable, None


def calibrate(
    time_pass: Callable[[], object],
    passes: list[dict],
    protocol: TimingProtocol,
    clock: Callable[[], float] = time.perf_counter,
) -> dict:
    """Times the passes :func:`eval_passes_needed` asks for, round by round
    (``time_pass`` times one pass and appends it to ``passes``), stopping before a pass
    once ``timing.max_eval_seconds`` of wall time are spent. Returns the record's
    ``eval.calibration``: passes timed, wall seconds, rounds, and why the minimum was
    out of reach (None when it was not)."""
    start, timed, rounds, why = clock(), 0, 0, None
    budget = protocol.max_eval_seconds
    while True:
        spent = clock() - start
        need, why = eval_passes_needed(
            passes, protocol, budget - spent, protocol.max_eval_passes - timed
        )
        if not need:
            break
        if rounds == MAX_ROUNDS:
            why = f"still below the minimum after {MAX_ROUNDS} rounds of passes"
            break
        rounds += 1
        for _ in range(need):
            if clock() - start >= budget:
                break
            time_pass()
            timed += 1
    return {
        "passes": timed,
        "seconds": clock() - start,
        "rounds": rounds,
        "target_seconds": protocol.eval_minimum * EXTENSION_MARGIN,
        "max_seconds": budget,
        "max_passes": protocol.max_eval_passes,
        "out_of_reach": why,
        "method": METHOD,
    }


def calibrate_between(
    energy,
    host,
    time_pass: Callable[[], object],
    passes: list[dict],
    protocol: TimingProtocol,
) -> dict:
    """:func:`calibrate` with the energy and host trackers (``energy``: an
    :class:`~trainbench.measure.trackers.energy.EnergyTracker`; ``host``: a
    :class:`~trainbench.measure.trackers.host.HostActivity`) read once around the
    passes, which ``time_pass`` times without them, rather than at each pass's edges
    (an NVML read at each edge, a walk of the process table at the end). On an H200
    host each pass had taken 10-14 ms of wall time beyond its timed seconds, whatever
    the model, and NVML's energy counter, updated about every 100 ms, cannot resolve
    one pass anyway. The energy window spans the passes and the gaps between them; the
    host's span ends after the last pass. The device is idle before the first pass and
    after the last: each pass's region synchronizes it."""
    energy.start(EVAL)
    started = time.perf_counter()
    calibration = calibrate(time_pass, passes, protocol)
    if calibration["passes"]:
        energy.stop(EVAL, time.perf_counter() - started)
        host.stop(EVAL, 0.0)
    else:
        energy.discard()
    return calibration
