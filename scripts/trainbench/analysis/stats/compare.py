"""Comparison on purpose: one setting against another on the same hardware, the
``comparison`` table (docs/statistics.md, "Comparison of settings"), from the record
tables ``runs`` and ``quality`` and the configured ``aggregate.compare``.

Merged records (``aggregate.include_results``) that split by software (another torch, other
measuring code: the runs table's ``software`` column) or come from several results folders
(``results_folder``) are never pooled; this table sets them side by side, as asv's
``asv compare`` and pyperf's ``compare_to`` do: each **side** against the **baseline side**
on one ``machine_device`` (the device label without its software part: what is held
fixed), at one batch size. ``by: software``: a side is a software label ("torch 2.5.1"),
the baseline the oldest torch version (``packaging.version`` order; a tie, or no torch
column, by the earliest record start, ``started_unix``, then by name). ``by: folder``: a
side is a results folder ("this run" for the run's own records, else the folder as
configured; with " · <software>" where one folder holds several softwares), the baseline
the folder whose records started first (without ``started_unix``: the included folders
before "this run", then by name), so the newer is judged against the older. A configured
``baseline`` names the side ("torch 2.5.1", "2.5.1", or a folder); one that matches no side
of a machine_device, or several, gives that machine_device one note row instead.

One row per training workload × machine_device × batch size × non-baseline side, only
where the machine_device has at least two sides; an empty table (with the columns)
otherwise and with ``by: none``. Columns:

* workload, machine_device, hardware (the records' readable hardware labels), batch_size;
  by (software or folder); side, baseline_side; metric ("samples/s");
* repeats, baseline_repeats: ok records with a finite samples/s on each side;
  median, baseline_median: their medians (samples/s);
* ratio: median ÷ baseline_median; low, high: its interval; interval: the interval's
  kind, as the speedup table makes it (:func:`.intervals.ratio_interval`: the extreme
  pairwise ratios below 5 repeats a side, "range of 3 vs 3 runs"; a 95% bootstrap CI of
  the ratio of medians from 5 on both sides, "95% BCa CI");
* verdict and reason: the speedup table's rule (:func:`.speed.judge`), the first that
  applies: ``insufficient data`` (no ok run on a side), ``disturbed`` (a disturbed repeat
  on either side), ``insufficient data`` (a short window, no steady state, or fewer than
  3 ok repeats on a side: :data:`.speed.MIN_REPEATS`), then ``faster`` (the interval's low
  end above 1), ``slower`` (its high end below 1), ``no clear difference``;
* time to the workload's target, filled only where the workload has a target and both
  sides have a quality curve: ttt_metric, ttt_direction ("≥"/"≤"), ttt_target;
  ttt_median_s, ttt_baseline_median_s (training seconds to target, the median over ok
  repeats, a repeat that never reached it kept as +inf: :mod:`.censored`); ttt_ratio =
  baseline time ÷ this time (how many times sooner), ttt_low, ttt_high, ttt_interval
  (:func:`.censored.times_sooner`: the extreme pairwise ratios where a repeat is
  censored); ttt_verdict, the time-to-target table's rule: ``not reached`` (this side's
  median repeat did not reach it), ``insufficient data`` (fewer than 3 ok repeats on a
  side), ``disturbed``, ``sooner`` / ``later`` (interval above / below 1), ``no clear
  difference``;
* line: the row in one sentence, the ⇄ line of the console and results/report.md.

A note row (workload "(all)", no numbers) says why a machine_device with several sides
has no baseline; its verdict is ``insufficient data``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from packaging.version import InvalidVersion, Version
from trainbench.analysis.stats import frames as fr
from trainbench.analysis.stats.censored import time_interval, times_sooner
from trainbench.analysis.stats.intervals import (
    FASTER,
    INSUFFICIENT,
    NO_CLEAR,
    SLOWER,
    ratio_intervals,
)
from trainbench.analysis.stats.speed import DISTURBED, MIN_REPEATS, Side, build_sides, judge
from trainbench.analysis.stats.target_words import LATER, NOT_REACHED, SOONER
from trainbench.analysis.stats.targets import repeat_outcomes, resolve_targets
from trainbench.analysis.tables import compact, interval_text, ratio_text

COMPARISON_COLUMNS = [
    "workload", "machine_device", "hardware", "batch_size", "by", "side", "baseline_side",
    "metric", "repeats", "baseline_repeats", "median", "baseline_median", "ratio", "low",
    "high", "interval", "verdict", "reason", "ttt_metric", "ttt_direction", "ttt_target",
    "ttt_median_s", "ttt_baseline_median_s", "ttt_reached", "ttt_repeats",
    "ttt_baseline_reached", "ttt_baseline_repeats", "ttt_ratio", "ttt_low", "ttt_high",
    "ttt_interval", "ttt_verdict", "line",
]  # fmt: skip
BY_SOFTWARE, BY_FOLDER, BY_NONE = "software", "folder", "none"
THIS_RUN = "this run"
ALL = "(all)"
START = "started_unix"  # a record's first start (seconds since the epoch), where runs has it
SYMBOL = "⇄"
_SIDE, _MACHINE = "_side", "_machine"


@dataclass(frozen=True)
class CompareSettings:
    """The configured ``aggregate.compare``: by (software, folder or none) and the
    baseline side (None: the oldest)."""

    by: str = BY_SOFTWARE
    baseline: str | None = None

    @classmethod
    def from_config(cls, block: Mapping | None) -> CompareSettings:
        block = block or {}
        baseline = block.get("baseline")
        return cls(str(block.get("by") or BY_SOFTWARE), str(baseline) if baseline else None)


@dataclass
class _SideFacts:
    """What orders the sides of one machine_device: torch versions, first start, folder
    ("" for the run's own records)."""

    torch: set[str]
    start: float
    folder: str


# ----------------------------------------------------------------------------- sides


def with_sides(runs: pd.DataFrame, by: str) -> pd.DataFrame:
    """``runs`` with ``_machine`` (machine_device, else device) and ``_side`` (the side
    label by ``by``; "" where the record belongs to no side)."""
    runs = runs.copy()
    machine = fr.text(runs, "machine_device")
    runs[_MACHINE] = machine.where(machine != "", runs["device"])
    software = fr.text(runs, "software").str.strip()
    if by == BY_SOFTWARE:
        runs[_SIDE] = software
        return runs
    folder = fr.text(runs, "results_folder").str.strip().replace("", THIS_RUN)
    mixed = software.groupby([runs[_MACHINE], folder]).transform("nunique") > 1
    runs[_SIDE] = folder.where(~mixed, folder + " · " + software)
    return runs


def _facts(rows: pd.DataFrame) -> _SideFacts:
    starts = fr.num(rows, START).to_numpy()
    starts = starts[np.isfinite(starts)]
    return _SideFacts(
        torch={t for t in fr.text(rows, "torch") if t},
        start=float(starts.min()) if starts.size else math.inf,
        folder=next(iter(fr.text(rows, "results_folder")), ""),
    )


def _version(torch: set[str]) -> tuple:
    parsed = []
    for text in torch:
        try:
            parsed.append(Version(text))
        except InvalidVersion:
            continue
    return (0, min(parsed)) if parsed else (1, Version("0"))


def _folder_name(facts: _SideFacts) -> str:
    return facts.folder or THIS_RUN


def side_order(sides: Mapping[str, _SideFacts], by: str) -> list[str]:
    """The sides oldest first: by torch version, then first start, then name (software);
    by first start, the included folders before "this run", then name (folder)."""
    if by == BY_SOFTWARE:
        return sorted(sides, key=lambda s: (_version(sides[s].torch), sides[s].start, s))
    return sorted(sides, key=lambda s: (sides[s].start, not sides[s].folder, s))


def _norm(path: str) -> str:
    return os.path.normpath(path) if path else ""


def _matches(wanted: str, side: str, facts: _SideFacts, by: str) -> bool:
    """Whether the configured baseline names ``side``: its label; by folder the folder
    as configured (paths compared normalized) or "this run"; by software, also the
    torch version with or without "torch " when the side has that one torch."""
    wanted = wanted.strip()
    if wanted == side:
        return True
    if by == BY_FOLDER:
        name = _folder_name(facts)
        return wanted == name or (name != THIS_RUN and _norm(wanted) == _norm(name))
    version = wanted.removeprefix("torch ").strip()
    return wanted in side.split(" · ") or facts.torch == {version}


def choose_baseline(
    sides: Mapping[str, _SideFacts], settings: CompareSettings
) -> tuple[str | None, str]:
    """(baseline side, note): the configured side or the oldest; None with a note saying
    why where the configured one names no side, or several."""
    order = side_order(sides, settings.by)
    if settings.baseline is None:
        return order[0], ""
    found = [s for s in order if _matches(settings.baseline, s, sides[s], settings.by)]
    if len(found) == 1:
        return found[0], ""
    how = "matches no side" if not found else f"matches {len(found)} sides ({', '.join(found)})"
    return None, (
        f"the baseline {settings.baseline!r} (aggregate.compare.baseline) {how} here; "
        f"the sides are {', '.join(order)}. Fix: set it to one of them, or null for the oldest"
    )


# ----------------------------------------------------------------------------- time to target


def _outcomes(quality: pd.DataFrame | None, runs: pd.DataFrame, targets: Mapping) -> dict:
    """{workload: (target, outcomes with _machine and _side)}: each ok record's time to
    its workload's target, joined to its side through the record path."""
    if quality is None or quality.empty or "record" not in quality or "record" not in runs:
        return {}
    ok = runs[runs["status"] == "ok"]
    where = {str(r): (m, s) for r, m, s in zip(ok["record"], ok[_MACHINE], ok[_SIDE], strict=True)}
    out = {}
    for workload, target in resolve_targets(targets, runs).items():
        if not target or target["higher_is_better"] is None or not target.get("metric"):
            continue
        curve = quality[(fr.text(quality, "workload") == workload)
                        & fr.text(quality, "record").isin(list(where))]  # fmt: skip
        if curve.empty:
            continue
        outcomes = repeat_outcomes(curve, target)
        places = [where[str(r)] for r in outcomes["record"]]
        outcomes[_MACHINE] = [p[0] for p in places]
        outcomes[_SIDE] = [p[1] for p in places]
        out[workload] = (target, outcomes)
    return out


def _ttt_verdict(mine: np.ndarray, base: np.ndarray, ratio, disturbed: bool) -> str:
    """The time-to-target table's rule (:mod:`.targets`), for two sides."""
    if not math.isfinite(time_interval(mine).estimate):
        return NOT_REACHED
    if min(mine.size, base.size) < MIN_REPEATS:
        return INSUFFICIENT
    if disturbed:
        return DISTURBED
    if ratio.low > 1:
        return SOONER
    if ratio.high < 1:
        return LATER
    return NO_CLEAR


def _ttt_columns(found, key: tuple, side: str, base: str, disturbed: set[str]) -> dict:
    """The ttt_* columns of one row (empty where a side has no time to target)."""
    if found is None:
        return {}
    target, outcomes = found
    _, machine, batch_size = key
    cell = outcomes[(outcomes[_MACHINE] == machine) & (outcomes["batch_size"] == batch_size)]
    mine, ref = cell[cell[_SIDE] == side], cell[cell[_SIDE] == base]
    if mine.empty or ref.empty:
        return {}
    times, base_times = (x["time"].to_numpy(dtype=float) for x in (mine, ref))
    ratio = times_sooner(base_times, times)
    shaken = bool(set(map(str, pd.concat([mine["record"], ref["record"]]))) & disturbed)
    return {
        "ttt_metric": target["metric"], "ttt_direction": "≥" if target["higher_is_better"] else "≤",
        "ttt_target": target["value"], "ttt_median_s": time_interval(times).estimate,
        "ttt_baseline_median_s": time_interval(base_times).estimate,
        "ttt_reached": int(np.isfinite(times).sum()), "ttt_repeats": int(times.size),
        "ttt_baseline_reached": int(np.isfinite(base_times).sum()),
        "ttt_baseline_repeats": int(base_times.size), "ttt_ratio": ratio.estimate,
        "ttt_low": ratio.low, "ttt_high": ratio.high, "ttt_interval": ratio.kind,
        "ttt_verdict": _ttt_verdict(times, base_times, ratio, shaken),
    }  # fmt: skip


# ----------------------------------------------------------------------------- words


def _ttt_words(r: Mapping) -> str:
    verdict = r.get("ttt_verdict")
    if not isinstance(verdict, str) or not verdict:
        return ""
    goal = f"{r['ttt_metric']} {r['ttt_direction']} {compact(r['ttt_target'])}"
    reached = (f"in {r['ttt_reached']} of {r['ttt_repeats']} repeats, {r['baseline_side']} in "
               f"{r['ttt_baseline_reached']} of {r['ttt_baseline_repeats']}")  # fmt: skip
    if verdict == NOT_REACHED:
        return f"; reaches {goal} {reached}: its median repeat does not ({NOT_REACHED})"
    span = interval_text(r["ttt_low"], r["ttt_high"])
    censored = (r["ttt_reached"], r["ttt_baseline_reached"]) != (
        r["ttt_repeats"],
        r["ttt_baseline_repeats"],
    )
    if not math.isfinite(r["ttt_ratio"]):  # the baseline side's median repeat never reached it
        return (f"; reaches {goal} {reached}, whose median repeat did not "
                f"({span}x sooner): {verdict}")  # fmt: skip
    how = f"{ratio_text(r['ttt_ratio'])} sooner ({span}x)"
    return f"; reaches {goal} {how}" + (f", {reached}" if censored else "") + f": {verdict}"


def comparison_line(r: Mapping) -> str:
    """A row in one sentence: "⇄ image_cnn on cpu@X bs 32: torch 2.13.0 trains 1.31x the
    samples/s of torch 2.5.1 (1.22–1.4x, 95% BCa CI): faster; reaches accuracy ≥ 0.64
    1.2x sooner (0.9–1.6x): no clear difference"."""
    if r["workload"] == ALL:
        return f"{SYMBOL} {r['machine_device']}: no comparison: {r['reason']}"
    head = f"{SYMBOL} {r['workload']} on {r['machine_device']} bs {r['batch_size']}: "
    verdict = r["verdict"]
    why = "" if verdict in (FASTER, SLOWER, NO_CLEAR) else f" ({r['reason']})"
    if isinstance(r["ratio"], float) and math.isfinite(r["ratio"]):
        span = interval_text(r["low"], r["high"])
        text = (f"{r['side']} trains {ratio_text(r['ratio'])} the samples/s of "
                f"{r['baseline_side']} ({span}x, {r['interval']}): {verdict}{why}")  # fmt: skip
    else:
        text = f"{r['side']} against {r['baseline_side']}: {verdict}{why}"
    return head + text + _ttt_words(r)


# ----------------------------------------------------------------------------- table


def _note_row(machine: str, hardware: str, settings: CompareSettings, note: str) -> dict:
    return {"workload": ALL, "machine_device": machine, "hardware": hardware, "by": settings.by,
            "baseline_side": settings.baseline, "verdict": INSUFFICIENT, "reason": note}  # fmt: skip


def _speed_row(key: tuple, side: str, base: str, sides: Mapping[tuple, Side], ratio) -> dict:
    workload, machine, batch_size = key
    mine, ref = sides[(*key, side)], sides.get((*key, base))
    verdict, reason = judge(side, base, mine, ref, ratio, "samples_per_s", f"at bs {batch_size}")
    return {
        "workload": workload, "machine_device": machine, "batch_size": batch_size,
        "side": side, "baseline_side": base, "metric": "samples/s", "repeats": mine.n,
        "baseline_repeats": ref.n if ref is not None else 0,
        "median": float(np.median(mine.values)) if mine.n else np.nan,
        "baseline_median": float(np.median(ref.values)) if ref is not None and ref.n else np.nan,
        "ratio": ratio.estimate if ratio else np.nan, "low": ratio.low if ratio else np.nan,
        "high": ratio.high if ratio else np.nan, "interval": ratio.kind if ratio else "",
        "verdict": verdict, "reason": reason,
    }  # fmt: skip


def _hardware(runs: pd.DataFrame) -> dict[str, str]:
    """{machine_device: its records' hardware labels, "; "-joined}."""
    labels = fr.text(runs, "hardware")
    return {str(m): fr.distinct_text(g) for m, g in labels.groupby(runs[_MACHINE], sort=True)}


def _baselines(runs: pd.DataFrame, settings: CompareSettings) -> dict[str, tuple]:
    """{machine_device: (side order, baseline or None, note)} for each machine_device
    with at least two sides."""
    out = {}
    placed = runs[runs[_SIDE] != ""]
    for machine, rows in placed.groupby(_MACHINE, sort=True):
        facts = {str(s): _facts(g) for s, g in rows.groupby(_SIDE, sort=True)}
        if len(facts) < 2:
            continue
        base, note = choose_baseline(facts, settings)
        out[str(machine)] = (side_order(facts, settings.by), base, note)
    return out


def _pairs(sides: Mapping[tuple, Side], plans: Mapping[str, tuple]) -> list[tuple]:
    """(cell, side, baseline side, ratio or None) of every non-baseline side with an ok
    or failed record in a cell; the ratios of those whose two sides have values."""
    pairs = []
    for (workload, machine, batch_size, side), mine in sides.items():
        base = plans[machine][1]
        if side != base and (mine.ok or mine.failed):
            pairs.append(((workload, machine, batch_size), side, base))
    refs = [(sides[(*cell, side)], sides.get((*cell, base))) for cell, side, base in pairs]
    need = [i for i, (mine, ref) in enumerate(refs) if ref is not None and mine.n and ref.n]
    ratios = ratio_intervals([(refs[i][0].values, refs[i][1].values) for i in need])
    by_index = dict(zip(need, ratios, strict=True))
    return [(*pair, by_index.get(i)) for i, pair in enumerate(pairs)]


def _sorted(table: pd.DataFrame, plans: Mapping[str, tuple]) -> pd.DataFrame:
    """Rows by workload, machine_device, batch size, then the sides oldest first."""
    rank = {(m, s): i for m, plan in plans.items() for i, s in enumerate(plan[0])}
    keys = zip(table["machine_device"], table["side"], strict=True)
    table = table.assign(_rank=[rank.get(k, -1) for k in keys],
                         _bs=fr.num(table, "batch_size").fillna(-1))  # fmt: skip
    order = ["workload", "machine_device", "_bs", "_rank"]
    return table.sort_values(order, kind="stable", ignore_index=True).drop(columns=["_rank", "_bs"])


def comparison_table(
    runs: pd.DataFrame | None,
    quality: pd.DataFrame | None,
    compare: Mapping | None = None,
    targets: Mapping[str, Mapping | None] | None = None,
    workloads: Sequence[str] | None = None,
) -> pd.DataFrame:
    """The ``comparison`` table; see the module docstring. ``compare`` is the configured
    ``aggregate.compare``, ``targets[workload]`` the configured target, ``workloads`` the
    training workloads (default: every workload with a finite samples_per_s)."""
    settings = CompareSettings.from_config(compare)
    runs = fr.prepare_runs(runs)
    if settings.by == BY_NONE or runs.empty:
        return fr.empty(COMPARISON_COLUMNS)
    if workloads is None:
        workloads = sorted(set(runs.loc[np.isfinite(fr.num(runs, "samples_per_s")), "workload"]))
    runs = with_sides(runs[runs["workload"].isin(list(workloads))], settings.by)
    plans = _baselines(runs, settings)
    hardware = _hardware(runs)
    rows = [_note_row(m, hardware.get(m, ""), settings, note)
            for m, (_, base, note) in plans.items() if base is None]  # fmt: skip
    compared = [m for m, plan in plans.items() if plan[1] is not None]
    runs = runs[runs[_MACHINE].isin(compared) & (runs[_SIDE] != "")]
    sides = build_sides(runs, "samples_per_s", ["workload", _MACHINE, "batch_size", _SIDE])
    found = _outcomes(quality, runs, targets or {})
    disturbed = set(fr.text(runs, "record")[fr.flag(runs, "disturbed")])
    for cell, side, base, ratio in _pairs(sides, plans):
        row = _speed_row(cell, side, base, sides, ratio)
        row.update(by=settings.by, hardware=hardware.get(cell[1], ""))
        row.update(_ttt_columns(found.get(cell[0]), cell, side, base, disturbed))
        rows.append(row)
    table = fr.frame(rows, COMPARISON_COLUMNS)
    if table.empty:
        return table
    table["line"] = [comparison_line(r) for r in table.to_dict("records")]
    return _sorted(table, plans)
