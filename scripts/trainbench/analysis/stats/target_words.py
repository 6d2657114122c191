"""The words of a time-to-target comparison (:mod:`.targets`): what happened to repeats
that did not reach the target (censored), each best_setting row's one-line summary that
the console and results/report.md print, and the one line for the workloads without a
target. Words only: every number comes from a cell's stats or a best_setting row."""

from __future__ import annotations

import math

import numpy as np
from trainbench.analysis.stats import frames as fr
from trainbench.analysis.stats.intervals import NO_CLEAR
from trainbench.analysis.tables import compact, interval_text, ratio_text

SOONER = "sooner"
LATER = "later"
NOT_REACHED = "not reached"
BASELINE = "baseline"
JUDGED = (SOONER, LATER, NO_CLEAR)


def has_censored(*sides: dict) -> bool:
    """Whether a repeat of any side did not reach the target."""
    return any(side["reached"] < side["repeats"] for side in sides)


def _range(low: float, high: float) -> str:
    """ "15–21" or "16" where both ends agree at 3 significant digits."""
    return compact(low) if compact(low) == compact(high) else interval_text(low, high)


def _reached_ratio(mine: dict, ref: dict, than: str) -> str:
    """How much sooner this side's reached repeats were than the baseline's reached ones
    (the extreme pairwise ratios), e.g. "those 15–21x sooner than cpu"."""
    own = mine["times"][np.isfinite(mine["times"])]
    other = ref["times"][np.isfinite(ref["times"])]
    if not own.size or not other.size:
        return ""
    low, high = float(other.min() / own.max()), float(other.max() / own.min())
    who = "that one" if own.size == 1 else "those"
    if low >= 1:
        how = f"{_range(low, high)}x sooner"
    elif high <= 1:
        how = f"{_range(1 / high, 1 / low)}x later"
    else:
        how = f"from {compact(1 / low)}x later to {compact(high)}x sooner"
    return f", {who} {how} than {than}"


def _not_within(side: dict) -> str:
    """ "not within 3 epochs (6.2 s of training)": where the censored repeats stopped."""
    epochs = side.get("censored_epochs")
    seconds = f"{compact(side['censored_after_s'])} s of training"
    if epochs is None or not math.isfinite(epochs):
        return f"not within {seconds}"
    return f"not within {fr.plural(int(epochs), 'epoch')} ({seconds})"


def _others(side: dict) -> str:
    missed = side["repeats"] - side["reached"]
    if not side["reached"]:
        return "none" if missed > 1 else "it"
    return "the other" if missed == 1 else f"the other {missed}"


def censored_outcome(device: str, base: str, mine: dict, ref: dict) -> str:
    """What happened where some repeats of either side did not reach the target, e.g.
    "cuda reached it in 2 of 3 repeats, those 15–21x sooner than cpu; the other not
    within 3 epochs (6.2 s of training)"; "" when every repeat of both sides reached it.
    The verdict is not in it: it stays the interval's, censored repeats included."""
    if not has_censored(mine, ref):
        return ""
    than = base if ref["reached"] == ref["repeats"] else f"those of {base} that did"
    words = (f"{device} reached it in {mine['reached']} of {mine['repeats']} repeats"
             f"{_reached_ratio(mine, ref, than)}")  # fmt: skip
    if mine["reached"] < mine["repeats"]:
        words += f"; {_others(mine)} {_not_within(mine)}"
    if ref["reached"] < ref["repeats"]:
        words += (
            f"; {base} in {ref['reached']} of {ref['repeats']}, {_others(ref)} {_not_within(ref)}"
        )
    return words


def not_finite(stats: dict) -> str:
    """ "; the metric was not finite in 9 of 9 evaluations" ("" where it always was)."""
    if not stats.get("not_finite"):
        return ""
    return f"; the metric was not finite in {stats['not_finite']} of {stats['evaluations']} evaluations"


def overall(verdict: str, ratio: float, low: float, high: float) -> str:
    """The verdict over every repeat, censored ones included, with its ratio:
    "3.1x sooner (2.2–4x)", "no clear difference (16x, 0–21.5x)"."""
    if verdict == SOONER:
        return f"{ratio_text(ratio)} sooner ({interval_text(low, high)}x)"
    if verdict == LATER:
        return f"{ratio_text(1 / ratio)} later ({interval_text(1 / high, 1 / low)}x)"
    return f"no clear difference ({ratio_text(ratio)}, {interval_text(low, high)}x)"


