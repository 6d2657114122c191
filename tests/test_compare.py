"""Comparison on purpose (trainbench.analysis.stats.compare): one software or results
folder against another on the same machine_device, never pooled; the ratio of medians
with the speedup table's interval and verdict, time to target where both sides have it,
the ⇄ line; and the config check of aggregate.compare."""

from __future__ import annotations

import copy
import math

import numpy as np
import pandas as pd
import pytest
from stats_helpers import run
from trainbench.analysis.stats import COLUMNS, publish
from trainbench.analysis.stats.compare import COMPARISON_COLUMNS, comparison_table
from trainbench.analysis.stats.intervals import ratio_interval
from trainbench.config import ConfigError, validate_config

MACHINE = "cpu@AMD EPYC 7B13"
OLD, NEW = "torch 2.5.1", "torch 2.13.0"
TARGET = {"image_cnn": {"metric": "accuracy", "value": 0.8}}


def _record(software: str, folder: str, batch_size: int, rep: int) -> str:
    where = folder or "results"
    return (
        f"{where}/runs/image_cnn/{software.replace(' ', '')}/bs{batch_size}/rep{rep}/metrics.json"
    )


def side(speeds, software=OLD, folder="", batch_size=32, machine=MACHINE, **values) -> list[dict]:
    """runs.csv rows of one side: one ok record per speed, labelled as the merge labels."""
    torch = software.removeprefix("torch ") if software else "2.13.0"
    return [
        run("image_cnn", f"{machine} · {software}" if software else machine, batch_size, rep,
            samples_per_s=float(v), torch=torch, software=software, machine_device=machine,
            hardware="AMD EPYC 7B13", results_folder=folder,
            record=_record(software, folder, batch_size, rep), **values)
        for rep, v in enumerate(speeds)
    ]  # fmt: skip


def table(*sides, **kwargs) -> pd.DataFrame:
    return comparison_table(pd.DataFrame([r for s in sides for r in s]), None, **kwargs)


def test_two_torch_versions_three_repeats_a_range_and_faster():
    out = table(side([100, 101, 102]), side([130, 131, 132], NEW))
    assert list(out.columns) == COMPARISON_COLUMNS
    assert len(out) == 1
    row = out.iloc[0]
    assert (row["side"], row["baseline_side"], row["by"]) == (NEW, OLD, "software")
    assert row["machine_device"] == MACHINE and row["hardware"] == "AMD EPYC 7B13"
    assert row["repeats"] == 3 and row["baseline_repeats"] == 3
    assert row["median"] == 131 and row["baseline_median"] == 101
    assert row["ratio"] == pytest.approx(131 / 101)
    # the extreme pairwise ratios: min(new)/max(old) … max(new)/min(old)
    assert row["low"] == pytest.approx(130 / 102) and row["high"] == pytest.approx(132 / 100)
    assert row["interval"] == "range of 3 vs 3 runs"
    assert row["verdict"] == "faster"
    assert row["line"] == (
        f"⇄ image_cnn on {MACHINE} bs 32: torch 2.13.0 trains 1.3x the samples/s of "
        "torch 2.5.1 (1.27–1.32x, range of 3 vs 3 runs): faster"
    )


def test_oldest_torch_is_the_baseline_by_version_not_by_text():
    # "2.13.0" < "2.5.1" as text; as versions 2.5.1 is older
    out = table(side([130, 131, 132], NEW), side([100, 101, 102]))
    assert out.iloc[0]["baseline_side"] == OLD and out.iloc[0]["verdict"] == "faster"


def test_slower_and_overlapping_sides():
    slower = table(side([100, 101, 102]), side([80, 81, 82], NEW)).iloc[0]
    assert slower["verdict"] == "slower" and slower["high"] == pytest.approx(82 / 100)
    overlap = table(side([100, 110, 120]), side([105, 115, 125], NEW)).iloc[0]
    assert overlap["verdict"] == "no clear difference"
    assert overlap["low"] == pytest.approx(105 / 120) and overlap["high"] == pytest.approx(1.25)


