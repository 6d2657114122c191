"""Time to a quality target: the ``time_to_target``, ``best_setting`` and
``quality_curve`` tables (docs/statistics.md §4), from the record table ``quality`` (one
row per evaluation pass during training) and each workload's target.

A repeat's **time to target** is the ``train_seconds`` (timed training regions so far) of
its first evaluation pass whose metric meets the target; its granularity is the
evaluation cadence (``eval_every``). A repeat that never meets it is **censored**: its
time is "more than" its last pass's ``train_seconds``, kept as +inf in every order
statistic, never dropped. So a median exists only while more than half of the repeats
reached the target; an interval over censored repeats is the range (its high end +inf),
whatever the number of repeats.

``time_to_target`` — one row per training workload × device × batch size with ok
records: workload, device, batch_size; metric, target, direction ("≥" higher is better,
"≤" lower); eval_every; repeats (ok records), reached; median_s, low, high, interval
(training time to target: the median over repeats, censored as +inf, and its interval:
the range below 5 repeats or with any censored repeat, else a bootstrap CI as
:mod:`.intervals` makes it); censored_after_s (the longest training of a repeat that did
not reach it); wall_median_s (from the attempt's start to the end of that pass: process
start, data, model, compilation, warm-up and every evaluation included, the canary
excluded), samples_median, steps_median, joules_median (training regions' energy to
target; empty unless every reached repeat measured at least the minimum energy window);
baseline (device), baseline_median_s; speedup = baseline median ÷ this median (how many
times sooner), speedup_low, speedup_high, speedup_interval; verdict and reason.

Verdict, the first rule that applies: ``insufficient data`` (no ok repeat, no quality
curve in the records, no target, or a metric whose direction is unknown); ``not
reached`` (the median is not reached); ``baseline``; ``insufficient data`` (no baseline
cell at this batch size, or fewer than 3 ok repeats on a side); ``disturbed`` (a repeat
on either side was disturbed); ``sooner`` / ``later`` (the speedup interval above /
below 1); ``no clear difference``. A repeat that missed the target, or a metric
that was not finite, is said in the reason (:mod:`.target_words`).

``best_setting`` — each device at its best batch size, compared with the baseline
device's best: :mod:`.best_setting` (built on this module's cells and rules).

``quality_curve`` — per cell and evaluation pass (the same pass index in every repeat):
repeats, median train_seconds, the target metric's median, min and max over repeats.
Figures draw it; nothing else is computed from it.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping

import numpy as np
import pandas as pd
from trainbench.analysis.stats import frames as fr
from trainbench.analysis.stats import target_words as words
from trainbench.analysis.stats.censored import median_if_reached, time_interval, times_sooner
from trainbench.analysis.stats.intervals import INSUFFICIENT, NO_CLEAR, Interval
from trainbench.analysis.stats.speed import DISTURBED, MIN_REPEATS
from trainbench.analysis.stats.target_words import BASELINE, LATER, NOT_REACHED, SOONER
from trainbench.analysis.tables import compact, interval_text, ratio_text

NOT_FINITE = "not_finite_metrics"  # the quality table's column of metrics that were not finite

TIME_TO_TARGET_COLUMNS = [
    "workload", "device", "batch_size", "metric", "target", "direction", "eval_every",
    "repeats", "reached", "median_s", "low", "high", "interval", "censored_after_s",
    "wall_median_s", "samples_median", "steps_median", "joules_median", "baseline",
    "baseline_median_s", "speedup", "speedup_low", "speedup_high", "speedup_interval",
    "verdict", "reason",
]  # fmt: skip
QUALITY_CURVE_COLUMNS = [
    "workload", "device", "batch_size", "point", "epoch", "repeats", "train_seconds",
    "metric", "value", "value_min", "value_max", "target",
]  # fmt: skip


def base_workload(name: str) -> str:
    """The config's workload name of a table's (``"clip [seed 1]"`` -> ``"clip"``)."""
    return str(name).split(" [", 1)[0]


def resolve_targets(
    targets: Mapping[str, Mapping | None], runs: pd.DataFrame
) -> dict[str, dict | None]:
    """Per workload: {metric, value, higher_is_better (None: unknown)}, the metric
    defaulting to the workload's primary one and the direction read from the bundled
    workload's metrics, or from the records for an own workload's primary metric."""
    from trainbench.config.targets import metric_of, target_metric

    out: dict[str, dict | None] = {}
    for workload in sorted(set(runs["workload"])) if "workload" in runs else []:
        base = base_workload(workload)
        target = targets.get(base)
        if not target:
            out[workload] = None
            continue
        mine = runs[(runs["workload"] == workload) & (runs["status"] == "ok")]
        primary = (
            next(iter(mine["primary_metric"].dropna()), None) if "primary_metric" in mine else None
        )
        metric = target_metric(base, target) or primary
        known = metric_of(base, metric) if metric else None
        if known is not None:
            higher = known.higher_is_better
        elif (
            metric == primary
            and "higher_is_better" in mine
            and mine["higher_is_better"].notna().any()
        ):
            higher = bool(mine["higher_is_better"].dropna().iloc[0])
        else:
            higher = None
        out[workload] = {
            "metric": metric,
            "value": float(target["value"]),
            "higher_is_better": higher,
        }
    return out


def _not_finite(g: pd.DataFrame, values: pd.Series, metric: str) -> int:
    """Evaluations of ``g`` whose ``metric`` was NaN or infinite: null in the record, which
    :mod:`trainbench.analysis.quality_rows` names in ``not_finite_metrics``."""
    named = fr.text(g, NOT_FINITE).str.split(";").map(lambda names: metric in names)
    return int(named.sum()) + int(np.isinf(values.to_numpy(dtype=float)).sum())


def repeat_outcomes(quality: pd.DataFrame, target: dict) -> pd.DataFrame:
    """One row per record: reached, time (inf where censored), censored_after (its
    training seconds) and censored_epochs (its epochs), wall, samples, steps, joules;
    evaluations and not_finite (those whose metric was not finite)."""
    column = f"eval_{target['metric']}"
    rows = []
    for (workload, device, batch_size, record), g in quality.groupby(
        ["workload", "device", "batch_size", "record"], sort=True
    ):
        g = g.sort_values("point")
        values = (
            pd.to_numeric(g[column], errors="coerce")
            if column in g
            else pd.Series(np.nan, index=g.index)
        )
        meets = (
            values >= target["value"] if target["higher_is_better"] else values <= target["value"]
        ) & np.isfinite(values)
        hit = g[meets.fillna(False).to_numpy()]
        last = g.iloc[-1]
        row = {"workload": workload, "device": device, "batch_size": batch_size, "record": record,
               "rep": int(g["rep"].iloc[0]), "has_metric": bool(np.isfinite(values).any()),
               "evaluations": int(len(g)), "not_finite": _not_finite(g, values, target["metric"]),
               "censored_after": float(last["train_seconds"]),
               "censored_epochs": fr.num(g, "epoch").iloc[-1]}  # fmt: skip
        if hit.empty:
            row.update(reached=False, time=math.inf, wall=math.inf, samples=math.inf,
                       steps=math.inf, joules=math.nan)  # fmt: skip
        else:
            first = hit.iloc[0]
            energy_ok = (
                pd.notna(first.get("train_joules"))
                and pd.notna(first.get("energy_min_seconds"))
                and first["energy_window_seconds"] >= first["energy_min_seconds"]
            )
            row.update(
                reached=True, time=float(first["train_seconds"]),
                wall=float(first["wall_seconds"]) if pd.notna(first["wall_seconds"]) else math.nan,
                samples=float(first["samples"]), steps=float(first["steps"]),
                joules=float(first["train_joules"]) if energy_ok else math.nan,
            )  # fmt: skip
        rows.append(row)
    return pd.DataFrame(rows)


def _cell_stats(outcomes: pd.DataFrame) -> dict:
    times = outcomes["time"].to_numpy(dtype=float)
    summary = time_interval(times)
    reached = outcomes[outcomes["reached"]]
    censored = outcomes.loc[~outcomes["reached"], "censored_after"]
    epochs = outcomes.loc[~outcomes["reached"], "censored_epochs"]
    joules = reached["joules"].to_numpy(dtype=float)
    return {
        "times": times, "repeats": int(times.size), "reached": int(reached.shape[0]),
        "median_s": summary.estimate, "low": summary.low, "high": summary.high,
        "interval": summary.kind,
        "censored_after_s": float(censored.max()) if not censored.empty else math.nan,
        "censored_epochs": float(epochs.max()) if not epochs.empty else math.nan,
        "evaluations": int(outcomes["evaluations"].sum()),
        "not_finite": int(outcomes["not_finite"].sum()),
        "wall_median_s": median_if_reached(outcomes, "wall"),
        "samples_median": median_if_reached(outcomes, "samples"),
        "steps_median": median_if_reached(outcomes, "steps"),
        "joules_median": float(np.median(joules)) if joules.size and np.isfinite(joules).all() else math.nan,
    }  # fmt: skip


def _direction(target: dict | None) -> str:
    if not target or target["higher_is_better"] is None:
        return ""
    return "≥" if target["higher_is_better"] else "≤"


def judge(device, base, mine: dict | None, ref: dict | None, ratio, disturbed) -> tuple[str, str]:
    """(verdict, reason) of ``mine`` against ``ref`` (cell stats; ``device`` and ``base``
    their labels in the reason) by the rules of the module docstring."""
    if mine is None or mine["repeats"] == 0:
        return INSUFFICIENT, "no ok repeat"
    if not math.isfinite(mine["median_s"]):
        return NOT_REACHED, (
            f"reached in {mine['reached']} of {mine['repeats']} repeats: the median repeat "
            f"did not reach the target within {compact(mine['censored_after_s'])} s of training"
            + words.not_finite(mine)
        )
    if device == base:
        return BASELINE, ""
    if ref is None or ref["repeats"] == 0:
        return INSUFFICIENT, f"no ok run of the baseline {base} here"
    for name, side in ((device, mine), (base, ref)):
        if side["repeats"] < MIN_REPEATS:
            return (
                INSUFFICIENT,
                f"{name} has {fr.plural(side['repeats'], 'ok repeat')}; a verdict needs {MIN_REPEATS}",
            )
    if disturbed:
        return DISTURBED, "disturbed repeats: " + ", ".join(disturbed)
    if ratio.low > 1:
        result = SOONER
    elif ratio.high < 1:
        result = LATER
    else:
        result = NO_CLEAR
    censored = words.censored_outcome(device, base, mine, ref)
    if censored:
        verdict = words.overall(result, ratio.estimate, ratio.low, ratio.high)
        return result, f"{censored}; overall {verdict}, {ratio.kind}"
    text = (f"{device} reaches it in {compact(mine['median_s'])} s of training, {base} in "
             f"{compact(ref['median_s'])} s: {ratio_text(ratio.estimate)} "
             f"({interval_text(ratio.low, ratio.high)}, {ratio.kind})")  # fmt: skip
    return result, text


def ratio_columns(is_baseline: bool, mine, ref) -> tuple[dict, Interval | None]:
    """The speedup columns (times sooner, its interval) and the Interval (None: no ratio)."""
    empty = {"speedup_low": np.nan, "speedup_high": np.nan, "speedup_interval": ""}
    if is_baseline:
        return {"speedup": 1.0, **empty}, None
    if mine is None or ref is None or not mine["repeats"] or not ref["repeats"]:
        return {"speedup": np.nan, **empty}, None
    if not math.isfinite(mine["median_s"]):
        return {"speedup": np.nan, **empty}, None
    ratio = times_sooner(ref["times"], mine["times"])
    return {"speedup": ratio.estimate, "speedup_low": ratio.low, "speedup_high": ratio.high,
            "speedup_interval": ratio.kind}, ratio  # fmt: skip


def _disturbed_records(runs: pd.DataFrame) -> set[str]:
    if "disturbed" not in runs or "record" not in runs:
        return set()
    return set(runs.loc[runs["disturbed"].fillna(False).astype(bool), "record"].astype(str))


class _Cells:
    """The cells of one workload: their outcomes (read by .convergence), stats, target."""

    def __init__(
        self, workload: str, quality: pd.DataFrame, runs: pd.DataFrame, target: dict | None
    ):
        self.workload, self.target = workload, target
        ok = runs[(runs["workload"] == workload) & (runs["status"] == "ok")]
        self.keys = sorted(
            {(str(d), int(b)) for d, b in zip(ok["device"], ok["batch_size"], strict=True)}
        )
        self.curve = quality[quality["workload"] == workload] if not quality.empty else quality
        known = target is not None and target["higher_is_better"] is not None
        usable = known and not self.curve.empty
        self.outcomes = repeat_outcomes(self.curve, target) if usable else pd.DataFrame()
        outcomes = self.outcomes
        self.has_metric = bool(outcomes["has_metric"].any()) if not outcomes.empty else False
        self.evaluations = int(outcomes["evaluations"].sum()) if not outcomes.empty else 0
        self.not_finite = int(outcomes["not_finite"].sum()) if not outcomes.empty else 0
        disturbed = _disturbed_records(ok)
        self.stats: dict[tuple, dict] = {}
        self.disturbed: dict[tuple, list[str]] = {}
        for key in self.keys:
            mine = (
                outcomes[(outcomes["device"] == key[0]) & (outcomes["batch_size"] == key[1])]
                if not outcomes.empty
                else outcomes
            )
            if not mine.empty:
                self.stats[key] = _cell_stats(mine)
                self.disturbed[key] = [
                    f"{key[0]} rep {rep}"
                    for rep, record in zip(mine["rep"], mine["record"], strict=True)
                    if str(record) in disturbed
                ]

    def eval_every(self, device: str, batch_size: int) -> str:
        """The cell's cadence as its records state it ("steps 16"; a {passes: N} cadence
        resolves to steps per batch size, so it is read per cell)."""
        if self.curve.empty:
            return ""
        cell = self.curve[
            (self.curve["device"] == device) & (self.curve["batch_size"] == batch_size)
        ]
        return ", ".join(sorted(set(cell["eval_every"].dropna())))

    def unusable_reason(self) -> str | None:
        if self.target is None:
            return f"no target: set workloads.{base_workload(self.workload)}.target"
        if self.target["higher_is_better"] is None:
            return (f"whether higher or lower {self.target['metric']} is better is unknown: "
                    "an own workload declares only its primary metric's direction")  # fmt: skip
        if self.curve.empty:
            return "the records hold no quality curve (made by an older trainbench)"
        if not self.has_metric and self.not_finite:
            return (f"the metric {self.target['metric']!r} was not finite (NaN or infinite) in "
                    f"{self.not_finite} of {self.evaluations} evaluations")  # fmt: skip
        if not self.has_metric:
            return f"the records report no metric {self.target['metric']!r}"
        return None

    def target_columns(self) -> dict:
        t = self.target or {}
        return {
            "metric": t.get("metric"),
            "target": t.get("value"),
            "direction": _direction(self.target),
        }


def workload_cells(
    quality: pd.DataFrame | None,
    runs: pd.DataFrame,
    targets: Mapping[str, Mapping | None],
    workloads: list[str],
) -> Iterator[tuple[str, _Cells]]:
    """Each workload with its cells (outcomes and stats against its resolved target)."""
    runs = fr.prepare_runs(runs)
    quality = quality if quality is not None else pd.DataFrame()
    resolved = resolve_targets(targets, runs)
    for workload in workloads:
        yield workload, _Cells(workload, quality, runs, resolved.get(workload))


def time_to_target_table(
    quality: pd.DataFrame | None,
    runs: pd.DataFrame,
    baselines: fr.Baselines,
    targets: Mapping[str, Mapping | None],
    workloads: list[str],
) -> pd.DataFrame:
    """The ``time_to_target`` table; see the module docstring."""
    rows = []
    for workload, cells in workload_cells(quality, runs, targets, workloads):
        base = fr.baseline_of(baselines, workload)
        problem = cells.unusable_reason()
        for device, batch_size in cells.keys:
            mine = cells.stats.get((device, batch_size))
            ref = cells.stats.get((base, batch_size))
            row = {"workload": workload, "device": device, "batch_size": batch_size,
                   **cells.target_columns(), "eval_every": cells.eval_every(device, batch_size),
                   "baseline": base}  # fmt: skip
            if problem is not None or mine is None:
                rows.append({**row, "repeats": 0, "reached": 0, "verdict": INSUFFICIENT,
                             "reason": problem or "no quality curve in this cell's records"})  # fmt: skip
                continue
            ratio_cols, ratio = ratio_columns(device == base, mine, ref)
            disturbed = cells.disturbed.get((device, batch_size), []) + cells.disturbed.get(
                (base, batch_size), []
            )
            verdict, reason = judge(
                device, base, mine, ref, ratio, disturbed if device != base else []
            )
            if (
                verdict == INSUFFICIENT
                and ref is None
                and (base, batch_size) not in cells.keys
                and device != base
            ):
                reason = (f"{base} ran no cell at bs {batch_size} (each device its own batch "
                          "sizes): best_setting compares the devices across batch sizes")  # fmt: skip
            rows.append({**row, **{k: v for k, v in mine.items() if k != "times"},
                         "baseline_median_s": ref["median_s"] if ref else np.nan,
                         **ratio_cols, "verdict": verdict, "reason": reason})  # fmt: skip
    return fr.frame(rows, TIME_TO_TARGET_COLUMNS)


def quality_curve_table(
    quality: pd.DataFrame | None,
    runs: pd.DataFrame,
    targets: Mapping[str, Mapping | None],
    workloads: list[str],
) -> pd.DataFrame:
    """The ``quality_curve`` table; see the module docstring."""
    if quality is None or quality.empty:
        return fr.empty(QUALITY_CURVE_COLUMNS)
    resolved = resolve_targets(targets, fr.prepare_runs(runs))
    rows = []
    for workload in workloads:
        target = resolved.get(workload)
        metric = (target or {}).get("metric")
        column = f"eval_{metric}"
        mine = quality[quality["workload"] == workload]
        if mine.empty or column not in mine:
            continue
        for (device, batch_size, point), g in mine.groupby(
            ["device", "batch_size", "point"], sort=True
        ):
            values = pd.to_numeric(g[column], errors="coerce").dropna()
            rows.append({
                "workload": workload, "device": device, "batch_size": batch_size,
                "point": point, "epoch": int(g["epoch"].max()), "repeats": int(len(g)),
                "train_seconds": float(g["train_seconds"].median()), "metric": metric,
                "value": float(values.median()) if len(values) else np.nan,
                "value_min": float(values.min()) if len(values) else np.nan,
                "value_max": float(values.max()) if len(values) else np.nan,
                "target": (target or {}).get("value"),
            })  # fmt: skip
    return fr.frame(rows, QUALITY_CURVE_COLUMNS)
