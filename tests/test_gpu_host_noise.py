"""Where a sweep's run-to-run differences come from (trainbench.bench.gpu_host_noise),
from constructed records: the halves of a cell's window, and the agreement expected of
two runs from pooled repeats."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
from trainbench.bench.gpu_host_noise import agreement_chance, window_halves


def _folder(path: Path, rows: list[dict], steps: dict | None = None) -> Path:
    (path / "tables").mkdir(parents=True)
    pd.DataFrame(rows).to_csv(path / "tables" / "runs.csv", index=False)
    for key, record in (steps or {}).items():
        workload, device, bs, rep = key
        cell = path / "runs" / workload / device / f"bs{bs}" / f"rep{rep}"
        cell.mkdir(parents=True)
        (cell / "metrics.json").write_text(json.dumps(record))
    return path


def _row(device, rep, value, workload="cnn"):
    return {"workload": workload, "device": device, "batch_size": 32, "rep": rep,
            "status": "ok", "samples_per_s": value}  # fmt: skip


def test_window_halves_from_the_steady_start_with_the_extension(tmp_path):
    """Warm-up steps before the steady start are left out; the extension counts: the
    window [0.01] * 10 then [0.011] * 10 differs by 10% between its halves."""
    record = {"result": {
        "steady_state": {"start_step": 3},
        "steps": {"seconds": [[0.5, 0.3, 0.2] + [0.01] * 7, [0.01] * 3],
                  "extension_seconds": [[0.011] * 10]},
    }}  # fmt: skip
    short = {"result": {"steps": {"seconds": [[0.01] * 9]}}}  # 9 steps: no halves
    rows = [_row("cuda", 0, 1.0), _row("cuda", 1, 1.0)]
    records = {("cnn", "cuda", 32, 0): record, ("cnn", "cuda", 32, 1): short}
    folder = _folder(tmp_path, rows, records)
    assert window_halves(folder) == [{"device": "cuda", "cells": 1, "median": 0.1, "p90": 0.1}]


def test_agreement_is_certain_without_noise_and_rare_with_a_wide_side(tmp_path):
    steady = [_row("cpu", r, 10.0) for r in range(3)] + [_row("cuda", r, 100.0) for r in range(3)]
    chance = agreement_chance([_folder(tmp_path / "a", steady)], repeats=(3, 9), draws=500)
    assert chance["chance_by_repeats"] == {"3": 1.0, "9": 1.0}
    assert chance["pooled_pairs"] == {str(tmp_path / "a"): None}  # no start times recorded
    assert chance["comparisons"] == 1 and chance["rounds"] == {"cnn cuda bs 32": 3}
    assert chance["round_cell_seconds"] == {str(tmp_path / "a"): None}  # no wall recorded
    # the cuda side measured 100 or 200 samples/s: medians of 3 often differ by 2x
    wide = [_row("cpu", r, 10.0) for r in range(4)] + [
        _row("cuda", r, v) for r, v in enumerate((100.0, 200.0, 100.0, 200.0))
    ]
    chance = agreement_chance([_folder(tmp_path / "b", wide)], repeats=(3, 9), draws=2000)
    assert chance["chance_by_repeats"]["3"] < 0.7
    assert chance["chance_by_repeats"]["3"] < chance["chance_by_repeats"]["9"] < 1.0
    # the same throughputs, but the host moved both sides of a round alike: each
    # round's ratio is 10, and the runs always agree
    paired = [_row("cpu", r, v / 10) for r, v in enumerate((100.0, 200.0, 100.0, 200.0))] + [
        _row("cuda", r, v) for r, v in enumerate((100.0, 200.0, 100.0, 200.0))
    ]
    chance = agreement_chance([_folder(tmp_path / "c", paired)], repeats=(3,), draws=2000)
    assert chance["chance_by_repeats"] == {"3": 1.0}


def test_a_round_costs_its_cells_wall_seconds_added_up(tmp_path):
    """Round 0's cells took 10 + 20 s, round 1's 12 + 24 s, round 2's 10 + 30 s: the
    median round, 36 s, is what one more repeat adds to a run."""
    walls = {(0, "cpu"): 10.0, (0, "cuda"): 20.0, (1, "cpu"): 12.0, (1, "cuda"): 24.0,
             (2, "cpu"): 10.0, (2, "cuda"): 30.0}  # fmt: skip
    rows = [{**_row(d, r, 10.0 if d == "cpu" else 100.0), "wall_attempt_seconds": w}
            for (r, d), w in walls.items()]  # fmt: skip
    chance = agreement_chance([_folder(tmp_path / "a", rows)], repeats=(3,), draws=10)
    assert chance["round_cell_seconds"] == {str(tmp_path / "a"): 36.0}
