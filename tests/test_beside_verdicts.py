"""The lines beside the same-batch verdicts in the console and the reports: the
samples-to-target check where it flags, and the comparisons across batch sizes
(trainbench.analysis.beside_verdicts, trainbench.analysis.report_beside)."""

from __future__ import annotations

import ast
import csv
from pathlib import Path

import pandas as pd
from test_report import PACKAGE, scenario, section, write_inputs
from trainbench.analysis.beside_verdicts import FLAGGED
from trainbench.analysis.console import summary_lines
from trainbench.analysis.report import render_report, render_workload_report
from trainbench.analysis.stats import COLUMNS
from trainbench.analysis.stats.convergence import FLAGGED as STATS_FLAGGED

MORE_NOTE = (
    "cuda needs 2x the baseline's median samples (1280 in its median repeat, more than one "
    "evaluation beyond cpu's range 640–640 at bs 32; one evaluation: 320 samples): it may "
    "train wrong; a check, not a failure"
)
ACROSS_SUMMARY = (
    "across batch sizes, cuda at bs 512 trains 8x the samples/s of cpu at bs 64 (7.6–8.37x, "
    "range of 3 vs 3 runs): faster; not a same-batch verdict"
)
BEST_SUMMARY = (
    "cuda reaches accuracy ≥ 0.8 6x sooner than cpu (4–8x), each at its best setting "
    "(cuda bs 512; cpu bs 64)"
)


def _rows() -> dict[str, list[dict]]:
    ttt = {"workload": "image_cnn", "batch_size": 32, "metric": "accuracy", "target": 0.8,
           "direction": "≥", "eval_every": "steps 10", "repeats": 3, "reached": 3}  # fmt: skip
    return {
        "time_to_target": [
            {**ttt, "device": "cpu", "verdict": "baseline", "samples_check": ""},
            {
                **ttt,
                "device": "cuda",
                "verdict": "sooner",
                "samples_check": "more samples",
                "samples_note": MORE_NOTE,
            },
            {
                **ttt,
                "device": "mps",
                "verdict": "sooner",
                "samples_check": "as the baseline",
                "samples_note": "mps needs 640 samples in its median repeat: within …",
            },
        ],  # fmt: skip
        "best_setting": [
            {
                "workload": "image_cnn",
                "backend": "cpu",
                "device": "cpu",
                "batch_size": 64,
                "baseline_batch_size": 64,
                "verdict": "baseline",
                "summary": None,
            },
            {
                "workload": "image_cnn",
                "backend": "cuda",
                "device": "cuda",
                "batch_size": 512,
                "baseline_batch_size": 64,
                "verdict": "sooner",
                "summary": BEST_SUMMARY,
            },
        ],  # fmt: skip
        "across_batch_sizes": [
            {
                "workload": "image_cnn",
                "device": "cuda",
                "batch_size": 512,
                "baseline": "cpu",
                "baseline_batch_size": 64,
                "same_batch_sizes": None,
                "comparison": "across batch sizes",
                "n": 3,
                "median": 800.0,
                "low": 790.0,
                "high": 820.0,
                "interval": "range of 3 runs",
                "baseline_n": 3,
                "baseline_median": 100.0,
                "baseline_low": 98.0,
                "baseline_high": 104.0,
                "baseline_interval": "range of 3 runs",
                "speedup": 8.0,
                "speedup_low": 7.6,
                "speedup_high": 8.37,
                "speedup_interval": "range of 3 vs 3 runs",
                "verdict": "faster",
                "reason": "every cuda bs 512 run beat every cpu bs 64 run",
                "summary": ACROSS_SUMMARY,
            },
        ],  # fmt: skip
    }


def _write(tables: Path, rows: dict[str, list[dict]]) -> dict[str, str]:
    paths = {}
    for name, table in rows.items():
        path = tables / f"{name}.csv"
        pd.DataFrame(table, columns=COLUMNS[name]).to_csv(path, index=False)
        paths[name] = str(path)
    return paths


def test_the_flagging_values_are_the_statistics_layers():
    assert FLAGGED == STATS_FLAGGED


def test_the_console_names_a_flagged_samples_check_and_each_comparison_across_batch_sizes(
    tmp_path,
):
    tables = tmp_path / "tables"
    tables.mkdir()
    _write(tables, _rows())
    with open(tables / "time_to_target.csv", newline="") as fh:  # the console reads text
        assert len(list(csv.DictReader(fh))) == 3
    lines = summary_lines(tmp_path / "report.md")
    assert f"  🔎 image_cnn at bs 32: {MORE_NOTE}" in lines
    assert f"  ⇄ image_cnn: {ACROSS_SUMMARY}" in lines
    assert not any("mps needs" in line for line in lines)  # as the baseline: no line
    assert lines[-1] == f"Report: {tmp_path / 'report.md'}"


def test_the_reports_keep_both_apart_from_the_same_batch_verdicts(tmp_path):
    inputs = write_inputs(tmp_path, scenario())
    inputs.update(_write(tmp_path / "results" / "tables", _rows()))
    index = render_report(inputs, tmp_path / "results" / "report.md")
    verdicts = section(index, "Verdicts")
    assert f"- 🔎 image_cnn at bs 32: {MORE_NOTE}" in verdicts
    assert "a check beside the verdicts" in verdicts and "mps needs" not in verdicts
    across = section(index, "Across batch sizes")
    assert f"- ⇄ image_cnn: {ACROSS_SUMMARY}" in across
    assert f"- ⇄ image_cnn: across batch sizes, time to target: {BEST_SUMMARY}" in across
    assert "not a same-batch verdict" in across.split("\n\n")[1]
    assert "| image_cnn | cuda | 512 | cpu | 64 |" in across
    assert "| 8x | 7.6–8.37x (range of 3 vs 3 runs) | faster |" in across
    assert "([table](tables/across_batch_sizes.md))" in across
    report = render_workload_report("image_cnn", inputs, tmp_path / "results" / "w.md")
    times = section(report, "Time to target")
    assert "| samples check |" in times and "| more samples |" in times
    assert f"- 🔎 image_cnn at bs 32: {MORE_NOTE}" in times
    assert f"- ⇄ image_cnn: {ACROSS_SUMMARY}" in section(report, "Across batch sizes")
    # a workload without such rows gets no section
    other = render_workload_report("text_multilabel", inputs, tmp_path / "results" / "t.md")
    assert "## Across batch sizes" not in other and "🔎" not in other


def test_the_report_parts_compute_nothing():
    files = [PACKAGE / "analysis" / name for name in ("report_beside.py", "beside_verdicts.py")]
    reductions = {"groupby", "agg", "median", "mean", "std", "quantile", "pivot_table"}
    for path in files:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                assert not (node.module or "").startswith("trainbench.analysis.stats"), path
            if isinstance(node, ast.Attribute):
                assert node.attr not in reductions, f"{path.name}: .{node.attr}"