def test_five_repeats_a_bootstrap_ci_of_the_ratio_of_medians():
    old = [100.0, 98.0, 103.0, 101.0, 99.0]
    new = [131.0, 128.0, 135.0, 130.0, 133.0]
    row = table(side(old), side(new, NEW)).iloc[0]
    assert row["ratio"] == pytest.approx(131 / 100)  # the medians by hand
    assert row["interval"] in ("95% BCa CI", "95% percentile CI")
    assert 128 / 103 <= row["low"] < row["ratio"] < row["high"] <= 135 / 98
    same = ratio_interval(new, old)  # the published helper, nothing recomputed here
    assert (row["low"], row["high"], row["interval"]) == (same.low, same.high, same.kind)
    assert row["verdict"] == "faster"


def test_fewer_than_three_repeats_is_insufficient_data():
    row = table(side([100, 101]), side([130, 131, 132], NEW)).iloc[0]
    assert row["verdict"] == "insufficient data"
    assert row["reason"] == "torch 2.5.1 has 2 ok repeats; a verdict needs 3"
    assert row["ratio"] == pytest.approx(131 / 100.5)  # the ratio is still stated
    assert row["line"].endswith(
        ": insufficient data (torch 2.5.1 has 2 ok repeats; a verdict needs 3)"
    )


def test_a_disturbed_repeat_on_either_side_is_disturbed():
    new = side([130, 131, 132], NEW)
    new[1]["disturbed"] = True
    row = table(side([100, 101, 102]), new).iloc[0]
    assert row["verdict"] == "disturbed"
    assert "torch 2.13.0 rep 1 was disturbed" in row["reason"]


def test_no_software_split_gives_an_empty_table_with_the_columns():
    rows = side([100, 101, 102], software="") + side([130, 131, 132], software="", batch_size=64)
    out = table(rows)
    assert out.empty and list(out.columns) == COMPARISON_COLUMNS
    assert table(side([1, 2, 3]), side([4, 5, 6], NEW), compare={"by": "none"}).empty


def test_no_comparison_across_machines():
    other = side([130, 131, 132], NEW, machine="cpu@Intel Xeon")
    assert table(side([100, 101, 102]), other).empty


def test_by_folder_the_older_folder_is_the_baseline():
    last_month = side([100, 101, 102], folder="old/results", started_unix=1.0e9)
    this_week = side([130, 131, 132], NEW, started_unix=2.0e9)
    row = table(last_month, this_week, compare={"by": "folder"}).iloc[0]
    assert (row["side"], row["baseline_side"], row["by"]) == ("this run", "old/results", "folder")
    assert row["ratio"] == pytest.approx(131 / 101) and row["verdict"] == "faster"
    # without record starts: the included folder before this run
    plain = table(side([100, 101, 102], folder="old/results"), side([130, 131, 132], NEW),
                  compare={"by": "folder"}).iloc[0]  # fmt: skip
    assert plain["baseline_side"] == "old/results"


def test_by_folder_one_software_is_compared_across_folders():
    out = table(side([100, 101, 102], folder="a"), side([130, 131, 132], folder="b"),
                compare={"by": "folder", "baseline": "b/"})  # fmt: skip
    row = out.iloc[0]
    assert (row["side"], row["baseline_side"]) == ("a", "b")
    assert row["ratio"] == pytest.approx(101 / 131) and row["verdict"] == "slower"


@pytest.mark.parametrize("named", ["torch 2.13.0", "2.13.0"])
def test_an_explicit_baseline(named):
    row = table(side([100, 101, 102]), side([130, 131, 132], NEW),
                compare={"baseline": named}).iloc[0]  # fmt: skip
    assert (row["side"], row["baseline_side"]) == (OLD, NEW)
    assert row["ratio"] == pytest.approx(101 / 131) and row["verdict"] == "slower"


