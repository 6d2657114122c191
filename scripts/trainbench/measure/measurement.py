"""The measurement protocol of a cell (config section ``timing``) and the windows it
defines: which steps and which evaluation passes a throughput is computed from.

Pure functions over the per-step series the training loop recorded; see
docs/statistics.md section 1 for the rules and the reasons for the defaults.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from trainbench.measure.stalls import published_throughput, stall_facts, stall_steps_needed
from trainbench.measure.steady import (
    NO_STEADY_STATE,
    detect_steady_state,
    dispersion,
    fixed_warmup,
    tukey_outliers,
)

DEFAULTS = {
    "min_timed_seconds": 1.0,
    "min_eval_seconds": None,  # None: min_timed_seconds
    "min_timed_steps": 20,
    "max_eval_passes": 2000,
    "max_eval_seconds": 10.0,
    "disturbed_core_share": 0.10,
    "pin_cpus": True,
    "min_energy_seconds": 1.0,
    "extend_short_windows": True,
    "max_extension_seconds": 30.0,
    "max_stall_share": 0.05,
    "steady_state": {"detect": True, "penalty": 3.0, "equivalence": 0.05, "max_bins": 150},
}


@dataclass(frozen=True)
class TimingProtocol:
    min_timed_seconds: float = DEFAULTS["min_timed_seconds"]
    min_eval_seconds: float | None = DEFAULTS["min_eval_seconds"]
    min_timed_steps: int = DEFAULTS["min_timed_steps"]
    max_eval_passes: int = DEFAULTS["max_eval_passes"]
    max_eval_seconds: float = DEFAULTS["max_eval_seconds"]
    disturbed_core_share: float = DEFAULTS["disturbed_core_share"]
    pin_cpus: bool = DEFAULTS["pin_cpus"]
    min_energy_seconds: float = DEFAULTS["min_energy_seconds"]
    extend_short_windows: bool = DEFAULTS["extend_short_windows"]
    max_extension_seconds: float = DEFAULTS["max_extension_seconds"]
    max_stall_share: float = DEFAULTS["max_stall_share"]
    detect: bool = DEFAULTS["steady_state"]["detect"]
    penalty: float = DEFAULTS["steady_state"]["penalty"]
    equivalence: float = DEFAULTS["steady_state"]["equivalence"]
    max_bins: int = DEFAULTS["steady_state"]["max_bins"]

    @classmethod
    def from_spec(cls, spec: dict) -> TimingProtocol:
        """From a cell spec's ``timing`` (the config's, with the schema's defaults);
        missing keys take the defaults above (the benchmarks build specs by hand)."""
        timing = dict(spec.get("timing") or {})
        steady = dict(timing.pop("steady_state", None) or {})
        known = {k: v for k, v in timing.items() if k in cls.__dataclass_fields__}
        known.update({k: v for k, v in steady.items() if k in cls.__dataclass_fields__})
        return cls(**known)

    def as_dict(self) -> dict:
        return asdict(self)

    @property
    def eval_minimum(self) -> float:
        """The shortest warm evaluation an evaluation speed rests on:
        ``min_eval_seconds``, or ``min_timed_seconds`` where it is not set."""
        if self.min_eval_seconds is None:
            return self.min_timed_seconds
        return self.min_eval_seconds


def _short_reason(seconds: float, steps: int, protocol: TimingProtocol, what: str) -> str | None:
    reasons = []
    if seconds < protocol.min_timed_seconds:
        reasons.append(f"{seconds:.3g} s < {protocol.min_timed_seconds:g} s")
    if steps < protocol.min_timed_steps:
        reasons.append(f"{steps} {what} < {protocol.min_timed_steps}")
    return "; ".join(reasons) or None


def window_phase(epoch_phases: Sequence[str] | None, steps_per_epoch: int) -> dict | None:
    """The last phase of a schedule that changes the work per step by epoch: its label,
    its epochs (1-based, inclusive) and its first step; None without such a schedule
    (every epoch does the same work). The measurement window starts no earlier than
    that step on every device, so that the devices' windows time the same work."""
    if not epoch_phases or len(set(epoch_phases)) < 2:
        return None
    last = epoch_phases[-1]
    first = len(epoch_phases)
    while first > 1 and epoch_phases[first - 2] == last:
        first -= 1
    return {
        "phase": last,
        "first_epoch": first,
        "last_epoch": len(epoch_phases),
        "first_step": (first - 1) * int(steps_per_epoch),
        "method": "the workload's work per step changes by epoch; the window starts no "
        "earlier than the first step of its last phase, on every device",
    }


