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
from trainbench.analysis.stats.best_setting import best_setting_table
from trainbench.analysis.stats.speed import speedup_table
from trainbench.analysis.stats.targets import time_to_target_table
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
    best = {r["device"]: r for r in _md_rows(tables / "best_setting.md")}
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


# ----------------------------------------------------------------------------- 2. itself


@pytest.mark.parametrize(
    ("cells", "targets", "expected"),
    [
        # cpu never reaches the target: its own row says so, cuda's has its time, no verdict
        ([("cpu", 32, [NEVER] * 3, 10.0), ("cuda", 32, REACHES_AT_2, 2.0)], TARGET,
         ["cpu (the baseline): not reached",
          "cuda reaches accuracy ≥ 0.8 in 4 s of training (bs 32; median of 3 repeats, "
          "range 4–4 s); vs cpu at their best settings: insufficient data"]),
        # no target: one line for the workload, none a device
        ([("cpu", 32, REACHES_AT_2, 10.0), ("cuda", 32, REACHES_AT_2, 2.0)], {},
         ["⏱ No time to target for image_cnn: no target set (workloads.image_cnn.target)"]),
        # a CPU-only run that reaches the target: the CPU's own time, compared with nothing
        ([("cpu", 32, REACHES_AT_2, 10.0)], TARGET,
         ["⏱ image_cnn: cpu reaches accuracy ≥ 0.8 in 20 s of training (bs 32; median of "
          "3 repeats, range 20–20 s)"]),
    ],
)  # fmt: skip
def test_no_line_compares_the_baseline_with_itself(tmp_path, cells, targets, expected):
    quality, runs = _tables(cells)
    _publish(tmp_path, quality, runs, targets=targets)
    render_report(
        {"best_setting": str(tmp_path / "results/tables/best_setting.csv")},
        tmp_path / "results" / "report.md",
    )
    console = [line for line in summary_lines(tmp_path / "results/report.md") if "⏱" in line]
    report = [
        line for line in (tmp_path / "results/report.md").read_text().splitlines() if "⏱" in line
    ]
    assert len(console) == len(report) == len(expected)
    for line, words in zip(console, expected, strict=True):
        assert words in line and not _itself(line), line
    assert not any(_itself(line) for line in report)


# ----------------------------------------------------------------------------- 3. censored


def test_repeats_that_miss_the_target_are_said_and_still_counted(tmp_path):
    cpu = [[0.5, 0.85, 0.9], [0.5, 0.6, 0.85], [0.5, 0.85, 0.9]]  # 20, 30, 20 s
    quality, runs = _tables([("cpu", 32, cpu, 10.0), ("cuda", 32, [*REACHES_AT_2[:2], NEVER], 2.0)])
    frames, _ = _publish(tmp_path, quality, runs)
    same = frames["time_to_target"].set_index("device").loc["cuda"]
    # The verdict is still the interval's, the censored repeat in it (0 .. 7.5x).
    assert same["verdict"] == "no clear difference" and same["speedup_low"] == 0.0
    assert same["speedup_high"] == pytest.approx(7.5) and same["reached"] == 2
    said = (
        "cuda reached it in 2 of 3 repeats, those 5–7.5x sooner than cpu; the other not "
        "within 3 epochs (6 s of training)"
    )
    assert same["reason"].startswith(said + "; overall no clear difference (5x, 0–7.5x)")
    best = frames["best_setting"].set_index("device").loc["cuda"]
    assert best["verdict"] == "no clear difference"
    assert said in best["summary"] and "overall no clear difference (5x, 0–7.5x)" in best["summary"]
    assert "with no clear difference from cpu" not in best["summary"]


def test_a_baseline_repeat_that_misses_the_target_is_said_too(tmp_path):
    cpu = [*REACHES_AT_2[:2], NEVER]
    quality, runs = _tables([("cpu", 32, cpu, 10.0), ("cuda", 32, REACHES_AT_2, 2.0)])
    frames, _ = _publish(tmp_path, quality, runs)
    best = frames["best_setting"].set_index("device").loc["cuda"]
    assert best["verdict"] == "sooner"
    assert (
        "cuda reached it in 3 of 3 repeats, those 5x sooner than those of cpu that did; "
        "cpu in 2 of 3, the other not within 3 epochs (30 s of training)"
    ) in best["summary"]


def test_every_repeat_reaching_keeps_the_plain_sentence(tmp_path):
    quality, runs = _tables([("cpu", 32, REACHES_AT_2, 10.0), ("cuda", 32, REACHES_AT_2, 2.0)])
    frames, _ = _publish(tmp_path, quality, runs)
    best = frames["best_setting"].set_index("device").loc["cuda"]
    assert best["summary"].startswith(
        "cuda reaches accuracy ≥ 0.8 in 4 s of training, 5x sooner than cpu (5–5x)"
    )
    assert "repeats" not in best["summary"]


