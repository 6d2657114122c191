"""Figures render published tables only: every family draws a valid, byte-stable PNG from
hand-made tables with the columns of the published-table contract; files respect the
umask; missing or empty tables give the message figure; interval wording comes from
the tables; and no module of the package imports a statistics library or computes a
statistic."""

from __future__ import annotations

import ast
import logging
import os
import struct
import sys
import zlib
from pathlib import Path

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
from matplotlib.collections import PathCollection
from matplotlib.text import Text
from trainbench.analysis import figures
from trainbench.analysis.figures import (
    DRAW_ORDER,
    FIGURE_NAMES,
    FIGURES,
    device_color,
    device_order,
    draw_figures,
    style,
)
from trainbench.analysis.figures import epoch_time as epoch_time_module
from trainbench.analysis.figures import matmul as matmul_module
from trainbench.analysis.figures import speedup as speedup_module
from trainbench.analysis.figures import throughput as throughput_module
from trainbench.analysis.tables import read_table

PACKAGE = Path(figures.__file__).resolve().parent
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
DPI = 40  # small files keep the tests fast
MESSAGE_PX = (round(style.MESSAGE_SIZE[0] * DPI), round(style.MESSAGE_SIZE[1] * DPI))

# ----------------------------------------------------------------------------- columns
# from the published-table contract (record tables: the columns the figures may read)

RUNS = ["workload", "device", "device_label", "batch_size", "rep", "status", "samples_per_s"]
EPOCHS = ["workload", "device", "batch_size", "rep", "epoch", "train_loss", "timed_seconds",
          "full_epoch", "samples_per_s", "eval_seconds", "eval_cold"]  # fmt: skip
MATMUL = ["workload", "device", "device_label", "batch_size", "rep", "n", "dtype", "median_s",
          "iqr_s", "gflops", "noisy", "disturbed"]  # fmt: skip
SPEEDUP = ["workload", "batch_size", "device", "baseline", "n", "median", "low", "high",
           "interval", "baseline_n", "baseline_median", "speedup", "speedup_low",
           "speedup_high", "speedup_interval", "halfwidth", "verdict", "reason",
           "disturbed_runs", "short_window_runs", "no_steady_state_runs", "bimodal"]  # fmt: skip
PER_LABEL = ["workload", "device", "batch_size", "label", "n", "precision", "recall", "f1",
             "accuracy", "support", "baseline_f1", "f1_minus_baseline"]  # fmt: skip
MEMORY = ["workload", "device", "batch_size", "n", "memory_initial_bytes", "memory_peak_bytes",
          "memory_limit_bytes", "peak_fraction_of_limit", "memory_method"]  # fmt: skip
CROSSOVER = ["kind", "workload", "device", "batch_size", "quantity", "crossover", "compared_at",
             "device_value", "baseline_value", "verdict_at", "points_compared", "finding"]  # fmt: skip
EPOCH_SUMMARY = ["workload", "device", "batch_size", "epoch", "n", "train_loss",
                 "train_loss_min", "train_loss_max", "timed_seconds", "full_epoch",
                 "samples_per_s", "eval_seconds", "eval_cold", "eval_accuracy"]  # fmt: skip
MATMUL_SUMMARY = ["workload", "device", "batch_size", "n", "baseline", "repeats", "gflops",
                  "gflops_low", "gflops_high", "interval", "median_s", "speedup",
                  "speedup_low", "speedup_high", "speedup_interval", "verdict", "reason",
                  "noisy_runs", "disturbed_runs"]  # fmt: skip
VERIFICATION = ["workload", "device", "placement_pass", "autocast_pass", "fallback_pass",
                "fallback_detail"]  # fmt: skip
ENERGY = ["workload", "batch_size", "device", "n", "joules_per_sample", "samples_per_joule",
          "spj_low", "spj_high", "spj_interval", "verdict", "domains", "unavailable"]  # fmt: skip
