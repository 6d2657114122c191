"""Where a GPU-host sweep's run-to-run differences come from, from the records alone.

* :func:`window_halves`: how far the two halves of a cell's own training window differ
  (its steps from the steady state's start, extension included, split in two; highest
  ÷ lowest throughput − 1). Set beside the spread of a cell's repeats
  (:func:`trainbench.bench.gpu_host.repeat_spread`), it says whether a cell's number
  moves within its window (a longer window would steady it) or between cells (only
  more repeats would).
* :func:`pairs`: how far apart in time a round's two sides were measured, and how
  alike the host's changes reached them.
* :func:`agreement_chance`: the chance that two runs of n repeats each agree — every
  speedup median within ``tolerance`` of the other run's — were a run's rounds drawn
  from what the pooled runs measured (Kalibera & Jones's question "how many repeats
  for this precision", asked of the agreement criterion). A round's two sides are
  drawn together (the baseline's and the device's records of one run and repeat), as a
  run measures them one after another (trainbench.config.RunOrder): what the host does
  to both sides of a round stays paired, as in the runs.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

HALVES_MIN_STEPS = 10  # fewer window steps: no halves


def _window_steps(record: dict) -> list[float]:
    result = record.get("result") or {}
    steps = result.get("steps") or {}
    epochs = [s for e in steps.get("seconds") or [] for s in (e if isinstance(e, list) else [e])]
    extension = [s for region in steps.get("extension_seconds") or [] for s in region]
    start = (result.get("steady_state") or {}).get("start_step") or 0
    return (epochs + extension)[int(start) :]


def window_halves(results: Path) -> list[dict]:
    """Per device: the median and 90th percentile over ok cells of how far the two
    halves of the cell's window differ (highest ÷ lowest throughput − 1)."""
    runs = pd.read_csv(results / "tables" / "runs.csv")
    ok = runs[runs["status"] == "ok"]
    gaps: dict[str, list[float]] = {}
    for r in ok.itertuples():
        path = results / "runs" / r.workload / r.device / f"bs{r.batch_size}" / f"rep{r.rep}"
        window = _window_steps(json.loads((path / "metrics.json").read_text()))
        half = len(window) // 2
        if half * 2 < HALVES_MIN_STEPS:
            continue
        first, second = sum(window[:half]), sum(window[half : 2 * half])
        if first > 0 and second > 0:
            gaps.setdefault(r.device, []).append(max(first, second) / min(first, second) - 1)
    return [
        {
            "device": device,
            "cells": len(values),
            "median": round(float(np.median(values)), 4),
            "p90": round(float(np.percentile(values, 90)), 4),
        }
        for device, values in sorted(gaps.items())
    ]


def pairs(results: Path) -> dict | None:
    """A comparison's two sides in one round: the cells of one workload, batch size and
    repeat on the baseline's backend (cpu) and on cuda, both ok. The median seconds
    between their starts, and the correlation of their deviations (log throughput less
    the cell's mean over its repeats): near 1 when the host's changes reach both sides
    alike (a ratio then cancels them), near 0 when they do not. None without a pair."""
    runs = pd.read_csv(results / "tables" / "runs.csv")
    if "started_unix" not in runs:
        return None
    ok = runs[(runs["status"] == "ok") & runs["backend"].isin(["cpu", "cuda"])].copy()
    ok["log"] = np.log(ok["samples_per_s"])
    ok["deviation"] = ok["log"] - ok.groupby(["workload", "device", "batch_size"])["log"].transform(
        "mean"
    )
    wide = ok.pivot_table(
        index=["workload", "batch_size", "rep"],
        columns="backend",
        values=["deviation", "started_unix"],
    ).dropna()
    if len(wide) < 3:
        return None
    gap = (wide["started_unix"]["cuda"] - wide["started_unix"]["cpu"]).abs()
    corr = float(np.corrcoef(wide["deviation"]["cpu"], wide["deviation"]["cuda"])[0, 1])
    return {
        "pairs": len(wide),
        "median_gap_seconds": round(float(gap.median()), 1),
        "deviation_correlation": round(corr, 2),
    }


