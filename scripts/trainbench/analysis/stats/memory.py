"""Memory: the ``memory`` and ``collapse`` tables.

``memory`` — one row per workload × device × batch size over ok runs: n (ok repeats);
memory_initial_bytes, memory_peak_bytes, memory_limit_bytes (medians; NaN where not
measured); peak_fraction_of_limit (median peak / limit; NaN where the limit is
unknown); memory_method (the distinct methods, "; "-joined). Growth over the epochs,
from each run's per-epoch snapshot after evaluation: growth_measure (what is compared:
the backend's reserved/driver memory where it has one — CUDA memory_reserved, MPS
driver_allocated_memory, which catches the leaks current_allocated_memory misses
(pytorch 164299, 181213) — else the process RSS), growth_bytes_per_epoch (median over
repeats of (last − first) / (epochs − 1)), growth (True when that exceeds
max(GROWTH_MIN_BYTES, GROWTH_FRACTION of the first epoch's value) and the figure never
fell from one epoch to the next in the median repeat: memory that keeps growing
epoch over epoch, a leak until shown otherwise), growth_detail (in words).

``collapse`` — cells whose throughput collapsed near the memory limit, what MPS does
when it pages to swap instead of raising OOM. Per workload × device × batch size
(median over ok repeats), flagged when the throughput is lower than at the next
smaller measured batch size AND the median peak memory is ≥ 80% of
memory_limit_bytes (a dip alone is noise, high memory alone is a big batch): batch_size,
smaller_batch_size, throughput, smaller_throughput, drop_fraction (1 − throughput /
smaller_throughput), peak_memory_bytes, memory_limit_bytes, evidence (in words).
"""

from __future__ import annotations

import pandas as pd
from trainbench.analysis.stats import frames as fr
from trainbench.analysis.tables import bytes_text, compact

COLLAPSE_THRESHOLD = 0.8
GROWTH_MIN_BYTES = 16 * 1024**2  # 16 MiB per epoch: below it, allocator noise
GROWTH_FRACTION = 0.02  # 2% of the first epoch's footprint per epoch

MEMORY_COLUMNS = [
    "workload", "device", "batch_size", "n", "memory_initial_bytes", "memory_peak_bytes",
    "memory_limit_bytes", "peak_fraction_of_limit", "memory_method", "growth_measure",
    "growth_bytes_per_epoch", "growth", "growth_detail",
]  # fmt: skip
COLLAPSE_COLUMNS = [
    "workload", "device", "batch_size", "smaller_batch_size", "throughput", "smaller_throughput",
    "drop_fraction", "peak_memory_bytes", "memory_limit_bytes", "evidence",
]  # fmt: skip


def _growth_of_run(group: pd.DataFrame) -> tuple[str, float, bool] | None:
    """(measure, bytes per epoch, never fell) of one run's per-epoch snapshots."""
    group = group.sort_values("epoch")
    for column, measure in (
        ("memory_reserved_bytes", "reserved (allocator cache / driver)"),
        ("memory_process_rss_bytes", "process RSS"),
    ):
        values = fr.num(group, column).dropna().to_numpy(float)
        if len(values) >= 2:
            steps = values[1:] - values[:-1]
            return (
                measure,
                float((values[-1] - values[0]) / (len(values) - 1)),
                bool((steps >= 0).all()) if values[0] >= 0 else False,
            )
    return None


def growth_table(epochs: pd.DataFrame | None) -> pd.DataFrame:
    """Per workload × device × batch size: the memory growth columns of ``memory``."""
    columns = [*fr.KEYS, "growth_measure", "growth_bytes_per_epoch", "growth", "growth_detail"]
    if epochs is None or epochs.empty or "epoch" not in epochs.columns:
        return fr.empty(columns)
    data = fr.prepare(epochs)
    rows = []
    for key, cell in data.groupby(fr.KEYS, sort=True):
        found = [g for _, g in cell.groupby("rep")]
        runs = [r for r in (_growth_of_run(g) for g in found) if r is not None]
        if not runs:
            continue
        measure = runs[0][0]
        per_epoch = float(pd.Series([r[1] for r in runs]).median())
        monotone = sum(r[2] for r in runs) * 2 > len(runs)
        first = fr.num(cell[cell["epoch"] == cell["epoch"].min()], _measure_column(measure))
        floor = max(GROWTH_MIN_BYTES, GROWTH_FRACTION * float(first.median()))
        grows = bool(monotone and per_epoch > floor)
        detail = (
            f"{measure} grew {bytes_text(per_epoch)} per epoch (median of {len(runs)} runs), "
            + ("every epoch" if monotone else "not steadily")
            + f"; threshold {bytes_text(floor)} per epoch"
        )
        rows.append(dict(zip(columns, [*key, measure, per_epoch, grows, detail], strict=True)))
    return fr.frame(rows, columns)