def no_target(names: list[str]) -> str:
    """The one line for every training workload without a target: "No time to target
    for text_a, mlp_c: no target set (workloads.<name>.target)" (the key named where
    there is one workload)."""
    key = f"workloads.{names[0]}.target" if len(names) == 1 else "workloads.<name>.target"
    return f"No time to target for {', '.join(names)}: no target set ({key})"


def unusable(problem: str) -> str:
    """A workload's records give no time to target on any device: said once, with why."""
    return f"no time to target on any device: {problem}"


def own_time(row: dict) -> str:
    """A best_setting row's own time and its interval as the row states its kind:
    "2.31 s of training (bs 32; median of 3 repeats, range 2.2–2.5 s)"."""
    kind = str(row.get("interval") or "")
    span = f"{interval_text(row['low'], row['high'])} s"
    if kind.startswith("range"):
        rest = kind.partition(", ")[2]  # "1 not reaching the target" where censored
        how = f"range {span}" + (f", {rest}" if rest else "")
    else:
        how = f"{kind} {span}"
    return (f"{compact(row['median_s'])} s of training (bs {int(row['batch_size'])}; "
            f"median of {fr.plural(int(row['repeats']), 'repeat')}, {how})")  # fmt: skip


def _compared(row: dict, censored: str) -> str:
    """A judged row against the baseline's best setting (verdict in :data:`JUDGED`)."""
    device, base, verdict = row["device"], row["baseline_device"], row["verdict"]
    goal = f"{row['metric']} {row['direction']} {compact(row['target'])}"
    settings = (f"each at its best setting ({device} bs {int(row['batch_size'])}; "
                f"{base} bs {int(row['baseline_batch_size'])})")  # fmt: skip
    ratio, low, high = row["speedup"], row["speedup_low"], row["speedup_high"]
    if censored:
        median = (f"{compact(row['median_s'])} s of training (median of "
                  f"{fr.plural(int(row['repeats']), 'repeat')})")  # fmt: skip
        return (f"{device} reaches {goal} in {median}, {settings}: {censored}; "
                f"overall {overall(verdict, ratio, low, high)}")  # fmt: skip
    if verdict == SOONER:
        how = f"{ratio_text(ratio)} sooner than {base} ({interval_text(low, high)}x)"
    elif verdict == LATER:
        how = f"{ratio_text(1 / ratio)} later than {base} ({interval_text(1 / high, 1 / low)}x)"
    else:
        how = f"with no clear difference from {base} ({ratio_text(ratio)}, {interval_text(low, high)}x)"
    return f"{device} reaches {goal} in {compact(row['median_s'])} s of training, {how}, {settings}"


def summary(row: dict, censored: str = "", alone: bool = False) -> str:
    """A best_setting row in one sentence, the console's and report.md's time-to-target
    line. The baseline's own time: "cpu (the baseline) reaches accuracy ≥ 0.64 in 2.31 s
    of training (bs 32; median of 3 repeats, range 2.2–2.5 s)" ("(the baseline)" left
    out where the workload ran on one device, ``alone``); another device's comparison
    with it: "cuda reaches accuracy ≥ 0.64 in 0.2 s of training, 3.1x sooner than cpu
    (2.2–4x), each at its best setting (cuda bs 32; cpu bs 16)"; ``censored``: the row's
    :func:`censored_outcome`, said instead of a bare ratio. A comparison without a
    verdict keeps the device's own time and says why ("…; vs cpu at their best
    settings: insufficient data (…)"); a device that reaches nothing says so once, with
    the reason ("cuda: not reached (…)")."""
    device, base, verdict = row["device"], row.get("baseline_device"), row["verdict"]
    who = f"{device} (the baseline)" if device == base and not alone else str(device)
    median = row.get("median_s")
    if verdict == NOT_REACHED or median is None or not math.isfinite(float(median)):
        return f"{who}: {verdict} ({row['reason']})"
    if verdict in JUDGED:
        return _compared(row, censored)
    goal = f"{row['metric']} {row['direction']} {compact(row['target'])}"
    reached = f"{who} reaches {goal} in {own_time(row)}"
    if verdict == BASELINE:  # the reason names disturbed repeats, where there were any
        return f"{reached}; {row['reason']}: read with care" if row.get("reason") else reached
    against = f"vs {base} at their best settings: " if base else ""
    return f"{reached}; {against}{verdict} ({row['reason']})"