from trainbench.analysis.stats.across_batch import ACROSS_BATCH_COLUMNS  # noqa: E402
from trainbench.analysis.stats.breakdown import BREAKDOWN_TABLE_COLUMNS  # noqa: E402
from trainbench.analysis.stats.compare import COMPARISON_COLUMNS  # noqa: E402
from trainbench.analysis.stats.targets import (  # noqa: E402
    QUALITY_CURVE_COLUMNS,
    TIME_TO_TARGET_COLUMNS,
)

COLUMNS = {
    "energy": ENERGY, "runs": RUNS, "epochs": EPOCHS, "matmul": MATMUL, "speedup": SPEEDUP,
    "eval_speed": SPEEDUP, "per_label": PER_LABEL, "memory": MEMORY, "crossover": CROSSOVER,
    "epoch_summary": EPOCH_SUMMARY, "matmul_summary": MATMUL_SUMMARY,
    "verification": VERIFICATION, "step_breakdown": BREAKDOWN_TABLE_COLUMNS,
    "quality_curve": QUALITY_CURVE_COLUMNS, "time_to_target": TIME_TO_TARGET_COLUMNS,
    "across_batch_sizes": ACROSS_BATCH_COLUMNS,
}  # fmt: skip

SIZES = {"image_cnn": [32, 128], "text_multilabel": [8, 32]}
SPEED = {"cpu": 1.0, "mps": 6.0, "cuda": 30.0}
METHOD = {"cpu": "host peak RSS", "mps": "MPS driver memory, sampled", "cuda": "CUDA allocator"}


def frame(name: str, rows: list[dict]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=COLUMNS[name])


def _speedup_row(workload, bs, device, interval, ratio_interval) -> dict:
    median = 100 * SPEED[device] * bs**0.5
    base = 100 * bs**0.5
    row = {"workload": workload, "batch_size": bs, "device": device, "baseline": "cpu", "n": 3,
           "median": median, "low": median * 0.96, "high": median * 1.03, "interval": interval,
           "baseline_n": 3, "baseline_median": base, "disturbed_runs": 0,
           "short_window_runs": 0, "no_steady_state_runs": 0, "bimodal": False}  # fmt: skip
    if device == "cpu":
        return row | {"speedup": 1.0, "verdict": "baseline", "reason": "the baseline"}
    verdict = "faster" if device == "cuda" else "no clear difference"
    return row | {
        "speedup": SPEED[device], "speedup_low": SPEED[device] * 0.93,
        "speedup_high": SPEED[device] * 1.08, "speedup_interval": ratio_interval,
        "verdict": verdict, "reason": f"{verdict} ({ratio_interval})",
    }  # fmt: skip


def _records(tables: dict) -> None:
    runs, epochs = [], []
    for workload, sizes in SIZES.items():
        for device, factor in SPEED.items():
            label = device + ("+cpu-fallback" if (device, workload) == ("mps", "text_multilabel") else "")  # fmt: skip
            for bs in sizes:
                for rep in range(3):
                    sps = 100 * factor * bs**0.5 * (1 + 0.02 * (rep - 1))
                    runs.append(
                        {"workload": workload, "device": device, "device_label": label,
                         "batch_size": bs, "rep": rep, "status": "ok", "samples_per_s": sps}
                    )  # fmt: skip
                    for epoch in (1, 2, 3):
                        epochs.append(
                            {"workload": workload, "device": device, "batch_size": bs,
                             "rep": rep, "epoch": epoch, "train_loss": 2.0 / epoch + 0.01 * rep,
                             "timed_seconds": 1000 / sps * (1 + 0.01 * epoch),
                             "full_epoch": "False" if epoch == 1 else "True"}
                        )  # fmt: skip
    runs.append({"workload": "image_cnn", "device": "cuda", "batch_size": 512, "rep": 0,
                 "status": "failed"})  # fmt: skip
    tables["runs"], tables["epochs"] = frame("runs", runs), frame("epochs", epochs)


