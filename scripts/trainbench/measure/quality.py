"""The quality curve of a training run: every evaluation pass during training as a point
(metrics against cumulative training time, samples, steps, energy and the wall clock),
from which the analysis reads time to a target (docs/statistics.md §4).

Nothing here runs inside a timed region: a point is taken after its evaluation pass,
from what the loop and its trackers already hold. Its wall time is a mark on the wall
clock of :mod:`trainbench.measure.wall_time` (``quality_<index>``), which the launcher turns
into seconds since the attempt started (the record's ``wall_time.marks``).
"""

from __future__ import annotations

import copy
import math
import time
from collections import defaultdict
from typing import TYPE_CHECKING, Any

from trainbench.common.vocabulary import MARK_PREFIX
from trainbench.measure import wall_time

if TYPE_CHECKING:
    from trainbench.measure.training import TrainingLoop

# The default cadence: enough passes to resolve a time to target to an eighth of the run.
DEFAULT_PASSES = 8
# What the epoch row holds of an epoch that ends without an evaluation pass.
NO_EVALUATION = {"seconds": None, "samples": None, "cold": None, "metrics": None}
METHOD = (
    "one point per evaluation pass during training (timing.eval_every), taken after the "
    "pass: train_seconds = the timed training regions' seconds so far (synchronized at "
    "their edges; step 0, which holds one-time compilation and initialisation, and every "
    "evaluation pass are outside them); samples and steps = every training step so far, "
    "step 0 included; train_joules = the energy tracker's training regions so far (its "
    "measured domains), null where none is measured; the wall clock at the pass's end is "
    "the record's wall_time.marks['quality_<index>'] (seconds since the attempt started)"
)


def eval_cadence(spec: dict, total_steps: int) -> tuple[str, int, dict]:
    """("epochs" | "steps", N, the setting as configured) from the cell spec's
    ``timing.eval_every`` (default: 8 passes). ``{passes: P}`` is a step cadence
    resolved for this run: every ``max(1, total_steps // P)`` steps, which gives at
    least P passes (the last after the last epoch), evenly spaced in steps."""
    every = (spec.get("timing") or {}).get("eval_every") or {"passes": DEFAULT_PASSES}
    ((unit, n),) = every.items()
    if unit == "passes":
        return "steps", max(1, int(total_steps) // int(n)), {"passes": int(n)}
    return str(unit), int(n), {str(unit): int(n)}


class QualityCurve:
    """The points of one run, in the order the passes ran."""

    def __init__(self, unit: str, every: int, configured: dict | None = None):
        self.unit, self.every = unit, every
        self.configured = configured or {unit: every}
        self.points: list[dict] = []
        # Wall seconds of the passes inside each epoch (kept out of its train_seconds).
        self.mid_epoch: dict[int, float] = defaultdict(float)

    def mid_epoch_seconds(self, epoch: int) -> float:
        return self.mid_epoch.get(epoch, 0.0)

    def add(
        self,
        loop: TrainingLoop,
        epoch: int,
        epoch_end: bool,
        eval_seconds: float,
        metrics: dict[str, Any] | None,
    ) -> None:
        """The point of the evaluation pass that just ended."""
        index = len(self.points)
        wall_time.mark(f"{MARK_PREFIX}{index}")
        joules, energy_seconds = loop.energy.train_joules()
        self.points.append(
            {
                "index": index,
                "epoch": epoch,
                "epoch_end": epoch_end,
                "steps": loop.global_step,
                "samples": int(sum(loop.step_samples)),
                "train_seconds": math.fsum(loop.timer.region_seconds),
                "train_joules": joules,
                "energy_window_seconds": energy_seconds,
                "eval_seconds": eval_seconds,
                "metrics": copy.deepcopy(metrics) if metrics is not None else None,
            }
        )

    def summary(self) -> dict:
        """The record's ``quality``."""
        return {
            "eval_every": {self.unit: self.every},
            "configured": self.configured,
            "granularity": f"an evaluation every {self.every} "
            f"{self.unit if self.every != 1 else self.unit.removesuffix('s')}"
            " and after the last epoch"
            + (
                f" ({self.configured['passes']} passes asked)"
                if "passes" in self.configured
                else ""
            ),
            "points": self.points,
            "method": METHOD,
        }


def train_in_stretches(loop: TrainingLoop, epoch: int) -> tuple[list, dict, list[float]]:
    """One epoch of ``loop`` with an evaluation pass after every ``eval_every`` steps
    (counted over the whole run): one timed region per stretch between passes, each pass
    outside them, the model back in training mode after it. The last stretch's pass is
    left to the epoch's end where the epoch ends with one. Returns the epoch's losses,
    stats and step seconds, as one region would."""
    losses: list = []
    stats: dict[str, list] = {}
    seconds: list[float] = []
    batches = loop.batches()
    done, every = 0, loop.eval_every
    while done < loop.steps_per_epoch:
        stop = min(loop.steps_per_epoch, done + every - loop.global_step % every)
        part = loop.train_steps(epoch, stop - done, batches, start=done)
        losses += part[0]
        for name, values in part[1].items():
            stats.setdefault(name, []).extend(values)
        seconds += part[2]
        done = stop
        epoch_end = done == loop.steps_per_epoch and loop.evaluates_after(epoch)
        if loop.global_step % every == 0 and not epoch_end:
            t0 = time.perf_counter()
            loop.evaluate(epoch, epoch_end=False)
            loop.parts.model.train()
            loop.quality.mid_epoch[epoch] += time.perf_counter() - t0
    return losses, stats, seconds