def test_a_baseline_that_names_no_side_is_a_note_row():
    out = table(side([100, 101, 102]), side([130, 131, 132], NEW), compare={"baseline": "2.4.0"})
    assert len(out) == 1
    row = out.iloc[0]
    assert row["workload"] == "(all)" and row["verdict"] == "insufficient data"
    assert "'2.4.0' (aggregate.compare.baseline) matches no side" in row["reason"]
    assert "torch 2.5.1, torch 2.13.0" in row["reason"] and "Fix:" in row["reason"]
    assert row["line"].startswith(f"⇄ {MACHINE}: no comparison: the baseline '2.4.0'")


def test_a_batch_size_the_baseline_did_not_run():
    out = table(side([100, 101, 102]), side([130, 131, 132], NEW),
                side([200, 201, 202], NEW, batch_size=64))  # fmt: skip
    assert list(out["batch_size"]) == [32, 64]
    missing = out.iloc[1]
    assert missing["verdict"] == "insufficient data" and math.isnan(missing["ratio"])
    assert missing["reason"] == "no run of torch 2.5.1 at bs 64"
    assert missing["line"] == (
        f"⇄ image_cnn on {MACHINE} bs 64: torch 2.13.0 against torch 2.5.1: "
        "insufficient data (no run of torch 2.5.1 at bs 64)"
    )


# ----------------------------------------------------------------------------- time to target


def _quality(rows: list[dict], accuracies: list[list[float]], seconds: float) -> list[dict]:
    """Quality rows for each record of ``rows``: an evaluation every ``seconds``."""
    out = []
    for r, accs in zip(rows, accuracies, strict=True):
        out += [
            {"workload": "image_cnn", "device": r["device"], "batch_size": r["batch_size"],
             "rep": r["rep"], "point": i, "epoch": i + 1, "steps": 10 * (i + 1),
             "samples": 320 * (i + 1), "train_seconds": seconds * (i + 1),
             "wall_seconds": 2 + seconds * (i + 1), "train_joules": None,
             "energy_window_seconds": seconds * (i + 1), "energy_min_seconds": 1.0,
             "eval_every": "epochs 1", "eval_accuracy": a, "record": r["record"]}
            for i, a in enumerate(accs)
        ]  # fmt: skip
    return out


AT_2 = [0.5, 0.85, 0.9]
NEVER = [0.5, 0.6, 0.7]


def _with_targets(new_accuracies):
    old, new = side([100, 101, 102]), side([130, 131, 132], NEW)
    quality = pd.DataFrame(_quality(old, [AT_2] * 3, 10.0) + _quality(new, new_accuracies, 5.0))
    runs = pd.DataFrame(old + new)
    return comparison_table(runs, quality, targets=TARGET).iloc[0]


def test_time_to_target_where_both_sides_reached():
    row = _with_targets([AT_2] * 3)
    assert row["ttt_metric"] == "accuracy" and row["ttt_direction"] == "≥"
    assert row["ttt_target"] == 0.8
    assert row["ttt_median_s"] == pytest.approx(10.0)  # 2nd evaluation, 2 x 5 s
    assert row["ttt_baseline_median_s"] == pytest.approx(20.0)
    assert row["ttt_ratio"] == pytest.approx(2.0)
    assert (row["ttt_low"], row["ttt_high"]) == (pytest.approx(2.0), pytest.approx(2.0))
    assert row["ttt_verdict"] == "sooner"
    assert row["line"].endswith("; reaches accuracy ≥ 0.8 2x sooner (2–2x): sooner")


