"""Tables that read right (issue 41, item 3): counts shown exactly in the Markdown tables,
the reports and the console; no line comparing the baseline with itself; repeats that
missed the target said in words; a metric that was not finite named; no warning from
the time-to-target figure; the windows-cover text the same fact in every row; and
results/report.md holding the console's time-to-target lines."""

from __future__ import annotations

import json
import math
import re
import warnings

import numpy as np
import pandas as pd
import pytest
from stats_helpers import run
from test_aggregate import record
from test_time_to_target import REACHES_AT_2, TARGET, _tables
from trainbench.analysis.console import summary_lines
from trainbench.analysis.quality_rows import quality_rows
from trainbench.analysis.report import render_report, render_workload_report
from trainbench.analysis.stats.speed import speedup_table
from trainbench.analysis.stats.targets import best_setting_table, time_to_target_table
from trainbench.analysis.tables import to_markdown, write_table
from trainbench.common.records import write_record

BASE = {"image_cnn": "cpu"}
NEVER = [0.5, 0.6, 0.7]


def _tables_at(cells, steps_per_eval):
    """``_tables`` with each cell's steps per evaluation (samples = steps x batch size)."""
    quality, runs = _tables(cells)
    per_device = quality["device"].map(steps_per_eval)
    quality["steps"] = per_device * (quality["point"] + 1)
    quality["samples"] = quality["steps"] * quality["batch_size"]
    return quality, runs


def _publish(tmp_path, quality, runs, baselines=BASE, targets=TARGET):
    """time_to_target and best_setting written as the statistics rule writes them."""
    tables = tmp_path / "results" / "tables"
    tables.mkdir(parents=True, exist_ok=True)
    frames = {
        "time_to_target": time_to_target_table(quality, runs, baselines, targets, ["image_cnn"]),
        "best_setting": best_setting_table(quality, runs, baselines, targets, ["image_cnn"]),
    }
    inputs = {}
    for name, frame in frames.items():
        write_table(frame, tables / f"{name}.csv", tables / f"{name}.md")
        inputs[name] = str(tables / f"{name}.csv")
    return frames, inputs


def _md_rows(path) -> list[dict[str, str]]:
    """A Markdown pipe table's rows as {header: cell text}."""
    lines = [line for line in path.read_text().splitlines() if line.startswith("|")]
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in lines]
    return [dict(zip(cells[0], row, strict=True)) for row in cells[2:]]


# ----------------------------------------------------------------------------- 5. warnings


def test_the_time_to_target_figure_warns_of_nothing_when_a_workload_never_reaches():
    from trainbench.analysis.figures import style
    from trainbench.analysis.figures.targets import build_time_to_target

    rows = []
    # gru: no time at all (no target, a metric never finite); clip: never reached.
    cases = (("image_cnn", 20.0, "baseline"), ("clip", np.inf, "not reached"),
             ("gru", np.nan, "insufficient data"))  # fmt: skip
    for workload, median, verdict in cases:
        for device in ("cpu", "cuda"):
            rows.append({"workload": workload, "device": device, "batch_size": 64,
                         "metric": "accuracy", "direction": "≥", "target": 0.8,
                         "median_s": median, "low": median if np.isfinite(median) else np.nan,
                         "high": median if np.isfinite(median) else np.nan,
                         "interval": "range of 3 runs", "speedup": 1.0, "verdict": verdict})  # fmt: skip
    tables = {"time_to_target": pd.DataFrame(rows)}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fig = style.build_figure(lambda st: build_time_to_target(tables, st), {"dpi": 40})
        fig.canvas.draw()
    import matplotlib.pyplot as plt

    plt.close(fig)
    assert [str(w.message) for w in caught] == []


# ----------------------------------------------------------------------------- 6. windows


def test_windows_cover_reads_the_same_with_no_shared_batch_size():
    phase = "epochs 2-4: in-batch and FAISS-mined hard negatives"
    runs = pd.DataFrame(
        [run("two_tower", "cpu", 64, rep, samples_per_s=100.0 + rep, window_phase=phase)
         for rep in range(3)]
        + [run("two_tower", "cuda", 512, rep, samples_per_s=900.0 + rep, window_phase=phase)
           for rep in range(3)]
    )  # fmt: skip
    table = speedup_table(runs, {"two_tower": "cpu"}).set_index("device")
    assert table.loc["cpu", "window_phase"] == phase
    assert table.loc["cuda", "window_phase"] == phase  # not "differs: ... cpu whole run"
    # Where both sides ran at the row's batch size and their windows differ, it says so.
    both = pd.concat([runs, pd.DataFrame([run("two_tower", "cpu", 512, rep, samples_per_s=90.0)
                                          for rep in range(3)])])  # fmt: skip
    table = speedup_table(both, {"two_tower": "cpu"})
    cuda = table[(table["device"] == "cuda") & (table["batch_size"] == 512)].iloc[0]
    assert cuda["window_phase"] == f"differs: cuda {phase}, cpu whole run"
