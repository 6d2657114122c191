"""Where a GPU-host sweep's run-to-run differences come from, from the records alone.

* :func:`window_halves`: how far the two halves of a cell's own training window differ
  (its steps from the steady state's start, extension included, split in two; highest
  ÷ lowest throughput − 1). Set beside the spread of a cell's repeats
  (:func:`trainbench.bench.gpu_host.repeat_spread`), it says whether a cell's number
  moves within its window (a longer window would steady it) or between cells (only
  more repeats would).
* :func:`agreement_chance`: the chance that two runs of n repeats each agree — every
  speedup median within ``tolerance`` of the other run's — were a cell's repeats drawn
  from what the pooled runs measured (bootstrap draws of
  each side, independent; Kalibera & Jones's question "how many repeats for this
  precision", asked of the agreement criterion). The sides are drawn independently,
  so any correlation of a comparison's two sides (trainbench.bench.gpu_host.pairs) is
  left out: conservative where it is positive.
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


def _pooled_sides(folders: Sequence[Path], baseline: str) -> dict[tuple, tuple]:
    """{(workload, batch_size, device): (baseline's throughputs, device's)} over every
    ok record of the folders."""
    runs = pd.concat([pd.read_csv(f / "tables" / "runs.csv") for f in folders])
    ok = runs[(runs["status"] == "ok") & runs["samples_per_s"].notna()]
    values = ok.groupby(["workload", "batch_size", "device"])["samples_per_s"].apply(np.asarray)
    sides = {}
    for (workload, batch_size, device), v in values.items():
        base = values.get((workload, batch_size, baseline))
        if device != baseline and base is not None:
            sides[(workload, int(batch_size), device)] = (base, v)
    return sides


def agreement_chance(
    folders: Sequence[Path],
    tolerance: float = 0.15,
    repeats: Sequence[int] = (3, 5, 7, 9),
    draws: int = 4000,
    baseline: str = "cpu",
    seed: int = 0,
) -> dict:
    """For each n of ``repeats``: the share of ``draws`` in which two runs of n repeats
    a side, drawn with replacement from the pooled ok records of ``folders``, give
    every comparison's speedup median (median ÷ baseline median) within ``tolerance``
    of the other run's (max ÷ min − 1)."""
    sides = _pooled_sides(folders, baseline)
    rng = np.random.default_rng(seed)

    def speedups(base: np.ndarray, device: np.ndarray, n: int) -> np.ndarray:
        """``draws`` speedup medians of a run of n repeats a side."""
        medians = np.median(rng.choice(device, (draws, n)), axis=1)
        return medians / np.median(rng.choice(base, (draws, n)), axis=1)

    chance = {}
    for n in repeats:
        agree = np.ones(draws, dtype=bool)
        for base, device in sides.values():
            a, b = speedups(base, device, n), speedups(base, device, n)
            agree &= np.maximum(a, b) / np.minimum(a, b) - 1 <= tolerance
        chance[str(n)] = round(float(agree.mean()), 3)
    pooled = {f"{w} {d} bs {bs}": [len(b), len(v)] for (w, bs, d), (b, v) in sides.items()}
    return {
        "tolerance": tolerance,
        "draws": draws,
        "pooled_from": [str(f) for f in folders],
        "comparisons": len(sides),
        "records_per_side": pooled,
        "chance_by_repeats": chance,
    }