def test_time_to_target_where_the_baseline_side_mostly_never_reached_it():
    old, new = side([100, 101, 102]), side([130, 131, 132], NEW)
    quality = pd.DataFrame(
        _quality(old, [AT_2, NEVER, NEVER], 10.0) + _quality(new, [AT_2] * 3, 5.0)
    )
    row = comparison_table(pd.DataFrame(old + new), quality, targets=TARGET).iloc[0]
    assert math.isinf(row["ttt_ratio"]) and math.isinf(row["ttt_baseline_median_s"])
    assert (row["ttt_baseline_reached"], row["ttt_baseline_repeats"]) == (1, 3)
    # no "inf x sooner": the counts say what happened, the interval stays the verdict's
    assert "∞x sooner" not in row["line"].replace("–∞x sooner", "")
    assert "in 3 of 3 repeats, torch 2.5.1 in 1 of 3, whose median repeat did not" in row["line"]


def test_time_to_target_with_a_censored_repeat():
    row = _with_targets([AT_2, AT_2, NEVER])
    assert row["ttt_median_s"] == pytest.approx(10.0)
    assert row["ttt_ratio"] == pytest.approx(2.0)
    assert row["ttt_low"] == 0.0 and row["ttt_high"] == pytest.approx(2.0)  # 20 / inf … 20 / 10
    assert "censored" in row["ttt_interval"]
    assert row["ttt_verdict"] == "no clear difference"
    assert (row["ttt_reached"], row["ttt_repeats"]) == (2, 3)
    assert row["line"].endswith(
        "; reaches accuracy ≥ 0.8 2x sooner (0–2x), in 2 of 3 repeats, torch 2.5.1 in 3 of 3: "
        "no clear difference"
    )
    not_reached = _with_targets([AT_2, NEVER, NEVER])
    assert math.isinf(not_reached["ttt_median_s"])
    assert not_reached["ttt_verdict"] == "not reached"
    assert not_reached["line"].endswith(
        "; reaches accuracy ≥ 0.8 in 1 of 3 repeats, torch 2.5.1 in 3 of 3: its median "
        "repeat does not (not reached)"
    )


def test_no_target_leaves_the_time_columns_empty():
    old, new = side([100, 101, 102]), side([130, 131, 132], NEW)
    quality = pd.DataFrame(_quality(old, [AT_2] * 3, 10.0) + _quality(new, [AT_2] * 3, 5.0))
    row = comparison_table(pd.DataFrame(old + new), quality, targets={}).iloc[0]
    assert pd.isna(row["ttt_verdict"]) and np.isnan(row["ttt_ratio"])
    assert "reaches" not in row["line"]


# ----------------------------------------------------------------------------- publish, console


def test_published_with_the_config_block(tmp_path):
    runs = pd.DataFrame(side([100, 101, 102]) + side([130, 131, 132], NEW))
    devices = {"image_cnn": [f"{MACHINE} · {OLD}"]}
    out = publish({"runs": runs}, devices, compare={"by": "software", "baseline": None})
    assert list(out["comparison"].columns) == COLUMNS["comparison"] == COMPARISON_COLUMNS
    assert out["comparison"].iloc[0]["verdict"] == "faster"
    assert publish({"runs": runs}, devices, compare={"by": "none"})["comparison"].empty

    from trainbench.analysis.console import summary_lines

    (tmp_path / "tables").mkdir()
    out["comparison"].to_csv(tmp_path / "tables" / "comparison.csv", index=False)
    lines = summary_lines(tmp_path / "report.md")
    assert f"  {out['comparison'].iloc[0]['line']}" in lines
    assert lines[-1] == f"Report: {tmp_path / 'report.md'}"


# ----------------------------------------------------------------------------- config


def _config(base: dict, **compare) -> dict:
    config = copy.deepcopy(base)
    config.setdefault("aggregate", {})["compare"] = compare
    return config


def test_compare_defaults(schema_defaults_config):
    config = validate_config(copy.deepcopy(schema_defaults_config))
    assert config["aggregate"]["compare"] == {"by": "software", "baseline": None}