def _per_workload(tables: dict, interval: str, ratio_interval: str) -> None:
    speedup, summary, per_label, memory = [], [], [], []
    for workload, sizes in SIZES.items():
        for device, factor in SPEED.items():
            for bs in sizes:
                speedup.append(_speedup_row(workload, bs, device, interval, ratio_interval))
                for epoch in (1, 2, 3):
                    summary.append(
                        {"workload": workload, "device": device, "batch_size": bs,
                         "epoch": epoch, "n": 3, "train_loss": 2.0 / epoch + 0.01,
                         "train_loss_min": 2.0 / epoch, "train_loss_max": 2.0 / epoch + 0.02,
                         "timed_seconds": 1000 / (100 * factor * bs**0.5),
                         "full_epoch": epoch > 1, "eval_accuracy": 0.5 + 0.1 * epoch}
                    )  # fmt: skip
                memory.append(
                    {"workload": workload, "device": device, "batch_size": bs, "n": 3,
                     "memory_initial_bytes": 300 * 2**20,
                     "memory_peak_bytes": (400 + 3 * bs) * 2**20,
                     "memory_limit_bytes": 16 * 2**30 if device != "cpu" else np.nan,
                     "peak_fraction_of_limit": 0.05 if device != "cpu" else np.nan,
                     "memory_method": METHOD[device]}
                )  # fmt: skip
                if workload != "text_multilabel":
                    continue
                for k, label in enumerate(["spam", "toxic", "off_topic"]):
                    f1 = 0.3 + 0.2 * k - 0.01 * (device != "cpu")
                    per_label.append(
                        {"workload": workload, "device": device, "batch_size": bs,
                         "label": label, "n": 3, "f1": f1, "support": 100 + k,
                         "baseline_f1": 0.3 + 0.2 * k,
                         "f1_minus_baseline": f1 - (0.3 + 0.2 * k)}
                    )  # fmt: skip
    # cuda at image_cnn bs 512 only failed: a row without a value
    speedup.append({"workload": "image_cnn", "batch_size": 512, "device": "cuda", "baseline": "cpu",
                    "n": 0, "verdict": "insufficient data", "reason": "no ok run of cuda"})  # fmt: skip
    tables.update(
        speedup=frame("speedup", speedup), eval_speed=frame("speedup", speedup),
        epoch_summary=frame("epoch_summary", summary), per_label=frame("per_label", per_label),
        memory=frame("memory", memory),
    )  # fmt: skip


def _matmul(tables: dict, interval: str) -> None:
    gflops = {"cpu": 50.0, "mps": 80.0, "cuda": 400.0}
    records, summary = [], []
    for device, g in gflops.items():
        for n in (64, 128, 256, 512):
            value = g * (n / 64) ** 0.5
            for rep in range(3):
                records.append(
                    {"workload": "matmul", "device": device, "device_label": device,
                     "batch_size": 1, "rep": rep, "n": n, "dtype": "float32",
                     "median_s": 2 * n**3 / value / 1e9, "gflops": value * (1 + 0.01 * rep)}
                )  # fmt: skip
            summary.append(
                {"workload": "matmul", "device": device, "batch_size": 1, "n": n,
                 "baseline": "cpu", "repeats": 3, "gflops": value, "gflops_low": value,
                 "gflops_high": value * 1.02, "interval": interval,
                 "verdict": "baseline" if device == "cpu" else "faster"}
            )  # fmt: skip
    cross = [
        {"kind": "matmul size", "workload": "matmul", "device": "cuda", "batch_size": 1,
         "crossover": 128, "finding": "n ≥ 128 (cuda 8x cpu, range of 3 runs)"},
        {"kind": "matmul size", "workload": "matmul", "device": "mps", "batch_size": 1,
         "crossover": np.nan, "finding": "not within the measured range (n ≤ 512)"},
        {"kind": "training batch size", "workload": "image_cnn", "device": "cuda",
         "batch_size": np.nan, "crossover": 32, "finding": "bs ≥ 32"},
    ]  # fmt: skip
    tables.update(
        matmul=frame("matmul", records), matmul_summary=frame("matmul_summary", summary),
        crossover=frame("crossover", cross),
    )  # fmt: skip


