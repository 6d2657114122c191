"""The reports render the published tables and compute nothing (fast, synthetic tables)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pandas as pd
import pytest
from trainbench.analysis.report import render_report, render_workload_report
from trainbench.analysis.stats import COLUMNS as STATS_COLUMNS

PACKAGE = Path(__file__).parents[1] / "scripts" / "trainbench"
REPORT_FILES = (
    PACKAGE / "analysis" / "report.py",
    PACKAGE / "analysis" / "report_tables.py",
)  # the report and its tables

# The columns of docs/statistics.md's published tables (the statistics layer's contract).
COLUMNS = {
    "speedup": "workload batch_size device baseline n median low high interval baseline_n "
    "baseline_median speedup speedup_low speedup_high speedup_interval halfwidth verdict reason "
    "disturbed_runs short_window_runs no_steady_state_runs bimodal",
    "stability": "workload device cells ok_cells failed_cells unavailable_cells attempts "
    "failed_attempts failed_by_class failed_oom crashed disturbed_runs short_window_runs noisy "
    "bimodal within_run_cv between_run_cv epoch_time_cv slowest_to_fastest status note",
    "repeats": "workload batch_size device baseline repeats records min_repeats max_repeats "
    "target_halfwidth halfwidth converged note",
    "per_label": "workload device batch_size label n precision recall f1 accuracy support "
    "baseline_f1 f1_minus_baseline",
    "parity": " ".join(STATS_COLUMNS["parity"]),
    "memory": "workload device batch_size n memory_initial_bytes memory_peak_bytes "
    "memory_limit_bytes peak_fraction_of_limit memory_method",
    "crossover": "kind workload device batch_size quantity crossover compared_at device_value "
    "baseline_value verdict_at points_compared finding",
    "collapse": "workload device batch_size smaller_batch_size throughput smaller_throughput "
    "drop_fraction peak_memory_bytes memory_limit_bytes evidence",
    "epoch_summary": "workload device batch_size epoch n train_loss train_loss_min "
    "train_loss_max timed_seconds full_epoch samples_per_s eval_seconds eval_cold eval_accuracy",
    "matmul_summary": "workload device batch_size n baseline repeats gflops gflops_low "
    "gflops_high interval median_s speedup speedup_low speedup_high speedup_interval verdict "
    "reason noisy_runs disturbed_runs",
    "verification": "workload device labels runs device_name torch_version threads model "
    "parameters batch_sizes gradient_accumulation effective_batch_sizes learning_rate optimizer "
    "epochs max_length autocast_dtype grad_scaler placement_pass placement_detail autocast_pass "
    "autocast_detail autocast_output_dtype fallback_pass fallback_detail parameters_on batch_on "
    "optimizer_state_on memory_initial_bytes memory_peak_bytes memory_peak_batch_size "
    "memory_method",
    "verdicts": "workload device baseline status symbol first_failing text batch_sizes",
    "warnings": "kind workload device batch_size rep detail affects_verdict",
    "overview": "workload kind baseline devices records ok failed unavailable repeats_min "
    "repeats_max code",
    "attention": "status workload device error_class detail cells batch_sizes",
    "environments": "host os cpu_model logical_cores gpu_models device device_name python torch "
    "packages git_commit code slurm_job_ids",
    "skipped": "record reason",
    "cell_time": " ".join(STATS_COLUMNS["cell_time"]),
}
COLUMNS["eval_speed"] = COLUMNS["speedup"]

WORKING = (
    "every verification check passed in all 6 runs, parity holds at every batch size, and "
    "training is faster at every batch size: 2.95–3.4x"
)
PARITY_FAIL = "parity fails at bs 64: accuracy 0.5 vs 0.9"


def speed(workload, device, bs, median, speedup=None, verdict="faster", n=3, kind="range"):
    interval = f"range of {n} runs" if kind == "range" else "95% BCa CI"
    baseline = speedup is None
    return {
        "workload": workload, "batch_size": bs, "device": device, "n": n, "median": median,
        "low": median * 0.95, "high": median * 1.05, "interval": interval,
        "speedup": 1.0 if baseline else speedup,
        "speedup_low": None if baseline else speedup * 0.9,
        "speedup_high": None if baseline else speedup * 1.1,
        "speedup_interval": None if baseline else (
            f"range of {n} vs {n} runs" if kind == "range" else "95% BCa CI"),
        "verdict": "baseline" if baseline else verdict,
        "reason": "the baseline" if baseline else f"every {device} run beat every baseline run",
        "disturbed_runs": 0, "short_window_runs": 0, "no_steady_state_runs": 0, "bimodal": False,
    }  # fmt: skip


def verification(workload, device, batch_on):
    return {
        "workload": workload, "device": device, "labels": device, "runs": 6,
        "device_name": f"{device} chip", "torch_version": "2.5.1", "threads": 4,
        "model": "tiny-cnn", "parameters": 66956548, "batch_sizes": "32;64",
        "gradient_accumulation": 2, "effective_batch_sizes": "64;128", "learning_rate": 2e-5,
        "optimizer": "AdamW", "epochs": 3, "autocast_dtype": None, "grad_scaler": False,
        "placement_pass": True, "placement_detail": "6/6 runs", "autocast_pass": True,
        "autocast_detail": "requested in 0/6 runs, active in 0/6", "fallback_pass": True,
        "fallback_detail": "none seen", "parameters_on": f"{device}:0", "batch_on": batch_on,
        "optimizer_state_on": f"{device}:0", "memory_initial_bytes": 2**28,
        "memory_peak_bytes": 5 * 2**30, "memory_peak_batch_size": 64,
        "memory_method": "torch.cuda.max_memory_allocated",
    }  # fmt: skip


def scenario(kind: str = "range", warnings: bool = True) -> dict[str, list[dict]]:
    ic, tm = "image_cnn", "text_multilabel"
    rows = {
        "speedup": [
            speed(ic, "cpu", 32, 100.0, kind=kind), speed(ic, "cuda", 32, 300.0, 3.0, kind=kind),
            speed(ic, "cpu", 64, 120.0, kind=kind), speed(ic, "cuda", 64, 400.0, 3.3, kind=kind),
            # no cpu in this workload: cuda is its baseline
            speed(tm, "cuda", 16, 50.0, kind=kind),
            speed(tm, "mps", 16, 20.0, 0.4, "slower", kind=kind),
        ],
        "eval_speed": [
            speed(tm, "cuda", 16, 200.0, kind=kind),
            speed(tm, "mps", 16, 80.0, 0.4, "slower", kind=kind),
        ],
        "stability": [
            {"workload": ic, "device": "cuda", "cells": 6, "ok_cells": 6, "failed_cells": 0,
             "unavailable_cells": 0, "attempts": 6, "failed_attempts": 0, "failed_by_class": "",
             "within_run_cv": 0.021, "between_run_cv": 0.14, "epoch_time_cv": 0.03,
             "slowest_to_fastest": 1.3, "status": "noisy", "note": "between-run CV 14% at bs 64"},
        ],
        "verdicts": [
            {"workload": ic, "device": "cpu", "baseline": "cpu", "status": "baseline",
             "symbol": "✅", "text": "the baseline: 6 ok runs", "batch_sizes": "32, 64"},
            {"workload": ic, "device": "cuda", "baseline": "cpu", "status": "not working",
             "symbol": "❌", "first_failing": PARITY_FAIL,
             "text": "verification passed; " + PARITY_FAIL,
             "batch_sizes": "32, 64"},
            {"workload": ic, "device": "mps", "baseline": "cpu", "status": "unavailable",
             "symbol": "⚪", "text": "unavailable: MPS is not built into this torch"},
            {"workload": tm, "device": "cuda", "baseline": "cuda", "status": "baseline",
             "symbol": "✅", "text": "the baseline: 3 ok runs"},
            {"workload": tm, "device": "mps", "baseline": "cuda", "status": "working",
             "symbol": "✅", "text": WORKING},
        ],
        "parity": [
            {"workload": ic, "device": "cuda", "batch_size": 32, "primary_metric": "accuracy",
             "pairs": 3, "final_metric": 0.91, "baseline_metric": 0.9, "drift_within": True,
             "metric_within": True, "loss_within": True, "parity": "pass", "rule": "within"},
            {"workload": ic, "device": "cuda", "batch_size": 64, "primary_metric": "accuracy",
             "pairs": 3, "final_metric": 0.5, "baseline_metric": 0.9, "drift_within": True,
             "metric_within": False, "loss_within": True, "parity": "fail", "rule": "beyond"},
        ],
        "verification": [
            verification(ic, "cpu", "images=cpu;labels=cpu"),
            verification(ic, "cuda", "images=cuda:0;labels=cuda:0"),
            verification(tm, "cuda", "attention_mask=cuda:0;input_ids=cuda:0"),
            verification(tm, "mps", "attention_mask=mps:0;input_ids=mps:0"),
        ],
        "per_label": [
            {"workload": tm, "device": d, "batch_size": 16, "label": label, "n": 3,
             "precision": 0.5, "recall": 0.4, "f1": 0.44, "accuracy": 0.9, "support": 12,
             "baseline_f1": 0.44, "f1_minus_baseline": 0.0}
            for d in ("cuda", "mps") for label in ("banned_phrases", "date_inconsistency")
        ],
        "epoch_summary": [
            {"workload": tm, "device": "mps", "batch_size": 16, "epoch": e, "n": 3,
             "train_loss": 1.1 - e / 10, "train_loss_min": 1.0 - e / 10,
             "train_loss_max": 1.2 - e / 10, "timed_seconds": 7.9, "full_epoch": e > 1,
             "samples_per_s": 22.8, "eval_seconds": 4.6, "eval_cold": e == 1, "eval_accuracy": 0.8}
            for e in (1, 2)
        ],
        "memory": [
            {"workload": ic, "device": "cuda", "batch_size": bs, "n": 3,
             "memory_initial_bytes": 2**28, "memory_peak_bytes": bs * 2**26,
             "memory_method": "torch.cuda.max_memory_allocated"}
            for bs in (32, 64)
        ],
        "repeats": [
            {"workload": ic, "batch_size": 64, "device": "cuda", "baseline": "cpu", "repeats": 3,
             "records": 3, "min_repeats": 3, "max_repeats": 3, "target_halfwidth": 0.03,
             "halfwidth": 0.1, "converged": False,
             "note": "stopped at the maximum (3) with half-width 10%"},
        ],
        "crossover": [
            {"kind": "matmul size", "workload": "matmul", "device": "cuda", "batch_size": 1,
             "finding": "n ≥ 256 (cuda 2.8x cpu, range of 3 runs)"},
        ],
        "matmul_summary": [
            {"workload": "matmul", "device": "cpu", "batch_size": 1, "n": n, "baseline": "cpu",
             "repeats": 3, "gflops": 10.0 * n, "interval": "range of 3 runs", "verdict": "baseline"}
            for n in (16, 32)
        ],
        "warnings": [
            {"kind": "disturbed", "workload": ic, "device": "cpu", "batch_size": 32, "rep": 1,
             "detail": "other processes used 1.02 cores", "affects_verdict": True},
            {"kind": "short window", "workload": ic, "device": "cuda", "batch_size": 32,
             "rep": 0, "detail": "measured 0.066 s (minimum 1 s)", "affects_verdict": True},
            # Turns no verdict: in Measurement quality, not in the headline's count.
            {"kind": "eval speed not measured", "workload": ic, "device": "cuda",
             "batch_size": 32, "rep": 1, "affects_verdict": False,
             "detail": "warm evaluation 0.15 s over 57 passes, below the minimum"},
        ] if warnings else [],
        "overview": [
            {"workload": ic, "kind": "training", "baseline": "cpu", "devices": "cpu;cuda;mps",
             "records": 14, "ok": 12, "failed": 0, "unavailable": 2, "repeats_min": 3,
             "repeats_max": 3, "code": "abc123"},
            {"workload": "matmul", "kind": "microbenchmark", "baseline": "cpu",
             "devices": "cpu;mps", "records": 4, "ok": 3, "failed": 1, "unavailable": 0,
             "repeats_min": 3, "repeats_max": 3, "code": "abc123"},
            {"workload": tm, "kind": "training", "baseline": "cuda", "devices": "cuda;mps",
             "records": 6, "ok": 6, "failed": 0, "unavailable": 0, "repeats_min": 3,
             "repeats_max": 3, "code": "abc123"},
            {"workload": "(all)", "records": 24, "ok": 21, "failed": 1, "unavailable": 2,
             "code": "abc123"},
        ],
        "cell_time": [
            {"device": "cpu", "cells": 6, "without_breakdown": 0, "median_cell_seconds": 12.5,
             "median_measurement_share": 0.62, "median_outside_seconds": 4.75,
             "max_outside_seconds": 5.5, "median_process_start_and_imports_seconds": 2.9,
             "max_unattributed_seconds": 0.002},
        ],
        "attention": [
            {"status": "failed", "workload": "matmul", "device": "cpu", "error_class": "signal",
             "detail": "SIGABRT | core dumped", "cells": 1, "batch_sizes": "1"},
            {"status": "unavailable", "workload": f"{ic};matmul", "device": "mps",
             "detail": "MPS is not built into this torch", "cells": 2, "batch_sizes": "1, 32"},
        ],
        "environments": [
            {"host": "node1", "device": d, "cpu_model": "Xeon", "os": "Linux", "torch": "2.5.1",
             "git_commit": "abc123"} for d in ("cpu", "cuda", "mps")
        ],
    }  # fmt: skip
    return rows


def write_inputs(tmp_path: Path, rows: dict[str, list[dict]]) -> dict:
    tables = tmp_path / "results" / "tables"
    tables.mkdir(parents=True)
    inputs: dict = {}
    for name, columns in COLUMNS.items():
        path = tables / f"{name}.csv"
        pd.DataFrame(rows.get(name, []), columns=columns.split()).to_csv(path, index=False)
        inputs[name] = str(path)
    figures = tmp_path / "results" / "figures"
    inputs["figures"] = [str(figures / f"{n}.png") for n in ("throughput", "speedup", "matmul")]
    reports = tmp_path / "results" / "reports"
    inputs["workload_reports"] = [
        str(reports / "image_cnn.md"),
        str(reports / "text_multilabel.md"),
    ]
    return inputs


def render_all(tmp_path: Path, **kw) -> tuple[str, dict[str, str], dict]:
    inputs = write_inputs(tmp_path, scenario(**kw))
    index = render_report(inputs, tmp_path / "results" / "report.md")
    reports = {
        Path(p).stem: render_workload_report(Path(p).stem, inputs, p)
        for p in inputs["workload_reports"]
    }
    return index, reports, inputs


def section(text: str, heading: str) -> str:
    match = re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert match, f"no section {heading!r}:\n{text}"
    return match.group(1)


def plain_working(text: str) -> int:
    return len(re.findall(r"(?<!not )\bworking\b", text))


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    return render_all(tmp_path_factory.mktemp("report"))


def test_warning_block_comes_first(rendered):
    index, reports, _ = rendered
    lines = [line for line in index.splitlines() if line.strip()]
    assert lines[0] == "# trainbench report"
    assert lines[1] == "24 run records: 21 ok, 1 failed, 2 unavailable."
    assert lines[2].startswith("⚠️ **2 measurements carry a warning:** 1 disturbed, 1 short window.")
    assert "(#measurement-quality)" in lines[2]
    quality = section(index, "Measurement quality")
    assert (
        "other processes used 1.02 cores" in quality and "| short window | image_cnn |" in quality
    )
    assert "| eval speed not measured | image_cnn |" in quality
    # The workload report warns about its own measurements only.
    assert "a warning:**" in reports["image_cnn"].split("## Summary")[0]
    assert "a warning:**" not in reports["text_multilabel"]


def test_no_warning_block_without_warnings(tmp_path):
    index, reports, _ = render_all(tmp_path, warnings=False)
    assert "a warning:**" not in index
    assert "a warning:**" not in reports["image_cnn"]
    assert "No measurement was disturbed" in section(index, "Measurement quality")


def test_working_only_from_the_verdicts_table(rendered):
    index, reports, _ = rendered
    verdicts = section(index, "Verdicts")
    assert plain_working(index) == 1  # the one verdicts row whose status is "working"
    assert f"`text_multilabel` on **mps** (working): {WORKING}" in verdicts
    cuda = next(line for line in verdicts.splitlines() if "`image_cnn` on **cuda**" in line)
    assert cuda.startswith("- ❌") and "(not working)" in cuda and PARITY_FAIL in cuda
    summary = section(reports["image_cnn"], "Summary")
    assert plain_working(reports["image_cnn"]) == 0
    assert f"❌ **cuda** (not working): verification passed; {PARITY_FAIL}" in summary
    parity_section = section(reports["image_cnn"], "Accuracy parity with the baseline")
    assert "| cuda | 64 |" in parity_section and "| accuracy | 0.500 | 0.900 |" in parity_section


def test_first_failing_item_named_when_the_text_does_not(tmp_path):
    rows = scenario()
    rows["verdicts"][1]["text"] = "1 of 2 batch sizes fails a check"
    rows["verification"][1].update(fallback_pass=False, fallback_detail="aten::nonzero")
    inputs = write_inputs(tmp_path, rows)
    text = render_workload_report("image_cnn", inputs, tmp_path / "image_cnn.md")
    assert f"First failing item: {PARITY_FAIL}." in section(text, "Summary")
    checks = section(text, "Device verification")
    assert "- [ ] No CPU fallback: aten::nonzero" in checks
    assert "- [x] No CPU fallback: none seen" in checks  # the cpu's


def test_ranges_are_called_ranges(rendered):
    index, reports, _ = rendered
    for text in (index, *reports.values()):
        assert "95%" not in text and "CI" not in text
    assert "range of 3 runs" in section(index, "Speedup")
    assert "Intervals as the rows state them: range of 3 runs; range of 3 vs 3 runs." in index
    assert "| cuda | 32 | 3 | 300 | 285–315 (range of 3 runs) | 3x |" in reports["image_cnn"]


def test_ci_wording_only_when_the_rows_say_ci(tmp_path):
    index, _, _ = render_all(tmp_path, kind="ci")
    assert "Intervals as the rows state them: 95% BCa CI." in index
    assert "range of" not in section(index, "Speedup")


def test_unavailable_device_once(rendered):
    index, reports, _ = rendered
    verdicts = section(index, "Verdicts").splitlines()
    mps = [line for line in verdicts if "**mps**" in line and "unavailable" in line]
    assert mps == [
        "- ⚪ **mps** (unavailable): MPS is not built into this torch; 2 cell(s) of "
        "image_cnn, matmul not measured."
    ]
    # A failed microbenchmark (no verdicts row) is named, its pipe escaped.
    assert any("**failed** (signal)" in line and "SIGABRT \\| core" in line for line in verdicts)
    assert "| image_cnn, matmul | mps | unavailable |" in section(
        index, "Failed and unavailable cells"
    )
    assert "**mps**: unavailable: MPS is not built" in section(reports["image_cnn"], "Summary")


def test_same_tables_same_bytes(tmp_path):
    inputs = write_inputs(tmp_path, scenario())
    first = render_report(inputs, tmp_path / "results" / "report.md")
    path = tmp_path / "results" / "reports" / "image_cnn.md"
    report = render_workload_report("image_cnn", inputs, path)
    assert render_report(inputs, tmp_path / "results" / "report.md") == first
    assert render_workload_report("image_cnn", inputs, path) == report
    assert (tmp_path / "results" / "report.md").read_text() == first
    assert path.read_text() == report


def test_workload_without_cpu(rendered):
    _, reports, _ = rendered
    text = reports["text_multilabel"]
    speed = section(text, "Training speed")
    assert "| cuda | 16 | 3 | 50.0 |" in speed and "| mps | 16 | 3 | 20.0 |" in speed
    assert "| mps | 16 | 3 | 80.0 |" in section(text, "Evaluation speed")
    assert "Speedups are relative to `cuda`" in text
    assert "| mps | 16 | banned_phrases |" in section(text, "Per-label results")
    epochs = section(text, "Per-epoch results")
    assert (
        "| mps | 16 | 1 * |" in epochs
        and "| 1.000 | 0.9000–1.100 |" in epochs
        and "4.60 (cold)" in epochs
    )
    assert "batch tensors attention_mask=mps:0;input_ids=mps:0" in text
    assert "gradient accumulation 2 (effective batch 64, 128)" in text


def test_index_links_and_sections(rendered):
    index, _, _ = rendered
    assert "[results/reports/image_cnn.md]" not in index
    assert "Verification report: [reports/image_cnn.md](reports/image_cnn.md)." in index
    assert "([table](tables/speedup.md))" in index
    assert "![Speedup vs the baseline](figures/speedup.png)" in index
    matmul = section(index, "`matmul` (seed report 004)")
    assert [r.split("|")[1].strip() for r in matmul.splitlines() if re.match(r"\| \d", r)] == [
        "16",
        "32",
    ]
    assert "`matmul` on **cuda** (matmul batch 1): matmul crossover n ≥ 256" in index
    assert "- `image_cnn` on **cuda** at batch size 64: stopped at the maximum" in index


def test_cell_time_section(rendered):
    """Per device, the median share of a cell's wall time that was measurement."""
    index, _, _ = rendered
    text = section(index, "Where the cells' time went")
    assert "([table](tables/cell_time.md))" in text
    assert "| cpu | 6 | 12.5 | 62% | 4.75 | 5.50 | 2.90 | — |" in text


def test_report_imports_no_statistics():
    banned = ("scipy", "statistics", "trainbench.analysis.stats", "trainbench.analysis.aggregate")
    relative = ("stats", "aggregate")
    nodes = [node for path in REPORT_FILES for node in ast.walk(ast.parse(path.read_text()))]
    for node in nodes:
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                assert module.split(".")[0] not in relative, module
                assert module or not {a.name for a in node.names} & set(relative), node.names
                continue
            names = [module]
        else:
            continue
        for name in names:
            assert not any(name == b or name.startswith(b + ".") for b in banned), name


def test_report_aggregates_nothing():
    reductions = {"groupby", "agg", "aggregate", "median", "mean", "std", "quantile", "pivot_table"}
    for path in REPORT_FILES:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute):
                assert node.attr not in reductions, f"{path.name} line {node.lineno}: .{node.attr}"


def test_skipped_records_are_listed(tmp_path):
    rows = scenario()
    rows["skipped"] = [{"record": "results/runs/x/metrics.json", "reason": "truncated | bad"}]
    index = render_report(write_inputs(tmp_path, rows), tmp_path / "results" / "report.md")
    assert "**1 record file(s) were skipped**" in index
    assert "- `results/runs/x/metrics.json`: truncated \\| bad" in index