def test_a_folder_baseline_must_be_an_included_folder(schema_defaults_config, tmp_path):
    old = tmp_path / "old"
    (old / "runs").mkdir(parents=True)
    base = _config(schema_defaults_config, by="folder", baseline=str(tmp_path / "elsewhere"))
    base["aggregate"]["include_results"] = [str(old)]
    with pytest.raises(ConfigError) as error:
        validate_config(base)
    text = str(error.value)
    assert "`aggregate.compare.baseline`" in text and "aggregate.include_results" in text
    assert "Fix:" in text and "'this run'" in text
    for good in (str(old), str(old) + "/", "this run"):
        ok = _config(schema_defaults_config, by="folder", baseline=good)
        ok["aggregate"]["include_results"] = [str(old)]
        validate_config(ok)


def test_by_folder_needs_a_folder_and_a_baseline_needs_a_comparison(schema_defaults_config):
    with pytest.raises(ConfigError, match=r"`aggregate.compare.by` is folder.*Fix:"):
        validate_config(_config(schema_defaults_config, by="folder"))
    with pytest.raises(ConfigError, match=r"`aggregate.compare.baseline`.*by` is none.*Fix:"):
        validate_config(_config(schema_defaults_config, by="none", baseline="2.5.1"))
    with pytest.raises(ConfigError, match=r"aggregate.compare.by"):
        validate_config(_config(schema_defaults_config, by="torch"))


# ----------------------------------------------------------------------------- report, figure


def _published(tmp_path) -> tuple[pd.DataFrame, dict]:
    out = table(
        side([100, 101, 102]), side([130, 131, 132], NEW), side([90, 91, 92], "torch 2.6.0")
    )
    path = tmp_path / "results" / "tables" / "comparison.csv"
    path.parent.mkdir(parents=True)
    out.to_csv(path, index=False)
    return out, {"comparison": str(path)}


def test_the_report_has_a_comparison_section_only_with_rows(tmp_path):
    from trainbench.analysis.report import render_report

    out, inputs = _published(tmp_path)
    text = render_report(inputs, tmp_path / "results" / "report.md")
    section = text.split("## Comparison\n", 1)[1].split("\n## ", 1)[0]
    assert "`aggregate.compare.by: software`" in section
    assert f"- `{MACHINE}`: torch 2.6.0, torch 2.13.0 against the baseline torch 2.5.1" in section
    for line in out["line"]:
        assert f"- {line}" in section
    assert (
        "| torch 2.13.0 | torch 2.5.1 | 3 | 3 | 131 | 101 | 1.3x | 1.27–1.32x (range of 3 vs 3 runs) | faster |"
        in section
    )
    assert "([table](tables/comparison.md))" in section
    empty = tmp_path / "empty.csv"
    pd.DataFrame(columns=COMPARISON_COLUMNS).to_csv(empty, index=False)
    plain = render_report({"comparison": str(empty)}, tmp_path / "results" / "report.md")
    assert "## Comparison" not in plain


def test_the_figure_draws_the_ratios_or_says_there_is_none(tmp_path):
    from trainbench.analysis.figures.comparison import EMPTY, build, comparison_figure
    from trainbench.analysis.figures.style import build_figure

    out, _ = _published(tmp_path)
    fig = build_figure(lambda st: build({"comparison": out}, st), {})
    from matplotlib.text import Text

    texts = {t.get_text() for t in fig.findobj(Text)}
    assert {"bs 32  torch 2.6.0", "bs 32  torch 2.13.0", "1.3x faster", "0.901x slower"} <= texts
    assert fig.axes[0].get_title() == f"image_cnn on {MACHINE} (vs torch 2.5.1)"
    empty = build_figure(lambda st: build({"comparison": out.iloc[:0]}, st), {})
    assert any(EMPTY[:40] in t.get_text().replace("\n", " ") for t in empty.texts)
    comparison_figure({"comparison": out}, tmp_path / "comparison.png")
    assert (tmp_path / "comparison.png").stat().st_size > 0