def _energy(tables: dict, interval: str) -> None:
    """cpu without counters (its note), mps and cuda measured."""
    rows = []
    for workload, sizes in SIZES.items():
        for device in SPEED:
            for bs in sizes:
                spj = {"cpu": np.nan, "mps": 40.0, "cuda": 12.0}[device] * bs**0.2
                note = "energy unavailable on cpu: no RAPL here" if device == "cpu" else ""
                rows.append(
                    {"workload": workload, "batch_size": bs, "device": device,
                     "n": 0 if device == "cpu" else 3, "joules_per_sample": 1 / spj,
                     "samples_per_joule": spj, "spj_low": spj * 0.95, "spj_high": spj * 1.04,
                     "spj_interval": interval, "domains": "" if device == "cpu" else "gpu",
                     "unavailable": note}
                )  # fmt: skip
    tables["energy"] = frame("energy", rows)


def make_tables(
    interval: str = "range of 3 runs", ratio_interval: str = "range of 3 vs 3 runs"
) -> dict[str, pd.DataFrame]:
    """Two training workloads on cpu (baseline), mps (CPU fallback on text_multilabel) and
    cuda, 3 repeats, and matmul; the published tables as the statistics layer writes them."""
    tables: dict[str, pd.DataFrame] = {}
    _records(tables)
    _per_workload(tables, interval, ratio_interval)
    _matmul(tables, interval)
    _energy(tables, interval)
    tables["verification"] = frame(
        "verification",
        [{"workload": "text_multilabel", "device": "mps", "fallback_pass": "False"}],
    )
    _step_breakdown(tables)
    _targets(tables)
    _comparison(tables)
    return tables


def _comparison(tables: dict) -> None:
    """Two comparison rows as trainbench.analysis.stats.compare writes them: a newer torch
    against the oldest on one machine, faster and insufficient data."""
    machine = "cpu@AMD EPYC 7B13"
    tables["comparison"] = pd.DataFrame(columns=COMPARISON_COLUMNS, data=[
        {"workload": "image_cnn", "machine_device": machine, "batch_size": bs, "by": "software",
         "side": "torch 2.13.0", "baseline_side": "torch 2.5.1", "ratio": ratio, "low": low,
         "high": high, "interval": "range of 3 vs 3 runs", "verdict": verdict}
        for bs, ratio, low, high, verdict in ((32, 1.3, 1.27, 1.32, "faster"),
                                              (64, 1.1, 0.9, 1.4, "insufficient data"))
    ])  # fmt: skip


def _targets(tables: dict) -> None:
    """quality_curve and time_to_target rows as trainbench.analysis.stats.targets writes
    them: one censored cell (not reached), one open interval, one sooner."""
    curve, times = [], []
    cells = (("cpu", 16, 10.0, 3), ("cuda", 32, 1.0, 3), ("cuda", 256, 0.5, 1))
    for device, bs, seconds, reached in cells:
        for point in range(4):
            curve.append({"workload": "image_cnn", "device": device, "batch_size": bs,
                          "point": point, "epoch": point + 1, "repeats": 3,
                          "train_seconds": seconds * (point + 1), "metric": "accuracy",
                          "value": 0.3 + 0.15 * point, "value_min": 0.25 + 0.15 * point,
                          "value_max": 0.35 + 0.15 * point, "target": 0.6})  # fmt: skip
        median = seconds * 3 if reached > 1 else np.inf
        times.append({"workload": "image_cnn", "device": device, "batch_size": bs,
                      "metric": "accuracy", "target": 0.6, "direction": "≥",
                      "eval_every": "epochs 1", "repeats": 3, "reached": reached,
                      "median_s": median, "low": seconds * 2,
                      "high": np.inf if reached < 3 else seconds * 4,
                      "interval": "range of 3 runs", "speedup": 10.0 / seconds if device != "cpu" else 1.0,
                      "verdict": {"cpu": "baseline", 32: "sooner", 256: "not reached"}.get(
                          device if device == "cpu" else bs)})  # fmt: skip
    tables["quality_curve"] = frame("quality_curve", curve)
    tables["time_to_target"] = frame("time_to_target", times)
    # seed report 001's sizes: cuda at 32 against the cpu at 16, and one without a verdict
    across = [{"workload": "image_cnn", "device": "cuda", "batch_size": 32, "baseline": "cpu",
               "baseline_batch_size": 16, "same_batch_sizes": "256", "speedup": 5.6,
               "speedup_low": 4.73, "speedup_high": 7.32,
               "speedup_interval": "range of 3 vs 3 runs", "verdict": "faster"},
              {"workload": "image_cnn", "device": "mps", "batch_size": 64, "baseline": "cpu",
               "baseline_batch_size": 16, "same_batch_sizes": "256", "speedup": np.nan,
               "speedup_low": np.nan, "speedup_high": np.nan, "speedup_interval": "",
               "verdict": "insufficient data"}]  # fmt: skip
    tables["across_batch_sizes"] = frame("across_batch_sizes", across)


