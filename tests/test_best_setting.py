"""Each device at its best setting for time to target (trainbench.analysis.stats.best_setting):
one row per device column with a sentence, the baseline's own time included; thread
variants compared as devices; one line for every workload without a target; the same
lines in the console and results/report.md; the figure drawn from best_setting."""

from __future__ import annotations

import matplotlib.text
import pandas as pd
import pytest
from test_time_to_target import REACHES_AT_2, TARGET, _tables
from trainbench.analysis.beside_verdicts import target_lines
from trainbench.analysis.console import summary_lines
from trainbench.analysis.report import render_report, render_workload_report
from trainbench.analysis.stats.best_setting import BEST_SETTING_COLUMNS, best_setting_table
from trainbench.analysis.stats.targets import time_to_target_table
from trainbench.analysis.tables import write_table

SLOW_BIG = [[0.5, 0.6, 0.85]] * 3  # reaches at the 3rd evaluation
NEVER = [0.5, 0.6, 0.7]


def _as(workload: str, frames: tuple[pd.DataFrame, pd.DataFrame]):
    """``_tables``' image_cnn frames renamed to ``workload`` (its records too)."""
    quality, runs = (f.copy() for f in frames)
    for frame in (quality, runs):
        frame["workload"] = workload
        frame["record"] = frame["record"].str.replace("image_cnn", workload)
    return quality, runs


def _write(tmp_path, tables: dict[str, pd.DataFrame]) -> dict[str, str]:
    """The tables written as the statistics rule writes them; their paths by name."""
    folder = tmp_path / "results" / "tables"
    folder.mkdir(parents=True, exist_ok=True)
    inputs = {}
    for name, frame in tables.items():
        write_table(frame, folder / f"{name}.csv", folder / f"{name}.md")
        inputs[name] = str(folder / f"{name}.csv")
    return inputs


def _lines(tmp_path, best: pd.DataFrame) -> tuple[list[str], list[str]]:
    """The ⏱ lines of the console and of report.md's Time to target section."""
    inputs = _write(tmp_path, {"best_setting": best})
    text = render_report(inputs, tmp_path / "results" / "report.md")
    section = text.split("## Time to target", 1)[1].split("\n## ", 1)[0]
    report = [line.removeprefix("- ") for line in section.splitlines() if "⏱" in line]
    console = [
        line.strip() for line in summary_lines(tmp_path / "results/report.md") if "⏱" in line
    ]
    return console, report


def test_a_cpu_only_run_says_the_cpus_own_time_to_target(tmp_path):
    quality, runs = _tables([("cpu", 32, REACHES_AT_2, 10.0), ("cpu", 128, SLOW_BIG, 4.0)])
    best = best_setting_table(quality, runs, {"image_cnn": "cpu"}, TARGET, ["image_cnn"])
    assert list(best.columns) == BEST_SETTING_COLUMNS
    (row,) = best.to_dict("records")
    assert (row["device"], row["batch_size"], row["verdict"]) == ("cpu", 128, "baseline")
    assert row["candidates"] == 2 and row["median_s"] == pytest.approx(12.0)
    said = ("cpu reaches accuracy ≥ 0.8 in 12 s of training (bs 128; median of 3 repeats, "
            "range 12–12 s)")  # fmt: skip
    assert row["summary"] == said  # alone: no "(the baseline)"
    console, report = _lines(tmp_path, best)
    assert console == [f"⏱ image_cnn: {said}"]
    assert report == [f"⏱ `image_cnn`: {said}"]


def test_the_baseline_s_own_time_says_a_disturbed_repeat():
    """No verdict to withhold, but a time measured while another process took the
    cores is said to be read with care."""
    quality, runs = _tables([("cpu", 32, REACHES_AT_2, 10.0)])
    runs.loc[runs["rep"] == 1, "disturbed"] = True
    (row,) = best_setting_table(quality, runs, {"image_cnn": "cpu"}, TARGET, ["image_cnn"])[
        ["summary", "verdict"]
    ].to_dict("records")
    assert row["verdict"] == "baseline"
    assert row["summary"].endswith("; disturbed repeats: cpu rep 1: read with care")


def test_a_thread_variant_is_compared_with_the_baseline_variant():
    quality, runs = _tables([
        ("cpu-t1", 16, REACHES_AT_2, 10.0), ("cpu-t1", 64, SLOW_BIG, 8.0),  # 20 s, 24 s
        ("cpu-t2", 16, REACHES_AT_2, 5.0), ("cpu-t2", 64, SLOW_BIG, 3.0),   # 10 s, 9 s
    ])  # fmt: skip
    best = best_setting_table(quality, runs, {"image_cnn": "cpu-t1"}, TARGET, ["image_cnn"])
    rows = best.set_index("device")
    assert list(best["device"]) == ["cpu-t1", "cpu-t2"]
    assert set(best["backend"]) == {"cpu"}  # one backend, two rows
    assert rows.loc["cpu-t1", "verdict"] == "baseline" and rows.loc["cpu-t1", "batch_size"] == 16
    t2 = rows.loc["cpu-t2"]
    assert (t2["batch_size"], t2["baseline_device"], t2["baseline_batch_size"]) == (
        64,
        "cpu-t1",
        16,
    )
    assert t2["speedup"] == pytest.approx(20 / 9) and t2["verdict"] == "sooner"
    assert t2["summary"] == (
        "cpu-t2 reaches accuracy ≥ 0.8 in 9 s of training, 2.22x sooner than cpu-t1 "
        "(2.22–2.22x), each at its best setting (cpu-t2 bs 64; cpu-t1 bs 16)"
    )
    assert rows.loc["cpu-t1", "summary"].startswith("cpu-t1 (the baseline) reaches")


