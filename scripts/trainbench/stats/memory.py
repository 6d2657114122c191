"""Memory: the ``memory`` and ``collapse`` tables.

``memory`` — one row per workload × device × batch size over ok runs: n (ok repeats);
memory_initial_bytes, memory_peak_bytes, memory_limit_bytes (medians; NaN where not
measured); peak_fraction_of_limit (median peak / limit; NaN where the limit is
unknown); memory_method (the distinct methods, "; "-joined).

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

from ..tables import bytes_text, compact
from . import frames as fr

COLLAPSE_THRESHOLD = 0.8

MEMORY_COLUMNS = [
    "workload", "device", "batch_size", "n", "memory_initial_bytes", "memory_peak_bytes",
    "memory_limit_bytes", "peak_fraction_of_limit", "memory_method",
]  # fmt: skip
COLLAPSE_COLUMNS = [
    "workload", "device", "batch_size", "smaller_batch_size", "throughput", "smaller_throughput",
    "drop_fraction", "peak_memory_bytes", "memory_limit_bytes", "evidence",
]  # fmt: skip


def memory_table(runs: pd.DataFrame) -> pd.DataFrame:
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