def _step_breakdown(tables: dict) -> None:
    """Each training cell's shares and label, as trainbench.analysis.stats.breakdown writes them."""
    rows = []
    for workload, sizes in (("image_cnn", (32, 128)), ("text_multilabel", (8, 16))):
        for device, busy, issue in (("cpu", 0.95, None), ("mps", 0.6, 0.3), ("cuda", 0.2, 0.7)):
            for bs in sizes:
                bound = {"cpu": "device-bound", "mps": "mixed", "cuda": "launch-bound"}[device]
                rows.append({"workload": workload, "device": device, "batch_size": bs,
                             "repeats": 3, "steady_step_s": 0.01 * bs / 32,
                             "data_wait_share": 0.02, "host_issue_share": issue,
                             "device_busy": busy, "bound": bound})  # fmt: skip
    tables["step_breakdown"] = frame("step_breakdown", rows)


@pytest.fixture(scope="module")
def tables() -> dict[str, pd.DataFrame]:
    return make_tables()


# ----------------------------------------------------------------------------- helpers


def png_size(path: Path) -> tuple[int, int]:
    """Width and height from a PNG's IHDR chunk, after checking the signature and its CRC."""
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE, f"{path} is not a PNG"
    length, kind = struct.unpack(">I4s", data[8:16])
    assert kind == b"IHDR" and length == 13
    (crc,) = struct.unpack(">I", data[29:33])
    assert crc == zlib.crc32(data[12:29]), "IHDR CRC mismatch"
    assert data.endswith(b"IEND\xaeB`\x82"), "PNG is truncated"
    return struct.unpack(">II", data[16:24])


def png_text_chunks(path: Path) -> list[bytes]:
    data, pos, found = path.read_bytes(), 8, []
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos : pos + 8])
        if kind in (b"tEXt", b"iTXt", b"zTXt", b"tIME"):
            found.append(kind + b":" + data[pos + 8 : pos + 8 + length])
        pos += 12 + length
    return found


def drawn(module, tables):
    """A family's figure, drawn (tick labels are set at draw time), then closed: its
    texts and the number of scatter points per axes."""
    fig = style.build_figure(lambda st: module.build(tables, st), {"dpi": DPI})
    try:
        fig.canvas.draw()
        texts = [t.get_text() for t in fig.findobj(Text)]
        points = sum(len(c.get_offsets()) for c in fig.findobj(PathCollection))
        return "\n".join(texts), points
    finally:
        plt.close(fig)


# ----------------------------------------------------------------------------- rendering


def test_registry_names():
    assert FIGURE_NAMES == (
        "throughput", "speedup", "epoch_time", "loss", "per_label", "matmul", "memory", "energy",
        "step_breakdown", "quality", "time_to_target", "across_batch", "comparison",
    )  # fmt: skip
    assert tuple(FIGURES) == FIGURE_NAMES
    assert not (PACKAGE.parent / "figures.py").exists(), "the old figures.py module is back"


@pytest.fixture(scope="module")
def first_renders(tables, tmp_path_factory) -> dict[str, Path]:
    """Each family rendered once from ``tables`` (shared by the tests below)."""
    folder = tmp_path_factory.mktemp("first")
    paths = {}
    for name in FIGURE_NAMES:
        paths[name] = folder / name / f"{name}.png"
        FIGURES[name](tables, paths[name], dpi=DPI)
    return paths