def test_workloads_without_a_target_share_one_line(tmp_path):
    cells = [("cpu", 32, REACHES_AT_2, 10.0), ("cuda", 32, REACHES_AT_2, 2.0)]
    frames = [_as(w, _tables(cells)) for w in ("text_a", "text_b", "mlp_c", "image_cnn")]
    quality = pd.concat([q for q, _ in frames], ignore_index=True)
    runs = pd.concat([r for _, r in frames], ignore_index=True)
    workloads = ["text_a", "text_b", "mlp_c", "image_cnn"]
    best = best_setting_table(quality, runs, dict.fromkeys(workloads, "cpu"), TARGET, workloads)
    line = "No time to target for text_a, text_b, mlp_c: no target set (workloads.<name>.target)"
    assert list(best["workload"]) == ["image_cnn", "image_cnn", "text_a;text_b;mlp_c"]
    assert best["summary"].iloc[-1] == line and pd.isna(best["device"].iloc[-1])
    console, report = _lines(tmp_path, best)
    assert len(console) == len(report) == 3  # cpu's own, cuda vs cpu, the no-target line
    assert console[-1] == f"⏱ {line}" and report[-1] == f"⏱ {line}"
    assert sum("no target" in text for text in console) == 1
    # Each such workload's report says it too.
    inputs = _write(tmp_path, {"best_setting": best})
    text = render_workload_report("text_b", inputs, tmp_path / "results/reports/text_b.md")
    assert f"- ⏱ {line}" in text.split("## Time to target", 1)[1]


def test_one_workload_without_a_target_names_its_key():
    quality, runs = _tables([("cpu", 32, REACHES_AT_2, 10.0)])
    best = best_setting_table(quality, runs, {"image_cnn": "cpu"}, {}, ["image_cnn"])
    assert list(best["summary"]) == [
        "No time to target for image_cnn: no target set (workloads.image_cnn.target)"
    ]


def test_a_reason_for_the_whole_workload_is_said_once():
    quality, runs = _tables([("cpu", 32, REACHES_AT_2, 10.0), ("cuda", 32, REACHES_AT_2, 2.0)])
    best = best_setting_table(None, runs, {"image_cnn": "cpu"}, TARGET, ["image_cnn"])
    assert set(best["verdict"]) == {"insufficient data"} and len(best) == 2
    assert [s for s in best["summary"] if s] == [
        "no time to target on any device: the records hold no quality curve (made by an "
        "older trainbench)"
    ]


def test_a_device_without_a_verdict_keeps_its_own_time_and_one_that_never_reaches_says_so():
    quality, runs = _tables([
        ("cpu", 16, REACHES_AT_2, 10.0), ("cuda", 32, REACHES_AT_2[:2], 2.0),
        ("mps", 32, [NEVER] * 3, 1.0), ("mps", 64, [NEVER, NEVER, REACHES_AT_2[0]], 1.0),
    ])  # fmt: skip
    best = best_setting_table(quality, runs, {"image_cnn": "cpu"}, TARGET, ["image_cnn"])
    rows = best.set_index("device")
    assert rows.loc["cuda", "summary"] == (
        "cuda reaches accuracy ≥ 0.8 in 4 s of training (bs 32; median of 2 repeats, "
        "range 4–4 s); vs cpu at their best settings: insufficient data (cuda bs 32 has "
        "2 ok repeats; a verdict needs 3)"
    )
    assert rows.loc["mps", "verdict"] == "not reached" and pd.isna(rows.loc["mps", "batch_size"])
    assert rows.loc["mps", "summary"] == (
        "mps: not reached (the median repeat reached it at none of its batch sizes (bs 32 in "
        "0 of 3, bs 64 in 1 of 3 repeats; within 3 s of training at most))"
    )


def test_the_figure_draws_each_devices_best_setting(tmp_path):
    from trainbench.analysis.figures import style
    from trainbench.analysis.figures.targets import build_time_to_target, time_to_target_figure

    # cuda ran only bs 32, the cpu only 16: no same-batch cell, but a best-setting verdict.
    quality, runs = _tables([("cpu", 16, REACHES_AT_2, 10.0), ("cuda", 32, REACHES_AT_2, 2.0)])
    args = (quality, runs, {"image_cnn": "cpu"}, TARGET, ["image_cnn"])
    tables = {
        "best_setting": best_setting_table(*args),
        "time_to_target": time_to_target_table(*args),
    }
    assert tables["best_setting"].set_index("device").loc["cuda", "verdict"] == "sooner"
    fig = style.build_figure(lambda st: build_time_to_target(tables, st), {"dpi": 40})
    texts = {t.get_text() for t in fig.findobj(matplotlib.text.Text)}
    import matplotlib.pyplot as plt

    plt.close(fig)
    assert {"cpu  bs 16", "cuda  bs 32", "baseline", "5x sooner"} <= texts
    assert "no cpu at bs 32" in texts and "insufficient data" not in texts
    out = tmp_path / "time_to_target.png"
    time_to_target_figure(tables, out, dpi=40)
    assert out.stat().st_size > 0


def test_a_row_without_a_device_is_printed_without_a_workload():
    rows = [{"workload": "a;b", "device": "", "summary": "No time to target for a, b: …"},
            {"workload": "c", "device": "cpu", "summary": "cpu reaches …"},
            {"workload": "c", "device": "cuda", "summary": ""}]  # fmt: skip
    assert target_lines(rows, quote="`") == [
        "⏱ No time to target for a, b: …",
        "⏱ `c`: cpu reaches …",
    ]
