"""The statistics layer: every published statistic of trainbench, computed once, from
the record tables (runs, epochs, per_label_runs, matmul), by :func:`publish`.

Figures and reports only render the tables returned here; docs/statistics.md states
the protocol and the rules, and the module docstrings state what every column means:

* :mod:`.intervals` — ranges below 5 runs, bootstrap CIs from 5, verdicts from intervals;
* :mod:`.speed` — ``speedup``, ``eval_speed``, ``matmul_summary``;
* :mod:`.energy` — ``energy`` (joules per sample, energy ratio and its verdict);
* :mod:`.quality` — ``stability``, ``warnings``;
* :mod:`.repeats` — ``repeats`` and :func:`next_round` (adaptive repeats);
* :mod:`.accuracy` — ``per_label``, ``epoch_summary``, ``task``;
* :mod:`.parity` — ``parity`` (paired: loss drift against float64 and a gross check;
  :mod:`.drift`);
* :mod:`.memory` — ``memory``, ``collapse``;
* :mod:`.crossover` — ``crossover``;
* :mod:`.verdicts` — ``verification``, ``verdicts``;
* :mod:`.overview` — ``overview``, ``attention``;
* :mod:`.cell_time` — ``cell_time`` (where the cells' wall time went, per device).
* :mod:`.breakdown` — ``step_breakdown`` (where a step's time goes and what bounds it);
* :mod:`.targets` — ``time_to_target``, ``quality_curve`` (time to a quality target,
  censored repeats kept); :mod:`.best_setting` — ``best_setting`` (each device at its
  best batch size against the baseline's);
* :mod:`.convergence` — the samples-to-target check, ``time_to_target``'s samples columns;
* :mod:`.across_batch` — ``across_batch_sizes`` (training speed of devices at their own
  batch sizes, labelled apart from the same-batch verdicts);
* :mod:`.compare` — ``comparison`` (one software or results folder against another on the
  same hardware: aggregate.compare).

Every function is pure: pandas in, pandas out, no IO (write the tables with
:func:`trainbench.analysis.tables.write_table`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ProcessPoolExecutor

import numpy as np
import pandas as pd
from trainbench.analysis.published import PUBLISHED_TABLES
from trainbench.analysis.stats import frames as fr
from trainbench.analysis.stats.accuracy import (
    EPOCH_COLUMNS,
    PARITY_COLUMNS,
    PER_LABEL_COLUMNS,
    TASK_COLUMNS,
    epoch_summary_table,
    parity_table,
    per_label_table,
    task_table,
)
from trainbench.analysis.stats.across_batch import ACROSS_BATCH_COLUMNS, across_batch_table
from trainbench.analysis.stats.best_setting import BEST_SETTING_COLUMNS, best_setting_table
from trainbench.analysis.stats.breakdown import (
    BREAKDOWN_TABLE_COLUMNS,
    BoundRule,
    bound_at,
    bounds_by_device,
    step_breakdown_table,
)
from trainbench.analysis.stats.cell_time import CELL_TIME_COLUMNS, cell_time_table
from trainbench.analysis.stats.compare import COMPARISON_COLUMNS, comparison_table
from trainbench.analysis.stats.convergence import SAMPLES_CHECK_COLUMNS, with_samples_check
from trainbench.analysis.stats.crossover import CROSSOVER_COLUMNS, crossover_table
from trainbench.analysis.stats.energy import ENERGY_COLUMNS, energy_table
from trainbench.analysis.stats.intervals import (
    MIN_BOOTSTRAP,
    Interval,
    paired_ratio_interval,
    ratio_interval,
    summarize,
    verdict,
)
from trainbench.analysis.stats.memory import (
    COLLAPSE_COLUMNS,
    MEMORY_COLUMNS,
    collapse_table,
    memory_table,
)
from trainbench.analysis.stats.overview import (
    ATTENTION_COLUMNS,
    OVERVIEW_COLUMNS,
    attention_table,
    overview_table,
)
from trainbench.analysis.stats.parity import ParitySettings
from trainbench.analysis.stats.quality import (
    STABILITY_COLUMNS,
    WARNING_COLUMNS,
    stability_table,
    warnings_table,
)
from trainbench.analysis.stats.repeats import REPEATS_COLUMNS, next_round, repeats_table
from trainbench.analysis.stats.speed import (
    MATMUL_COLUMNS,
    SPEEDUP_COLUMNS,
    eval_speed_table,
    matmul_summary,
    speedup_table,
)
from trainbench.analysis.stats.targets import (
    QUALITY_CURVE_COLUMNS,
    TIME_TO_TARGET_COLUMNS,
    quality_curve_table,
    time_to_target_table,
)
from trainbench.analysis.stats.verdicts import (
    VERDICT_COLUMNS,
    VERIFICATION_COLUMNS,
    verdicts_table,
    verification_table,
)
from trainbench.analysis.worker_processes import worker_context

# The columns of every published table, in order (stability may add failed_<class>).
COLUMNS: dict[str, list[str]] = {
    "speedup": [*SPEEDUP_COLUMNS, "bound", "baseline_bound"],
    "eval_speed": SPEEDUP_COLUMNS,
    "energy": ENERGY_COLUMNS,
    "stability": STABILITY_COLUMNS,
    "repeats": REPEATS_COLUMNS,
    "per_label": PER_LABEL_COLUMNS,
    "task": TASK_COLUMNS,
    "parity": PARITY_COLUMNS,
    "memory": MEMORY_COLUMNS,
    "crossover": CROSSOVER_COLUMNS,
    "collapse": COLLAPSE_COLUMNS,
    "epoch_summary": EPOCH_COLUMNS,
    "matmul_summary": MATMUL_COLUMNS,
    "verification": VERIFICATION_COLUMNS,
    "verdicts": [*VERDICT_COLUMNS, "bound"],
    "warnings": WARNING_COLUMNS,
    "overview": OVERVIEW_COLUMNS,
    "attention": ATTENTION_COLUMNS,
    "cell_time": CELL_TIME_COLUMNS,
    "step_breakdown": BREAKDOWN_TABLE_COLUMNS,
    "time_to_target": [*TIME_TO_TARGET_COLUMNS, *SAMPLES_CHECK_COLUMNS],
    "best_setting": BEST_SETTING_COLUMNS,
    "across_batch_sizes": ACROSS_BATCH_COLUMNS,
    "quality_curve": QUALITY_CURVE_COLUMNS,
    "comparison": COMPARISON_COLUMNS,
}

__all__ = [
    "COLUMNS", "PUBLISHED_TABLES", "Interval", "next_round", "paired_ratio_interval", "publish",
    "ratio_interval", "summarize", "verdict",
]  # fmt: skip


def publish(
    tables: Mapping[str, pd.DataFrame],
    devices: Mapping[str, Sequence[str]],
    baseline: str | None = None,
    repeats: Mapping[str, Mapping] | None = None,
    parity: Mapping | None = None,
    workers: int = 1,
    step_breakdown: Mapping | None = None,
    targets: Mapping[str, Mapping | None] | None = None,
    compare: Mapping | None = None,
) -> dict[str, pd.DataFrame]:
    """Every published table, keyed by the names in :data:`PUBLISHED_TABLES` (in that
    order), from the record tables ``runs``, ``epochs``, ``per_label_runs`` and
    ``matmul`` (any may be missing or empty). ``devices[workload]`` is the config's
    device order (the first is the default baseline), ``baseline`` the configured
    ``report.baseline_device``, ``repeats[workload]`` its repeat settings,
    ``parity`` the configured ``report.parity`` (see :mod:`.parity`); the record tables
    ``step_losses`` and ``references`` feed parity's loss-drift check;
    ``step_breakdown`` is the configured ``report.step_breakdown`` (labels' thresholds,
    :mod:`.breakdown`); ``targets[workload]`` its configured ``target`` (time to target
    from the record table ``quality``, :mod:`.targets`); ``compare`` the configured
    ``aggregate.compare`` (:mod:`.compare`; None: by software). With ``workers``
    > 1 the speed and memory tables are computed in a forked process beside the others
    (the same tables: every bootstrap is seeded by its own call); on macOS, where the
    process would be spawned, in this one."""
    runs = fr.prepare_runs(tables.get("runs"))
    epochs, matmul = tables.get("epochs"), tables.get("matmul")
    baselines = fr.choose_baselines(runs, devices, baseline, matmul)
    kinds = fr.workload_kinds(runs, epochs, matmul)
    training = [w for w, k in kinds.items() if k == "training"]
    side_args = (runs, epochs, baselines, training)
    out: dict[str, pd.DataFrame] = {}
    with _beside(workers, runs) as pool:
        pending: Future | None = pool.submit(_side_tables, *side_args) if pool else None
        if pending is None:
            out.update(_side_tables(*side_args))
        out["stability"] = stability_table(runs, epochs, matmul)
        out["per_label"] = per_label_table(tables.get("per_label_runs"), baselines)
        out["task"] = task_table(runs, training)
        out["parity"] = parity_table(
            runs[runs["workload"].isin(training)],
            baselines,
            tables.get("step_losses"),
            tables.get("references"),
            ParitySettings.from_config(parity),
        )
        out["matmul_summary"] = matmul_summary(matmul, baselines)
        out["collapse"] = collapse_table(runs)
        out["epoch_summary"] = epoch_summary_table(epochs)
        out["verification"] = verification_table(runs, training)
        out["overview"] = overview_table(runs, devices, baselines, kinds)
        out["attention"] = attention_table(runs)
        out["cell_time"] = cell_time_table(runs, devices)
        out["step_breakdown"] = step_breakdown_table(
            runs[runs["workload"].isin(training)], BoundRule.from_config(step_breakdown)
        )
        if pending is not None:
            out.update(pending.result())
    out["speedup"] = _with_bounds(out["speedup"], out["step_breakdown"])
    out["repeats"] = repeats_table(runs, out["speedup"], baselines, repeats)
    out["crossover"] = crossover_table(out["speedup"], out["matmul_summary"])
    out["verdicts"] = verdicts_table(runs, out["speedup"], out["parity"], baselines, training)
    bounds = bounds_by_device(out["step_breakdown"])
    out["verdicts"]["bound"] = [
        bounds.get((w, d))
        for w, d in zip(out["verdicts"]["workload"], out["verdicts"]["device"], strict=True)
    ]
    quality, targets = tables.get("quality"), targets or {}
    times = time_to_target_table(quality, runs, baselines, targets, training)
    out["time_to_target"] = with_samples_check(times, quality, runs, baselines, targets, training)
    out["best_setting"] = best_setting_table(quality, runs, baselines, targets, training)
    out["across_batch_sizes"] = across_batch_table(runs, baselines, training)
    out["quality_curve"] = quality_curve_table(quality, runs, targets, training)
    out["comparison"] = comparison_table(runs, quality, compare, targets, training)
    out["warnings"] = warnings_table(runs, matmul, tables.get("setups"), out["memory"])
    return {name: out[name] for name in PUBLISHED_TABLES}


def _with_bounds(speedup: pd.DataFrame, breakdown: pd.DataFrame) -> pd.DataFrame:
    """The speedup table with each side's label (step_breakdown's ``bound``)."""
    labels = bound_at(breakdown)
    speedup = speedup.copy()
    keys = zip(
        speedup["workload"],
        speedup["batch_size"],
        speedup["device"],
        speedup["baseline"],
        strict=True,
    )
    pairs = [(labels.get((w, d, b)), labels.get((w, base, b))) for w, b, d, base in keys]
    speedup["bound"] = [p[0] for p in pairs]
    speedup["baseline_bound"] = [p[1] for p in pairs]
    return speedup


def _side_tables(
    runs: pd.DataFrame, epochs: pd.DataFrame | None, baselines: Mapping, training: Sequence[str]
) -> dict[str, pd.DataFrame]:
    """``speedup``, ``eval_speed``, ``energy`` (their bootstrap intervals) and ``memory``
    (a growth fit per run): about half of :func:`publish`'s time, and needing none of
    the other tables."""
    with_eval = set(runs.loc[np.isfinite(fr.num(runs, "eval_samples_per_s")), "workload"])
    return {
        "speedup": speedup_table(runs, baselines, workloads=training),
        "eval_speed": eval_speed_table(
            runs, baselines, workloads=[w for w in training if w in with_eval]
        ),
        "energy": energy_table(runs, baselines, workloads=training),
        "memory": memory_table(runs, epochs),
    }


def _beside(workers: int, runs: pd.DataFrame) -> ProcessPoolExecutor | contextlib.nullcontext:
    """A one-process pool, forked from this one, for :func:`_side_tables`; none with one
    worker, where no cell has the runs for a bootstrap (then everything is quick), or
    where the process would be spawned (macOS: it would import pandas, scipy and this
    package before it starts, more than it saves; :mod:`trainbench.analysis.worker_processes`).
    scipy is imported before the fork, not in each half."""
    if workers < 2 or runs.empty:
        return contextlib.nullcontext()
    cells = runs.groupby(["workload", "device", "batch_size"], dropna=False).size()
    if not (cells >= MIN_BOOTSTRAP).any():
        return contextlib.nullcontext()
    context = worker_context("statistics", 1, spawn_pays=False)
    if context is None:
        return contextlib.nullcontext()
    import scipy.stats  # noqa: F401 - both halves bootstrap

    return ProcessPoolExecutor(max_workers=1, mp_context=context)