def measurement_window(
    step_seconds: Sequence[Sequence[float]],
    step_samples: Sequence[int],
    warmup_steps: int,
    protocol: TimingProtocol,
) -> dict:
    """The training window of a run: steady state from the whole series (every epoch
    concatenated), then throughput, dispersion and outliers of the window's steps, and
    its stalls (:mod:`.stalls`: excluded from ``samples_per_s`` only above
    ``timing.max_stall_share``; ``samples_per_s_all_steps`` keeps every step).

    ``step_seconds`` holds one list per epoch; ``step_samples`` one count per step."""
    flat = [s for epoch in step_seconds for s in epoch]
    if protocol.detect:
        steady = detect_steady_state(
            flat,
            warmup_steps,
            protocol.min_timed_steps,
            penalty=protocol.penalty,
            equivalence=protocol.equivalence,
            max_bins=protocol.max_bins,
        )
    else:
        steady = fixed_warmup(len(flat), warmup_steps)
    start = steady.start_step
    window = flat[start:]
    seconds, samples = float(sum(window)), int(sum(step_samples[start:]))
    reason = _short_reason(seconds, len(window), protocol, "steps")
    outliers = tukey_outliers(window)
    fence = outliers["fences"][3] if outliers["fences"] else None
    stalls = stall_facts(window, step_samples[start:], fence, protocol.max_stall_share)
    return {
        "start_step": start,
        "steady_state": {**steady.as_dict(), "min_steps": protocol.min_timed_steps},
        "warmup": {
            "steps": start,
            "samples": int(sum(step_samples[:start])),
            "seconds": float(sum(flat[:start])),
        },
        "timed": {
            "steps": len(window),
            "samples": samples,
            "seconds": seconds,
            "samples_per_s": published_throughput(samples, seconds, stalls),
            "samples_per_s_all_steps": samples / seconds if seconds > 0 else None,
            "stalls": stalls,
            "short_window": reason is not None,
            "short_window_reason": reason,
            "min_seconds": protocol.min_timed_seconds,
            "min_steps": protocol.min_timed_steps,
        },
        "step_latency_s": dispersion(window),
        "outliers": outliers,
    }


# An extension aims this far past each minimum, so that the window re-measured
# (its steady state found again over the longer series) still passes.
EXTENSION_MARGIN = 1.2
# Regions a run with no steady state gets, each of half its steps so far (the series
# grows up to 1.5^3 = 3.4 times, within timing.max_extension_seconds). A warm-up that
# ended late settles in the first; a host whose speed wanders over fractions of a
# second (a GPU host's VM: benchmarks/results/host-stability-2026-11-29.md) can leave
# a 1-2 s window's first and last thirds apart where a longer window averages the
# wander out, as adaptive_autorange times on until its spread is small; a real drift
# (heat, a slowing host) stays and the run is still "no steady state".
UNSTEADY_RETRIES = 3


