"""Figures render from hand-made tables to valid, byte-stable PNGs of a known size; empty
tables give the message figure; the matmul crossover picks the start of the final faster run."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from trainbench import figures
from trainbench.figures import (
    FIGURES,
    crossover_n,
    device_color,
    device_order,
    epoch_time_distribution,
    loss_curves,
    matmul_crossover,
    matmul_gflops,
    memory_bars,
    per_label_heatmap,
    speedup_bars,
    speedup_table,
    throughput_vs_batch,
)

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
DPI = 50  # small files keep the tests fast; sizes scale with it
MESSAGE_SIZE = (round(6.4 * DPI), round(2.4 * DPI))

RSS = "host peak RSS of the cell's process (getrusage ru_maxrss; includes Python, torch and data)"
CUDA_MEM = "torch.cuda.max_memory_allocated after reset_peak_memory_stats (tensors only)"
MPS_MEM = "torch.mps.driver_allocated_memory sampled every 50 ms"


# ----------------------------------------------------------------------------- tables


def make_tables() -> dict[str, pd.DataFrame]:
    """Two training workloads (image_cnn: 3 batch sizes, text_multilabel: 2) and matmul, on
    cpu-t1, cpu-t4, mps (with CPU fallback on text_multilabel) and cuda, 3 repeats, plus a
    failed and an unavailable cell."""
    rng = np.random.default_rng(7)
    speed = {"cpu-t1": 1.0, "cpu-t4": 3.0, "mps": 8.0, "cuda": 40.0}
    backend = {"cpu-t1": "cpu", "cpu-t4": "cpu", "mps": "mps", "cuda": "cuda"}
    method = {"cpu-t1": RSS, "cpu-t4": RSS, "mps": MPS_MEM, "cuda": CUDA_MEM}
    threads = {"cpu-t1": 1, "cpu-t4": 4, "mps": 4, "cuda": 4}
    sizes = {"image_cnn": [32, 128, 512], "text_multilabel": [8, 32]}
    runs, epochs, per_label, matmul = [], [], [], []
    for workload, batch_sizes in sizes.items():
        for device, factor in speed.items():
            fallback = device == "mps" and workload == "text_multilabel"
            for bs in batch_sizes:
                for rep in range(3):
                    sps = 100 * factor * bs**0.5 * (1 + 0.05 * rng.standard_normal())
                    runs.append(
                        {
                            "workload": workload,
                            "device": device,
                            "device_label": device + ("+cpu-fallback" if fallback else ""),
                            "backend": backend[device],
                            "batch_size": bs,
                            "rep": rep,
                            "status": "ok",
                            "samples_per_s": sps,
                            "memory_initial_bytes": 300 * 2**20,
                            "memory_peak_bytes": (400 + 3 * bs) * 2**20 * (1 + factor / 10),
                            "memory_method": method[device],
                            "torch_threads": threads[device],
                        }
                    )
                    for epoch in (1, 2, 3):
                        epochs.append(
                            {
                                "workload": workload,
                                "device": device,
                                "batch_size": bs,
                                "rep": rep,
                                "epoch": epoch,
                                "train_loss": 2.0 / epoch + 0.05 * rng.random(),
                                "timed_seconds": 1000 / sps * (1 + 0.1 * rng.random()),
                            }
                        )
                    if workload == "text_multilabel":
                        for k, label in enumerate(["spam", "toxic", "off_topic"]):
                            per_label.append(
                                {
                                    "workload": workload,
                                    "device": device,
                                    "batch_size": bs,
                                    "rep": rep,
                                    "label": label,
                                    "f1": 0.0 if label == "off_topic" else 0.3 + 0.2 * k,
                                    "predicted_positive": 0 if label == "off_topic" else 50,
                                    "support": 100 + k,
                                }
                            )
    runs.append(
        {"workload": "image_cnn", "device": "cuda", "backend": "cuda", "batch_size": 2048,
         "rep": 0, "status": "failed"}
    )  # fmt: skip
    runs.append(
        {"workload": "text_multilabel", "device": "cpu-t16", "backend": "cpu", "batch_size": 8,
         "rep": 0, "status": "unavailable"}
    )  # fmt: skip
    # cpu-t4 baseline; cuda faster from n=256 on; mps faster only at n=32
    times = {
        "cpu-t4": {16: 1.0, 32: 2.0, 64: 4.0, 128: 8.0, 256: 16.0, 512: 32.0},
        "cuda": {16: 5.0, 32: 5.0, 64: 5.0, 128: 9.0, 256: 6.0, 512: 7.0},
        "mps": {16: 3.0, 32: 1.5, 64: 5.0, 128: 9.0, 256: 17.0, 512: 40.0},
    }
    for device, per_n in times.items():
        for rep in range(3):
            for n, t in per_n.items():
                seconds = t * 1e-4 * (1 + 0.01 * rep)
                matmul.append(
                    {
                        "workload": "matmul",
                        "device": device,
                        "device_label": device,
                        "batch_size": 1,
                        "rep": rep,
                        "n": n,
                        "dtype": "float32",
                        "median_s": seconds,
                        "gflops": 2 * n**3 / seconds / 1e9,
                        "torch_threads": threads[device],
                    }
                )
    return {
        "runs": pd.DataFrame(runs),
        "epochs": pd.DataFrame(epochs),
        "per_label": pd.DataFrame(per_label),
        "matmul": pd.DataFrame(matmul),
    }


@pytest.fixture(scope="module")
def tables() -> dict[str, pd.DataFrame]:
    return make_tables()


def png_size(path: Path) -> tuple[int, int]:
    """Width and height from a PNG's IHDR chunk, after checking the signature and its CRC."""
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE, f"{path} is not a PNG"
    length, kind = struct.unpack(">I4s", data[8:16])
    assert kind == b"IHDR" and length == 13
    (crc,) = struct.unpack(">I", data[29:33])
    assert crc == zlib.crc32(data[12:29]), "IHDR CRC mismatch"
    assert data.rstrip(b"\x00").endswith(b"IEND\xaeB`\x82"), "PNG is truncated"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def png_text_chunks(path: Path) -> list[bytes]:
    data, pos, found = path.read_bytes(), 8, []
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos : pos + 8])
        if kind in (b"tEXt", b"iTXt", b"zTXt", b"tIME"):
            found.append(kind + b":" + data[pos + 8 : pos + 8 + length])
        pos += 12 + length
    return found


