"""Figures that compute nothing: each family renders published tables of the statistics
layer (``trainbench.analysis.stats``, docs/statistics.md) and, as dots, raw per-run values of
the record tables. No statistic is computed here (no median, interval, quantile or
aggregation), so a figure and a table never disagree.

``FIGURES[name](tables, out_path, **style)`` writes one figure; :func:`draw_figures`
writes several, side by side in worker processes (forked on Linux, spawned on macOS).
``tables`` maps table names to frames -- published (speedup, eval_speed, stability,
per_label, memory, crossover, epoch_summary, matmul_summary, verification, ...) and
record (runs, epochs, matmul). A missing or empty table gives a small figure saying
there is nothing to draw, never an exception. Style keywords: ``dpi`` (110),
``font_scale`` (1.0), ``title``, ``paper`` (a :class:`Paper`: the figure at a paper's
width with fonts in print points, :func:`paper_from_config` of ``report.figures``). PNG
by default, SVG or PDF by suffix; the same input gives the same bytes.

=============  ========================================================================
throughput     speedup (median, low, high, interval) + runs (samples_per_s dots)
speedup        speedup (speedup, speedup_low/high, speedup_interval, verdict, baseline)
epoch_time     epochs (timed_seconds of full epochs, dots) + epoch_summary (median tick)
loss           epoch_summary (train_loss, train_loss_min/max, n)
per_label      per_label (f1, support, f1_minus_baseline)
matmul         matmul_summary (gflops, gflops_low/high, interval) + crossover + matmul
memory         memory (memory_peak/initial_bytes, peak_fraction_of_limit, memory_method)
energy         energy (samples_per_joule, spj_low/high, unavailable) + speedup (median, low/high)
quality        quality_curve (train_seconds, value, value_min/max, target)
time_to_target best_setting (each device at its best batch size: median_s, low, high,
               interval, speedup, verdict) + time_to_target (the same, per cell)
across_batch   across_batch_sizes (speedup, speedup_low/high, interval, verdict, sizes)
comparison     comparison (ratio, low, high, interval, verdict, side, baseline_side)
=============  ========================================================================
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from concurrent.futures import ProcessPoolExecutor

import pandas as pd
from trainbench.analysis.figures.comparison import comparison_figure
from trainbench.analysis.figures.energy import energy_figure
from trainbench.analysis.figures.epoch_time import epoch_time_figure
from trainbench.analysis.figures.loss import loss_figure
from trainbench.analysis.figures.matmul import matmul_figure
from trainbench.analysis.figures.memory import memory_figure
from trainbench.analysis.figures.paper import Paper, paper_from_config
from trainbench.analysis.figures.per_label import per_label_figure
from trainbench.analysis.figures.speedup import across_batch_figure, speedup_figure
from trainbench.analysis.figures.step_breakdown import step_breakdown_figure
from trainbench.analysis.figures.style import device_color, device_order
from trainbench.analysis.figures.targets import quality_figure, time_to_target_figure
from trainbench.analysis.figures.throughput import throughput_figure
from trainbench.analysis.published import FIGURE_NAMES
from trainbench.analysis.worker_processes import worker_context

__all__ = [
    "FIGURES",
    "FIGURE_NAMES",
    "Paper",
    "comparison_figure",
    "device_color",
    "device_order",
    "draw_figures",
    "energy_figure",
    "epoch_time_figure",
    "loss_figure",
    "matmul_figure",
    "memory_figure",
    "step_breakdown_figure",
    "paper_from_config",
    "per_label_figure",
    "quality_figure",
    "time_to_target_figure",
    "speedup_figure",
    "throughput_figure",
    "across_batch_figure",
]


FIGURES: dict[str, Callable[[Mapping[str, pd.DataFrame], str | os.PathLike], None]] = {
    "throughput": throughput_figure,
    "speedup": speedup_figure,
    "epoch_time": epoch_time_figure,
    "loss": loss_figure,
    "per_label": per_label_figure,
    "matmul": matmul_figure,
    "memory": memory_figure,
    "energy": energy_figure,
    "step_breakdown": step_breakdown_figure,
    "quality": quality_figure,
    "time_to_target": time_to_target_figure,
    "across_batch": across_batch_figure,
    "comparison": comparison_figure,
}

# The order :func:`draw_figures` hands the families to its processes: the ones with the
# most panels and labels first, so that the processes finish together (scheduling only).
DRAW_ORDER = (
    "memory", "speedup", "loss", "epoch_time", "quality", "throughput", "per_label", "matmul",
    "energy", "time_to_target", "step_breakdown", "across_batch", "comparison",
)  # fmt: skip


def draw_figures(
    tables: Mapping[str, pd.DataFrame],
    paths: Mapping[str, str | os.PathLike],
    workers: int = 1,
    done: Callable[[str, str | os.PathLike], None] | None = None,
    **style,
) -> None:
    """Write the figure of every family in ``paths`` (name -> file). With ``workers`` > 1
    the families are drawn side by side in that many processes, forked from this one on
    Linux (matplotlib is already loaded: a fork pays no imports), spawned on macOS
    (:mod:`trainbench.analysis.worker_processes`); each family is drawn whole by one
    process, so its bytes are those it has drawn alone. ``done`` is called with each
    family's name and path once it is written; ``style`` goes to every family (dpi,
    font_scale)."""
    unknown = sorted(set(paths) - set(FIGURES))
    if unknown:
        raise KeyError(f"unknown figure famil{'y' if len(unknown) == 1 else 'ies'}: {unknown}")
    names = [n for n in DRAW_ORDER if n in paths] + [n for n in paths if n not in DRAW_ORDER]
    workers = min(workers, len(names))
    if workers <= 1:
        for name in names:
            FIGURES[name](tables, paths[name], **style)
            if done:
                done(name, paths[name])
        return
    context = worker_context("figures", workers)
    with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
        futures = {name: pool.submit(FIGURES[name], tables, paths[name], **style) for name in names}
        for name, future in futures.items():
            future.result()  # a family's exception is raised here, in the job
            if done:
                done(name, paths[name])
