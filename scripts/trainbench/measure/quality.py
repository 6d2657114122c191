"""The quality curve of a training run: every evaluation pass during training as a point
(metrics against cumulative training time, samples, steps, energy and the wall clock),
from which the analysis reads time to a target (docs/statistics.md §4).

Nothing here runs inside a timed region: a point is taken after its evaluation pass,
from the counts the loop and its trackers already hold, handed over as values. Its wall time is a mark on the wall
clock of :mod:`trainbench.measure.wall_time` (``quality_<index>``), which the launcher turns
into seconds since the attempt started (the record's ``wall_time.marks``).
"""

from __future__ import annotations

import contextlib
import copy
import math
from collections import defaultdict
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from trainbench.common.vocabulary import MARK_PREFIX
from trainbench.measure import wall_time

# The default cadence: enough passes to resolve a time to target to an eighth of the run.
DEFAULT_PASSES = 8
PER_EPOCH = "per_epoch"  # the unit a {passes: P} cadence resolves to
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


def eval_cadence(spec: dict, steps_per_epoch: int, epochs: int) -> tuple[str, int, dict]:
    """(unit, N, the setting as configured) from the cell spec's ``timing.eval_every``
    (default: 8 passes). ``{passes: P}`` resolves for this run to ``("per_epoch", k)``:
    k = ceil(P / epochs) passes in every epoch (at most one per step), evenly spaced in
    its steps, the last at its end; at least P passes in all, and every epoch ends with
    one (the per-epoch tables keep their evaluation)."""
    every = (spec.get("timing") or {}).get("eval_every") or {"passes": DEFAULT_PASSES}
    ((unit, n),) = every.items()
    if unit == "passes":
        per_epoch = min(max(1, int(steps_per_epoch)), -(-int(n) // max(1, int(epochs))))
        return PER_EPOCH, per_epoch, {"passes": int(n)}
    return str(unit), int(n), {str(unit): int(n)}


def epoch_stretches(steps_per_epoch: int, per_epoch: int) -> list[tuple[int, int, bool]]:
    """An epoch's stretches for ``per_epoch`` evenly spaced passes: ``(start, stop, pass
    after it)``, the last stretch's pass left to the epoch's end."""
    bounds = sorted({round(j * steps_per_epoch / per_epoch) for j in range(1, per_epoch + 1)})
    starts = [0, *bounds[:-1]]
    return [(a, b, b != steps_per_epoch) for a, b in zip(starts, bounds, strict=True) if b > a]


@contextlib.contextmanager
def rng_untouched(device: torch.device) -> Iterator[None]:
    """An evaluation pass that leaves the random streams as it found them: the CPU's
    and the device's generator states are restored after it. A DataLoader draws its
    base seed from the CPU generator each time it is iterated, so without this every
    pass would move the dropout masks (and any other draw) of the training after it:
    the cadence of the quality curve would change the run it measures."""
    cpu = torch.get_rng_state()
    module = getattr(torch, device.type, None) if device.type in ("cuda", "mps") else None
    get_state = getattr(module, "get_rng_state", None)  # feature-detected (torch.mps)
    saved = None
    if get_state is not None:
        saved = get_state(device) if device.type == "cuda" else get_state()
    try:
        yield
    finally:
        torch.set_rng_state(cpu)
        if saved is not None:
            if device.type == "cuda":
                module.set_rng_state(saved, device)
            else:
                module.set_rng_state(saved)


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
        epoch: int,
        epoch_end: bool,
        eval_seconds: float,
        metrics: dict[str, Any] | None,
        *,
        steps: int,
        step_samples: Sequence[int],
        region_seconds: Sequence[float],
        energy: tuple[float | None, float | None],
    ) -> None:
        """The point of the evaluation pass that just ended, after ``steps`` training
        steps of ``step_samples`` samples each, ``region_seconds`` the timed training
        regions' seconds so far and ``energy`` the energy tracker's (joules, seconds)
        of them (:meth:`~trainbench.measure.trackers.EnergyTracker.train_joules`)."""
        index = len(self.points)
        wall_time.mark(f"{MARK_PREFIX}{index}")
        joules, energy_seconds = energy
        self.points.append(
            {
                "index": index,
                "epoch": epoch,
                "epoch_end": epoch_end,
                "steps": steps,
                "samples": int(sum(step_samples)),
                "train_seconds": math.fsum(region_seconds),
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
            "granularity": (
                f"{self.every} evaluations per epoch, evenly spaced, the last at its end"
                if self.unit == PER_EPOCH
                else f"an evaluation every {self.every} "
                f"{self.unit if self.every != 1 else self.unit.removesuffix('s')}"
                " and after the last epoch"
            )
            + (
                f" ({self.configured['passes']} passes asked)"
                if "passes" in self.configured
                else ""
            ),
            "points": self.points,
            "method": METHOD,
        }


def stretches(
    first_step: int, steps_per_epoch: int, every: int, ends_with_pass: bool
) -> list[tuple[int, int, bool]]:
    """An epoch's stretches between evaluation passes, with ``eval_every: {steps:
    every}`` counted over the whole run from ``first_step`` (the run's steps before the
    epoch): ``(start, stop, pass after it)`` in the epoch's steps. The last stretch's pass
    is left to the epoch's end where the epoch ends with one (``ends_with_pass``)."""
    found: list[tuple[int, int, bool]] = []
    done = 0
    while done < steps_per_epoch:
        stop = min(steps_per_epoch, done + every - (first_step + done) % every)
        epoch_end = stop == steps_per_epoch and ends_with_pass
        found.append((done, stop, (first_step + stop) % every == 0 and not epoch_end))
        done = stop
    return found
