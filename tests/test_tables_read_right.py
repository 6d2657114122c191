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


def _itself(line: str) -> bool:
    """A line comparing a backend with itself ("cpu vs cpu")."""
    return bool(re.search(r"\b([\w@-]+) vs \1\b", line))


# ----------------------------------------------------------------------------- 1. counts


def test_counts_read_exactly_in_tables_reports_and_console(tmp_path):
    # bs 1024: cpu reaches at its 2nd evaluation after 8 steps (8,192 samples), cuda after
    # 16 (16,384); mps never does, so best_setting's batch_size column holds a NaN.
    quality, runs = _tables_at(
        [("cpu", 1024, REACHES_AT_2, 10.0), ("cuda", 1024, REACHES_AT_2, 2.0),
         ("mps", 1024, [NEVER] * 3, 1.0)],
        {"cpu": 4, "cuda": 8, "mps": 4},
    )  # fmt: skip
    frames, inputs = _publish(tmp_path, quality, runs)
    assert frames["best_setting"]["batch_size"].dtype == float  # the NaN made it float
    tables = tmp_path / "results" / "tables"

    same = {r["device"]: r for r in _md_rows(tables / "time_to_target.md")}
    assert same["cpu"]["batch_size"] == "1024" and same["cpu"]["samples_median"] == "8192"
    assert same["cuda"]["samples_median"] == "16384" and same["cuda"]["steps_median"] == "16"
    assert same["cpu"]["repeats"] == "3" and same["cpu"]["reached"] == "3"
    best = {r["backend"]: r for r in _md_rows(tables / "best_setting.md")}
    assert best["cuda"]["batch_size"] == "1024" and best["cuda"]["baseline_batch_size"] == "1024"
    assert best["cpu"]["samples_median"] == "8192" and best["cuda"]["samples_median"] == "16384"
    assert best["cuda"]["candidates"] == "1" and best["cuda"]["repeats"] == "3"
    assert best["mps"]["batch_size"] == "—"
    for name in ("time_to_target.md", "best_setting.md"):
        text = (tables / name).read_text()
        assert not re.search(r"\b(1020|8190|16400|1024\.0)\b", text), name

    report = render_workload_report("image_cnn", inputs, tmp_path / "results/reports/x.md")
    assert "| 1024 |" in report and "| 8192 |" in report and "| 16384 |" in report
    assert not re.search(r"\b(1020|8190|16400)\b", report)
    index = render_report(inputs, tmp_path / "results" / "report.md")
    assert "cuda bs 1024; cpu bs 1024" in index
    console = "\n".join(summary_lines(tmp_path / "results" / "report.md"))
    assert "cuda bs 1024; cpu bs 1024" in console and "1020" not in console


def test_a_count_column_of_floats_reads_exactly_and_a_measurement_keeps_3_digits():
    frame = pd.DataFrame({
        "batch_size": [1024.0, np.nan], "samples_median": [8192.0, 6144.5],
        "steps_median": [64.0, 375.0], "repeats_min": [3.0, 3.0], "threads": ["2.0", "2.0"],
        "disturbed_runs": [0.0, 1.0], "median_s": [4096.0, 11.0],
    })  # fmt: skip
    (first, second) = _md_rows_of(to_markdown(frame))
    assert first["batch_size"] == "1024" and second["batch_size"] == "—"
    assert (first["samples_median"], second["samples_median"]) == ("8192", "6144.5")
    assert first["steps_median"] == "64" and first["repeats_min"] == "3"
    assert first["threads"] == "2" and second["disturbed_runs"] == "1"
    assert (first["median_s"], second["median_s"]) == ("4100", "11.0")  # measurements: 3 digits


def _md_rows_of(text: str) -> list[dict[str, str]]:
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in text.splitlines()]
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


# ----------------------------------------------------------------------------- 7. report.md


def test_report_md_holds_the_console_time_to_target_line_per_compared_pair(tmp_path):
    quality, runs = _tables([
        ("cpu", 32, REACHES_AT_2, 10.0), ("cuda", 32, REACHES_AT_2, 2.0),
        ("mps", 32, REACHES_AT_2, 5.0),
    ])  # fmt: skip
    frames, inputs = _publish(tmp_path, quality, runs)
    text = render_report(inputs, tmp_path / "results" / "report.md")
    verdicts = text.split("## Verdicts", 1)[1].split("\n## ", 1)[0]
    report = [line.removeprefix("- ") for line in verdicts.splitlines() if "⏱" in line]
    console = [
        line.strip() for line in summary_lines(tmp_path / "results/report.md") if "⏱" in line
    ]
    summaries = [s for s in frames["best_setting"]["summary"] if s]
    assert len(report) == len(console) == len(summaries) == 2  # cuda vs cpu, mps vs cpu
    for mine, theirs, summary in zip(report, console, summaries, strict=True):
        assert mine.endswith(summary) and theirs.endswith(summary)
    assert any("cuda reaches accuracy ≥ 0.8 5x sooner than cpu" in line for line in report)
    assert any("mps reaches accuracy ≥ 0.8 2x sooner than cpu" in line for line in report)
    assert not any(_itself(line) for line in report + console)