def extension_steps_needed(
    window: dict,
    energy_seconds: float | None,
    protocol: TimingProtocol,
    budget_seconds: float = math.inf,
    retry_unsteady: bool = False,
) -> tuple[int, str] | None:
    """How many more timed steps a run needs for its training window (and, when energy
    is measured, ``energy_seconds`` of timed training regions) to pass the protocol's
    minimums with :data:`EXTENSION_MARGIN`, and for its stalls to take at most
    ``timing.max_stall_share`` of it (:func:`.stalls.stall_steps_needed`), and why; None
    when all pass or no ``budget_seconds`` are left. ``retry_unsteady``: a run with no
    steady state also gets a region of half its steps so far (the caller grants
    :data:`UNSTEADY_RETRIES` of them). Steps are counted at the window's median
    step time, and no more than fit in the budget at its mean step time (at least one):
    where stalls make the mean longer, the budget still bounds the seconds spent."""
    if budget_seconds <= 0:
        return None
    timed, latency = window["timed"], window["step_latency_s"]
    step = latency.get("p50") or (timed["seconds"] / timed["steps"] if timed["steps"] else None)
    if not step or step <= 0:
        return None
    needs, reasons = [], []
    if timed["short_window"]:
        seconds = protocol.min_timed_seconds * EXTENSION_MARGIN - timed["seconds"]
        steps = math.ceil(protocol.min_timed_steps * EXTENSION_MARGIN) - timed["steps"]
        needs.append(max(math.ceil(seconds / step), steps, 1))
        reasons.append(f"training window {timed['short_window_reason']}")
    if energy_seconds is not None and energy_seconds < protocol.min_energy_seconds:
        seconds = protocol.min_energy_seconds * EXTENSION_MARGIN - energy_seconds
        needs.append(max(math.ceil(seconds / step), 1))
        reasons.append(f"energy window {energy_seconds:.3g} s < {protocol.min_energy_seconds:g} s")
    stalled = stall_steps_needed(timed.get("stalls"), timed["seconds"], step, EXTENSION_MARGIN)
    if stalled is not None:
        needs.append(stalled[0])
        reasons.append(stalled[1])
    steady = window.get("steady_state") or {}
    if retry_unsteady and steady.get("classification") == NO_STEADY_STATE:
        total = int(timed["steps"]) + int(window["warmup"]["steps"])
        needs.append(max(total // 2, protocol.min_timed_steps))
        reasons.append(f"no steady state in {total} steps")
    if not needs:
        return None
    cost = max(step, timed["seconds"] / timed["steps"]) if timed["steps"] else step
    affordable = (
        max(1, math.floor(budget_seconds / cost)) if math.isfinite(budget_seconds) else None
    )
    steps = max(needs) if affordable is None else min(max(needs), affordable)
    return steps, "; ".join(reasons)


def epoch_windows(step_seconds: Sequence[Sequence[float]], step_samples, start: int) -> list[dict]:
    """Per epoch: the part of the window inside it, and whether it is a full epoch
    (every step in the window)."""
    out, first = [], 0
    for seconds in step_seconds:
        n = len(seconds)
        lo = max(start - first, 0)
        part = seconds[lo:]
        samples = int(sum(step_samples[first + lo : first + n]))
        total = float(sum(part))
        out.append(
            {
                "timed_steps": len(part),
                "timed_samples": samples,
                "timed_seconds": total,
                "samples_per_s": samples / total if total > 0 else None,
                "full_epoch": lo == 0 and n > 0,
            }
        )
        first += n
    return out


def eval_window(
    passes: Sequence[dict], protocol: TimingProtocol, calibration: dict | None = None
) -> dict:
    """Evaluation throughput from warm passes only; the cold first pass apart. Warm
    passes that add up to less than its minimum (``TimingProtocol.eval_minimum``),
    after the calibration passes of :mod:`trainbench.measure.eval_calibration` (whose
    facts ``calibration`` holds), leave the evaluation speed not measured: no
    samples_per_s, the reason beside it."""
    warm = [p for p in passes if not p["cold"]]
    cold = [p for p in passes if p["cold"]]
    seconds = float(sum(p["seconds"] for p in warm))
    samples = int(sum(p["samples"] for p in warm))
    measured = bool(warm) and seconds >= protocol.eval_minimum
    reason = None
    if not measured:
        why = (calibration or {}).get("out_of_reach")
        reason = (
            f"evaluation speed not measured: warm evaluation {seconds:.3g} s < "
            f"{protocol.eval_minimum:g} s after {len(passes)} passes" + (f" ({why})" if why else "")
        )
    return {
        "passes": list(passes),
        "cold_seconds": cold[0]["seconds"] if cold else None,
        "warm": {"passes": len(warm), "samples": samples, "seconds": seconds},
        "samples_per_s": samples / seconds if measured else None,
        "measured": measured,
        "short_window": not measured,
        "short_window_reason": reason,
        "calibration": calibration,
        "method": "wall clock of evaluate(), device synchronized at both edges; the first "
        "(cold) pass reported apart; warm passes of the per-epoch evaluations, then the "
        "calibration passes of the final model (calibration.method); below "
        "timing.min_eval_seconds (default timing.min_timed_seconds) the speed is not measured",
    }