@pytest.mark.parametrize("name", FIGURE_NAMES)
def test_figure_renders_valid_byte_stable_png(tables, first_renders, tmp_path, name):
    first, second = first_renders[name], tmp_path / f"{name}.png"
    FIGURES[name](dict(tables), second, dpi=DPI)
    width, height = png_size(first)
    assert (width, height) != MESSAGE_PX, "rendered the 'nothing to draw' figure"
    assert width > 5 * DPI and height > 2.5 * DPI
    assert first.read_bytes() == second.read_bytes(), "same input gave different bytes"
    assert png_text_chunks(first) == [], "PNG carries metadata (software/time)"
    assert sorted(p.name for p in first.parent.iterdir()) == [f"{name}.png"], "temp file left"


@pytest.mark.slow
@pytest.mark.parametrize("workers", [1, 2])
def test_families_drawn_side_by_side_give_the_same_bytes(tables, first_renders, tmp_path, workers):
    """draw_figures (the figures job): every family in forked processes, each the bytes
    it gives drawn alone, each reported once written."""
    assert sorted(DRAW_ORDER) == sorted(FIGURE_NAMES)
    paths = {name: tmp_path / f"{name}.png" for name in FIGURE_NAMES}
    written = []
    draw_figures(tables, paths, workers=workers, done=lambda n, p: written.append(n), dpi=DPI)
    assert sorted(written) == sorted(FIGURE_NAMES)
    for name, path in paths.items():
        assert path.read_bytes() == first_renders[name].read_bytes(), name


@pytest.mark.slow
def test_families_drawn_in_spawned_processes_as_on_macos_give_the_same_bytes(
    tables, first_renders, tmp_path, monkeypatch, caplog
):
    """On macOS (patched here) the workers are spawned, never forked (fork is unsafe
    there): every family and its tables cross by pickle into a fresh interpreter, and
    each figure is still the bytes drawn alone in this process."""
    monkeypatch.setattr(sys, "platform", "darwin")
    caplog.set_level(logging.INFO, logger="trainbench.analysis.worker_processes")
    paths = {name: tmp_path / f"{name}.png" for name in FIGURE_NAMES}
    draw_figures(tables, paths, workers=2, dpi=DPI)
    assert "figures: 2 worker process(es), start method spawn (darwin)" in caplog.text
    for name, path in paths.items():
        assert path.read_bytes() == first_renders[name].read_bytes(), name


def test_a_family_that_fails_in_a_forked_process_fails_the_job(tables, tmp_path):
    paths = {name: tmp_path / f"{name}.png" for name in ("loss", "memory")}
    with pytest.raises(TypeError, match="colour"):
        draw_figures(tables, paths, workers=2, colour="red")
    with pytest.raises(KeyError, match="nope"):
        draw_figures(tables, {"nope": tmp_path / "x.png"}, workers=2)


@pytest.mark.slow
def test_tables_read_back_from_csv_give_the_same_figures(tables, first_renders, tmp_path):
    """CSV round trip (bools as "True"/"False", ints as floats): the same bytes."""
    read = {}
    for name, table in tables.items():
        table.to_csv(tmp_path / f"{name}.csv", index=False)
        read[name] = read_table(tmp_path / f"{name}.csv")
    for name in FIGURE_NAMES:
        FIGURES[name](read, tmp_path / f"{name}.png", dpi=DPI)
        assert (tmp_path / f"{name}.png").read_bytes() == first_renders[name].read_bytes(), name


@pytest.mark.parametrize("mask, mode", [(0o022, 0o644), (0o027, 0o640)])
def test_file_mode_follows_the_umask(tables, tmp_path, mask, mode):
    old = os.umask(mask)
    try:
        FIGURES["loss"](tables, tmp_path / "loss.png", dpi=DPI)
        FIGURES["memory"]({}, tmp_path / "memory.png", dpi=DPI)  # the message figure too
    finally:
        os.umask(old)
    for path in tmp_path.iterdir():
        assert path.stat().st_mode & 0o777 == mode, path.name


def _no_rows() -> dict[str, pd.DataFrame]:
    return {name: pd.DataFrame(columns=columns) for name, columns in COLUMNS.items()}