# ----------------------------------------------------------------------------- 4. not finite


def _record_with_curve(tmp_path, device, rep, accuracies):
    """A record written as a run writes it (NaN stored as null) and its quality rows."""
    raw = record(device=device, rep=rep)
    raw["result"]["quality"] = {"eval_every": {"epochs": 1}, "points": [
        {"index": i, "epoch": i + 1, "epoch_end": True, "steps": 8 * (i + 1),
         "samples": 256 * (i + 1), "train_seconds": 2.0 * (i + 1),
         "metrics": {"accuracy": value, "loss": 0.5}}
        for i, value in enumerate(accuracies)
    ]}  # fmt: skip
    path = tmp_path / device / f"rep{rep}" / "metrics.json"
    write_record(path, raw)
    return quality_rows(json.loads(path.read_text()), str(path))


def test_a_metric_that_was_not_finite_is_named_with_its_count(tmp_path):
    rows = [r for rep in range(3) for r in _record_with_curve(tmp_path, "cpu", rep, [math.nan] * 4)]
    assert {r["not_finite_metrics"] for r in rows} == {"accuracy"}
    assert not any("eval_accuracy" in r for r in rows)
    quality = pd.DataFrame(rows)
    runs = pd.DataFrame([run("image_cnn", "cpu", 32, rep, record=rows[4 * rep]["record"])
                         for rep in range(3)])  # fmt: skip
    table = time_to_target_table(quality, runs, BASE, TARGET, ["image_cnn"])
    (reason,) = table["reason"]
    assert (
        reason == "the metric 'accuracy' was not finite (NaN or infinite) in 12 of 12 evaluations"
    )
    assert "no metric" not in reason


def test_a_cell_whose_metric_went_nan_says_how_often(tmp_path):
    rows = []
    for rep in range(3):
        rows += _record_with_curve(tmp_path, "cpu", rep, [0.5, 0.85, 0.9])
        rows += _record_with_curve(tmp_path, "cuda", rep, [0.5, math.nan, math.nan])
    quality = pd.DataFrame(rows)
    runs = pd.DataFrame([run("image_cnn", r["device"], 32, r["rep"], record=r["record"])
                         for r in rows if r["point"] == 0])  # fmt: skip
    table = time_to_target_table(quality, runs, BASE, TARGET, ["image_cnn"]).set_index("device")
    assert table.loc["cpu", "verdict"] == "baseline"
    assert table.loc["cuda", "verdict"] == "not reached"
    assert table.loc["cuda", "reason"].endswith("the metric was not finite in 6 of 9 evaluations")


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


def test_report_md_holds_the_console_time_to_target_line_per_device(tmp_path):
    quality, runs = _tables([
        ("cpu", 32, REACHES_AT_2, 10.0), ("cuda", 32, REACHES_AT_2, 2.0),
        ("mps", 32, REACHES_AT_2, 5.0),
    ])  # fmt: skip
    frames, inputs = _publish(tmp_path, quality, runs)
    text = render_report(inputs, tmp_path / "results" / "report.md")
    section = text.split("## Time to target", 1)[1].split("\n## ", 1)[0]
    report = [line.removeprefix("- ") for line in section.splitlines() if "⏱" in line]
    console = [
        line.strip() for line in summary_lines(tmp_path / "results/report.md") if "⏱" in line
    ]
    summaries = [s for s in frames["best_setting"]["summary"] if s]
    assert len(report) == len(console) == len(summaries) == 3  # cpu, cuda, mps
    for mine, theirs, summary in zip(report, console, summaries, strict=True):
        assert mine.endswith(summary) and theirs.endswith(summary)
    assert report[0] == (
        "⏱ `image_cnn`: cpu (the baseline) reaches accuracy ≥ 0.8 in 20 s of training "
        "(bs 32; median of 3 repeats, range 20–20 s)"
    )
    assert any("cuda reaches accuracy ≥ 0.8 in 4 s of training, 5x sooner than cpu" in line
               for line in report)  # fmt: skip
    assert any("mps reaches accuracy ≥ 0.8 in 10 s of training, 2x sooner than cpu" in line
               for line in report)  # fmt: skip
    assert "[best_setting](tables/best_setting.md)" in section
    assert "[time_to_target](tables/time_to_target.md)" in section
    assert "⏱" not in text.split("## Verdicts", 1)[1].split("\n## ", 1)[0]  # said once
    assert not any(_itself(line) for line in report + console)