def _pooled_rounds(folders: Sequence[Path], baseline: str) -> dict[tuple, np.ndarray]:
    """{(workload, batch_size, device): rows of (baseline's throughput, device's)}, one
    row per run and repeat where both sides are ok, over the folders."""
    columns = ["workload", "batch_size", "device", "rep", "status", "samples_per_s"]
    tables = [
        pd.read_csv(f / "tables" / "runs.csv")[columns].assign(folder=i)
        for i, f in enumerate(folders)
    ]
    runs = pd.concat(tables)
    ok = runs[(runs["status"] == "ok") & runs["samples_per_s"].notna()]
    keys = ["folder", "workload", "batch_size", "rep"]
    base = ok[ok["device"] == baseline].set_index(keys)["samples_per_s"].rename("base")
    rounds = {}
    for (workload, batch_size, device), g in ok[ok["device"] != baseline].groupby(
        ["workload", "batch_size", "device"]
    ):
        both = g.set_index(keys)[["samples_per_s"]].join(base, how="inner").dropna()
        if len(both):
            rounds[(workload, int(batch_size), device)] = both[["base", "samples_per_s"]].to_numpy()
    return rounds


def _round_cell_seconds(results: Path) -> float | None:
    """The median over rounds of repeats of a round's cells' wall seconds added up
    (``wall_attempt_seconds``: a cell's final attempt, its process from start to exit; a
    failed attempt before it is not counted): what one more repeat adds to a run, its
    references and aggregation left out. None where no record has it."""
    runs = pd.read_csv(results / "tables" / "runs.csv")
    if "wall_attempt_seconds" not in runs or runs["wall_attempt_seconds"].isna().all():
        return None
    return round(float(runs.groupby("rep")["wall_attempt_seconds"].sum().median()), 1)


def agreement_chance(
    folders: Sequence[Path],
    tolerance: float = 0.15,
    repeats: Sequence[int] = (3, 5, 7, 9, 15, 21, 31),
    draws: int = 4000,
    baseline: str = "cpu",
    seed: int = 0,
) -> dict:
    """For each n of ``repeats``: the share of ``draws`` in which two runs of n rounds,
    drawn with replacement from the pooled rounds of ``folders``, give every
    comparison's speedup median (device's median ÷ baseline's median) within
    ``tolerance`` of the other run's (max ÷ min − 1)."""
    rounds = _pooled_rounds(folders, baseline)
    rng = np.random.default_rng(seed)

    def speedups(sides: np.ndarray, n: int) -> np.ndarray:
        """``draws`` speedup medians of a run of n rounds (rows: baseline, device)."""
        picked = sides[rng.integers(0, len(sides), (draws, n))]
        return np.median(picked[..., 1], axis=1) / np.median(picked[..., 0], axis=1)

    chance = {}
    for n in repeats:
        agree = np.ones(draws, dtype=bool)
        for sides in rounds.values():
            a, b = speedups(sides, n), speedups(sides, n)
            agree &= np.maximum(a, b) / np.minimum(a, b) - 1 <= tolerance
        chance[str(n)] = round(float(agree.mean()), 3)
    return {
        "tolerance": tolerance,
        "draws": draws,
        "pooled_from": [str(f) for f in folders],
        "comparisons": len(rounds),
        "rounds": {f"{w} {d} bs {bs}": len(r) for (w, bs, d), r in rounds.items()},
        "chance_by_repeats": chance,
        # what a round of repeats costs, to set the chance beside a run's length
        "round_cell_seconds": {str(f): _round_cell_seconds(f) for f in folders},
        # each pooled run's pairing in time (as :func:`pairs` reports a run's)
        "pooled_pairs": {str(f): pairs(f) for f in folders},
    }