def _nothing_drawable() -> dict[str, pd.DataFrame]:
    """Rows, but none a figure may draw: only baseline rows or rows without a value,
    epochs that are not full, a failed run."""
    t = make_tables()
    t["speedup"] = t["speedup"][t["speedup"]["device"] == "cpu"].assign(median=np.nan)
    t["epochs"] = t["epochs"].assign(full_epoch=False)
    t["epoch_summary"] = t["epoch_summary"].assign(full_epoch="False", train_loss=np.nan)
    t["per_label"] = t["per_label"].assign(f1=np.nan)
    t["memory"] = t["memory"].assign(memory_peak_bytes=np.nan)
    t["matmul_summary"] = t["matmul_summary"].assign(gflops=np.nan)
    t["matmul"] = t["matmul"].assign(gflops=np.nan)
    t["energy"] = t["energy"].assign(samples_per_joule=np.nan)
    t["step_breakdown"] = t["step_breakdown"].assign(
        data_wait_share=np.nan, host_issue_share=np.nan, device_busy=np.nan
    )
    t["quality_curve"] = t["quality_curve"].assign(value=np.nan)
    t["time_to_target"] = t["time_to_target"].assign(median_s=np.inf)
    t["across_batch_sizes"] = t["across_batch_sizes"].assign(batch_size=np.nan)
    t["comparison"] = t["comparison"].assign(ratio=np.nan)
    return t


EMPTY_KINDS = {
    "missing": lambda: {},
    "no_columns": lambda: {name: pd.DataFrame() for name in COLUMNS},
    "none": lambda: dict.fromkeys(COLUMNS),
    "no_rows": _no_rows,
    "nothing_drawable": _nothing_drawable,
}


@pytest.mark.parametrize("kind", sorted(EMPTY_KINDS))
def test_nothing_to_draw_gives_message_figure(tmp_path, kind):
    tables = EMPTY_KINDS[kind]()
    for name in FIGURE_NAMES:
        out = tmp_path / f"{name}.png"
        FIGURES[name](tables, out, dpi=DPI)
        assert png_size(out) == MESSAGE_PX, name


def test_message_figure_is_written_over_an_existing_file(tmp_path):
    out = tmp_path / "t.png"
    out.write_bytes(b"stale")
    FIGURES["throughput"]({}, out, dpi=DPI)
    assert png_size(out) == MESSAGE_PX


# ----------------------------------------------------------------------------- content


@pytest.mark.parametrize(
    "interval, ratio_interval",
    [("range of 3 runs", "range of 3 vs 3 runs"), ("95% BCa CI", "95% percentile CI")],
)
def test_interval_wording_comes_from_the_table(interval, ratio_interval):
    tables = make_tables(interval, ratio_interval)
    for module, expected in (
        (throughput_module, interval),
        (speedup_module, ratio_interval),
        (matmul_module, interval),
    ):
        texts, _ = drawn(module, tables)
        assert expected in texts, module.__name__
        if "range" in expected:
            assert "95%" not in texts, f"{module.__name__} claims a CI the table does not"


def test_speedup_bars_carry_verdicts_and_leave_out_the_baseline(tables):
    texts, _ = drawn(speedup_module, tables)
    assert "30x faster" in texts and "6x no clear difference" in texts
    assert "insufficient data" in texts  # the row without a value still says why
    lines = texts.splitlines()
    assert not [t for t in lines if t.startswith("bs ") and t.endswith(" cpu")], "baseline drawn"
    assert "bs 8  mps+cpu-fallback" in lines and "bs 32  cuda" in lines
    assert "image_cnn (vs cpu)" in lines


def test_dots_are_the_raw_values(tables):
    _, points = drawn(throughput_module, tables)
    assert points == int((tables["runs"]["status"] == "ok").sum())
    _, points = drawn(epoch_time_module, tables)
    assert points == int((tables["epochs"]["full_epoch"] == "True").sum())  # full epochs only


def test_matmul_marks_the_published_crossover(tables):
    texts, _ = drawn(matmul_module, tables)
    assert "cuda: n = 128" in texts and "cpu (baseline)" in texts
    assert "not within the measured range" in texts
    assert "bs ≥ 32" not in texts  # the training batch-size row belongs to no matmul panel