def _measure_column(measure: str) -> str:
    return "memory_process_rss_bytes" if measure == "process RSS" else "memory_reserved_bytes"


def memory_table(runs: pd.DataFrame, epochs: pd.DataFrame | None = None) -> pd.DataFrame:
    """The ``memory`` table; see the module docstring."""
    ok = fr.ok_rows(fr.prepare_runs(runs))
    if ok.empty:
        return fr.empty(MEMORY_COLUMNS)
    ok = ok.assign(
        memory_initial_bytes=fr.num(ok, "memory_initial_bytes"),
        memory_peak_bytes=fr.num(ok, "memory_peak_bytes"),
        memory_limit_bytes=fr.num(ok, "memory_limit_bytes"),
        memory_method=fr.text(ok, "memory_method"),
    )
    table = (
        ok.groupby(fr.KEYS, sort=True)
        .agg(
            n=("status", "size"),
            memory_initial_bytes=("memory_initial_bytes", "median"),
            memory_peak_bytes=("memory_peak_bytes", "median"),
            memory_limit_bytes=("memory_limit_bytes", "median"),
            memory_method=("memory_method", lambda s: fr.distinct_text(s) or None),
        )
        .reset_index()
    )
    limit = table["memory_limit_bytes"].where(table["memory_limit_bytes"] > 0)
    table["peak_fraction_of_limit"] = table["memory_peak_bytes"] / limit
    growth = growth_table(epochs)
    table = table.merge(growth, on=fr.KEYS, how="left") if not growth.empty else table
    for column in ("growth_measure", "growth_bytes_per_epoch", "growth", "growth_detail"):
        if column not in table.columns:
            table[column] = pd.NA
    return table[MEMORY_COLUMNS]


def _evidence(prev, cur, drop: float, threshold: float) -> str:
    peak, limit = cur["_peak"], cur["_limit"]
    return (
        f"throughput fell {compact(100 * drop)}% from {compact(prev['_v'])} samples/s at "
        f"batch size {int(prev['batch_size'])} to {compact(cur['_v'])} samples/s at "
        f"batch size {int(cur['batch_size'])} while peak memory {bytes_text(peak)} was "
        f"{compact(100 * peak / limit)}% of the {bytes_text(limit)} limit "
        f"(threshold {compact(100 * threshold)}%)"
    )


def collapse_table(runs: pd.DataFrame, threshold: float = COLLAPSE_THRESHOLD) -> pd.DataFrame:
    """The ``collapse`` table; see the module docstring. Empty where the limit is unknown."""
    ok = fr.ok_rows(fr.prepare_runs(runs))
    ok = ok.assign(
        _v=fr.num(ok, "samples_per_s"),
        _peak=fr.num(ok, "memory_peak_bytes"),
        _limit=fr.num(ok, "memory_limit_bytes"),
    )
    ok = ok[ok["_v"].notna()]
    if ok.empty:
        return fr.empty(COLLAPSE_COLUMNS)
    med = ok.groupby(fr.KEYS, sort=True)[["_v", "_peak", "_limit"]].median().reset_index()
    prev = med.groupby(["workload", "device"], sort=False).shift(1)
    flagged = (
        prev["_v"].notna()
        & (med["_limit"] > 0)
        & (med["_v"] < prev["_v"])
        & (med["_peak"] >= threshold * med["_limit"])
    )
    rows = []
    for i in med.index[flagged.to_numpy()]:
        cur, before = med.loc[i], prev.loc[i]
        drop = 1.0 - cur["_v"] / before["_v"]
        rows.append(
            {
                "workload": cur["workload"],
                "device": cur["device"],
                "batch_size": int(cur["batch_size"]),
                "smaller_batch_size": int(before["batch_size"]),
                "throughput": float(cur["_v"]),
                "smaller_throughput": float(before["_v"]),
                "drop_fraction": float(drop),
                "peak_memory_bytes": float(cur["_peak"]),
                "memory_limit_bytes": float(cur["_limit"]),
                "evidence": _evidence(before, cur, drop, threshold),
            }  # fmt: skip
        )
    return fr.frame(rows, COLLAPSE_COLUMNS)