# family -> (call, expected size in inches for make_tables())
CASES = {
    "throughput": (
        lambda t, out: throughput_vs_batch(t["runs"], out, dpi=DPI),
        (2 * 4.3 + 2.3, 3.8),
    ),
    "speedup": (
        lambda t, out: speedup_bars(t["runs"], out, "cpu-t1", dpi=DPI),
        # image_cnn: 3 devices x 3 sizes; text_multilabel: 3 x 2
        ((0.55 * 9 + 0.35 * 3 + 1.0) + (0.55 * 6 + 0.35 * 2 + 1.0) + 2.3, 3.6 + 0.5),
    ),
    "epoch_time": (
        lambda t, out: epoch_time_distribution(t["epochs"], out, runs=t["runs"], dpi=DPI),
        (0.42 * 3 * 4 + 0.42 * 2 * 4 + 2 * 0.7 + 2.3, 3.5 + 0.5),
    ),
    "loss": (
        lambda t, out: loss_curves(t["epochs"], out, runs=t["runs"], dpi=DPI),
        (3 * 3.5 + 2.3, 2 * 2.9 + 0.5),
    ),
    "per_label": (
        lambda t, out: per_label_heatmap(t["per_label"], out, runs=t["runs"], dpi=DPI),
        # 8 columns (4 devices x 2 sizes), as wide as "+cpu-fallback" (the mps columns' middle
        # line); longest row name "off_topic (n=102)"
        (
            len("off_topic (n=102)") * 0.075 + 0.5 + (0.075 * 13 + 0.25) * 8 + 1.3,
            0.42 * 3 + 1.05 + 0.9,
        ),
    ),
    "matmul": (
        lambda t, out: matmul_gflops(t["matmul"], out, "cpu-t4", dpi=DPI),
        (5.6 + 3.4, 4.2 + 0.5),
    ),
    "memory": (lambda t, out: memory_bars(t["runs"], out, dpi=DPI), None),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_figure_renders_valid_byte_stable_png(tables, tmp_path, name):
    call, inches = CASES[name]
    first, second = tmp_path / "a" / f"{name}.png", tmp_path / "b" / f"{name}.png"
    call(tables, first)
    call(tables, second)
    width, height = png_size(first)
    if inches is not None:
        # the figure size is fixed by what is drawn (panels, bars), never by text extents
        assert abs(width - inches[0] * DPI) < 1 and abs(height - inches[1] * DPI) < 1
    assert (width, height) != MESSAGE_SIZE, "rendered the 'nothing to draw' figure"
    assert width > 200 and height > 100
    assert first.read_bytes() == second.read_bytes(), "same input gave different bytes"
    assert png_text_chunks(first) == [], "PNG carries metadata (software/time)"
    assert sorted(p.name for p in first.parent.iterdir()) == [f"{name}.png"], "temp file left"


def test_registry_adapters_match_direct_calls(tables, tmp_path):
    assert sorted(FIGURES) == sorted(
        ["throughput", "speedup", "epoch_time", "loss", "per_label", "matmul", "memory"]
    )
    FIGURES["speedup"](tables, tmp_path / "via.png", "cpu-t1", dpi=DPI)
    speedup_bars(tables["runs"], tmp_path / "direct.png", "cpu-t1", dpi=DPI)
    assert (tmp_path / "via.png").read_bytes() == (tmp_path / "direct.png").read_bytes()
    FIGURES["matmul"](tables, tmp_path / "m.png", None, dpi=DPI)  # default baseline: a cpu
    assert png_size(tmp_path / "m.png") != MESSAGE_SIZE


EMPTY_RUNS = pd.DataFrame(
    {"workload": ["image_cnn"], "device": ["mps"], "backend": ["mps"], "batch_size": [32],
     "rep": [0], "status": ["unavailable"], "samples_per_s": [np.nan],
     "memory_peak_bytes": [np.nan], "torch_threads": [np.nan]}
)  # fmt: skip


@pytest.mark.parametrize("name", sorted(FIGURES))
@pytest.mark.parametrize("kind", ["no_columns", "no_ok_rows"])
def test_nothing_to_draw_gives_message_figure(tmp_path, name, kind):
    if kind == "no_columns":  # what analysis.read_table gives for an empty CSV
        tables = {key: pd.DataFrame() for key in ("runs", "epochs", "per_label", "matmul")}
    else:
        tables = {
            "runs": EMPTY_RUNS,
            "epochs": pd.DataFrame(columns=["workload", "device", "batch_size", "epoch"]),
            "per_label": pd.DataFrame(columns=["workload", "device", "batch_size", "label", "f1"]),
            "matmul": pd.DataFrame(columns=["device", "n", "median_s", "gflops"]),
        }
    out = tmp_path / f"{name}.png"
    FIGURES[name](tables, out, None, dpi=DPI)
    assert png_size(out) == MESSAGE_SIZE


def test_message_figure_is_written_over_an_existing_file(tmp_path):
    out = tmp_path / "t.png"
    out.write_bytes(b"stale")
    throughput_vs_batch(pd.DataFrame(), out, dpi=DPI)
    assert png_size(out) == MESSAGE_SIZE


# ----------------------------------------------------------------------------- crossover


def test_crossover_is_start_of_final_faster_run():
    n = [16, 32, 64, 128, 256, 512]
    base = [1, 2, 4, 8, 16, 32]
    # faster at 32, slower at 64 and 128, faster from 256 on
    assert crossover_n(n, [3, 1.5, 5, 9, 6, 7], base) == 256
    assert crossover_n(n, [0.5] * 6, base) == 16  # faster everywhere
    assert crossover_n(n, [5, 5, 5, 9, 17, 31], base) == 512  # only at the largest n
    # unsorted input and a missing size are handled
    assert crossover_n([512, 16, 256, 128], [7, 3, 6, np.nan], [32, 1, 16, 8]) == 256


def test_crossover_none_when_never_or_not_finally_faster():
    n = [16, 32, 64]
    assert crossover_n(n, [2, 3, 5], [1, 2, 4]) is None  # never faster
    assert crossover_n(n, [0.5, 1, 5], [1, 2, 4]) is None  # faster, then slower at the end
    assert crossover_n(n, [1, 2, 4], [1, 2, 4]) is None  # equal is not faster
    assert crossover_n([], [], []) is None


def test_matmul_crossover_from_table(tables):
    assert matmul_crossover(tables["matmul"], "cuda", "cpu-t4") == 256
    assert matmul_crossover(tables["matmul"], "mps", "cpu-t4") is None
    faster_mps = tables["matmul"].copy()
    faster_mps.loc[(faster_mps["device"] == "mps") & (faster_mps["n"] == 512), "median_s"] = 1e-4
    assert matmul_crossover(faster_mps, "mps", "cpu-t4") == 512


# ----------------------------------------------------------------------------- pieces


def test_speedup_table_ratio_of_medians_and_ci(tables):
    table = speedup_table(tables["runs"], "cpu-t1")
    runs = tables["runs"][tables["runs"]["status"] == "ok"]
    row = table[(table["workload"] == "image_cnn") & (table["batch_size"] == 128)]
    row = row[row["device"] == "cuda"].iloc[0]
    pick = runs[(runs["workload"] == "image_cnn") & (runs["batch_size"] == 128)]
    expected = (
        pick.loc[pick["device"] == "cuda", "samples_per_s"].median()
        / pick.loc[pick["device"] == "cpu-t1", "samples_per_s"].median()
    )
    assert row["speedup"] == pytest.approx(expected)
    assert row["ci_low"] <= row["speedup"] <= row["ci_high"]
    assert 30 < row["speedup"] < 50
    fallback = table[(table["workload"] == "text_multilabel") & (table["device"] == "mps")]
    assert set(fallback["dev_label"]) == {"mps+cpu-fallback"}
    assert "cpu-t1" not in set(table["device"])


def test_device_order_and_palette():
    labels = ["cuda", "mps+cpu-fallback", "cpu-t16", "xpu", "mps", "cpu-t4", "cpu"]
    assert device_order(labels) == [
        "cpu", "cpu-t4", "cpu-t16", "mps", "mps+cpu-fallback", "cuda", "xpu"
    ]  # fmt: skip
    assert device_color("mps+cpu-fallback") == device_color("mps")
    assert device_color("cuda") != device_color("mps") != device_color("cpu")
    assert device_color("cpu-t4") != device_color("cpu-t16")


def test_unknown_style_keyword_is_an_error(tables, tmp_path):
    with pytest.raises(TypeError, match="colour"):
        memory_bars(tables["runs"], tmp_path / "m.png", colour="red")


def test_global_matplotlib_state_is_left_alone(tables, tmp_path):
    import matplotlib

    before = dict(matplotlib.rcParams)
    loss_curves(tables["epochs"], tmp_path / "l.png", dpi=DPI)
    assert dict(matplotlib.rcParams) == before
    assert matplotlib.get_backend().lower() == "agg"
    assert figures.plt.get_fignums() == []