def test_device_order_and_palette():
    labels = ["cuda", "mps+cpu-fallback", "cpu-t16", "xpu", "mps", "cpu-t4", "cpu"]
    assert device_order(labels) == [
        "cpu", "cpu-t4", "cpu-t16", "mps", "mps+cpu-fallback", "cuda", "xpu"
    ]  # fmt: skip
    assert device_color("mps+cpu-fallback") == device_color("mps")
    assert device_color("cpu@Intel Xeon") == device_color("cpu")
    assert device_color("cuda") != device_color("mps") != device_color("cpu")
    assert device_color("cpu-t4") != device_color("cpu-t16")


def test_unknown_style_keyword_is_an_error(tables, tmp_path):
    with pytest.raises(TypeError, match="colour"):
        FIGURES["memory"](tables, tmp_path / "m.png", colour="red")


def test_global_matplotlib_state_is_left_alone(tables, tmp_path):
    before = dict(matplotlib.rcParams)
    FIGURES["loss"](tables, tmp_path / "l.png", dpi=DPI)
    assert dict(matplotlib.rcParams) == before
    assert matplotlib.get_backend().lower() == "agg"
    assert plt.get_fignums() == []


# ----------------------------------------------------------------------------- purity

# the statistics layer and the record tables: figures draw published tables only
FORBIDDEN = ("scipy", "statistics", "trainbench.analysis.stats", "trainbench.analysis.aggregate")
# calls that compute a statistic or aggregate values (selection and sorting are fine)
AGGREGATING = {
    "median", "mean", "quantile", "percentile", "nanmedian", "nanmean", "nanpercentile",
    "nanquantile", "std", "var", "bootstrap", "groupby", "agg", "aggregate", "describe",
    "boxplot", "violinplot", "barplot", "pointplot", "lineplot", "catplot", "histplot",
    "kdeplot", "regplot",
}  # fmt: skip


def _modules() -> list[Path]:
    paths = sorted(PACKAGE.glob("*.py"))
    assert {p.name for p in paths} >= {"__init__.py", "style.py"}
    return paths


def _imports(source: str) -> list[str]:
    """Absolute module names imported by a module of trainbench.analysis.figures (relative ones
    resolved; ``from X import y`` gives X and X.y)."""
    package = ["trainbench", "analysis", "figures"]
    names = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            names.append(module)
            names += [f"{module}.{alias.name}" for alias in node.names]
    return names


@pytest.mark.parametrize("path", _modules(), ids=lambda p: p.name)
def test_no_statistics_import(path):
    for name in _imports(path.read_text()):
        for bad in FORBIDDEN:
            assert name != bad and not name.startswith(bad + "."), f"{path.name} imports {name}"
    source = ast.parse(path.read_text())
    relative = [n for n in ast.walk(source) if isinstance(n, ast.ImportFrom) and n.level]
    for node in relative:
        assert node.module not in ("stats", "aggregate"), f"{path.name}: from .{node.module}"


@pytest.mark.parametrize("path", _modules(), ids=lambda p: p.name)
def test_no_statistic_is_computed(path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            assert name not in AGGREGATING, f"{path.name}:{node.lineno} calls {name}()"


def test_import_resolution_catches_relative_imports():
    names = _imports("from ..stats import publish\nfrom .. import aggregate\nfrom . import data\n")
    assert {
        "trainbench.analysis.stats",
        "trainbench.analysis.aggregate",
        "trainbench.analysis.figures.data",
    } <= set(names)


def test_the_across_batch_figure_names_both_settings_and_says_it_is_no_same_batch_verdict(
    tables,
):
    """Each bar names the device's own batch size and the baseline's; the title says it
    compares settings; with no such rows the figure says so."""
    from trainbench.analysis.figures import speedup

    class Across:  # drawn() calls module.build
        build = staticmethod(speedup.build_across)

    texts, _ = drawn(Across, tables)
    assert "cuda bs 32 ÷ cpu bs 16" in texts and "5.6x faster" in texts
    assert "mps bs 64 ÷ cpu bs 16" in texts and "insufficient data" in texts
    assert "not a same-batch verdict" in texts
    empty, _ = drawn(Across, {})
    assert "no device ran batch sizes of its own" in empty
