"""Reading the tables a figure renders: selecting rows and columns, never computing.

Tables come as read from CSV (``trainbench.analysis.tables.read_table``): booleans may be bools
or the strings "True"/"False", integers may be floats, a table may be missing, empty,
or have no columns at all. These helpers make that uniform.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np
import pandas as pd
from trainbench.analysis.figures.style import FALLBACK_SUFFIX

_TRUE = {"true", "1", "1.0", "yes", "y", "t"}


def table(tables: Mapping[str, pd.DataFrame | None], name: str) -> pd.DataFrame:
    """``tables[name]`` as a fresh frame; an empty one when missing or None."""
    frame = tables.get(name) if tables is not None else None
    return pd.DataFrame() if frame is None else pd.DataFrame(frame).copy()


def has(frame: pd.DataFrame | None, *columns: str) -> bool:
    return frame is not None and not frame.empty and all(c in frame.columns for c in columns)


def numeric(frame: pd.DataFrame, *columns: str) -> pd.DataFrame:
    """Those columns as floats (NaN where missing or not a number); absent ones added as NaN."""
    frame = frame.copy()
    for column in columns:
        if column in frame:
            frame[column] = pd.to_numeric(frame[column], errors="coerce").astype(float)
        else:
            frame[column] = np.nan
    return frame


def truthy(values: Iterable) -> np.ndarray:
    """Booleans from bools, numbers or strings ("True", "false", "1"); missing is False."""
    out = []
    for value in values:
        if isinstance(value, (bool, np.bool_)):
            out.append(bool(value))
        elif isinstance(value, str):
            out.append(value.strip().lower() in _TRUE)
        elif value is None or value is pd.NA:
            out.append(False)
        else:
            try:
                out.append(bool(np.isfinite(float(value)) and float(value) != 0))
            except (TypeError, ValueError):
                out.append(False)
    return np.asarray(out, dtype=bool)


def strings(frame: pd.DataFrame, column: str, default: str = "") -> pd.Series:
    """A column as text, missing values as ``default``; the whole column when absent."""
    if column not in frame:
        return pd.Series([default] * len(frame), index=frame.index, dtype=object)
    return frame[column].astype(object).where(frame[column].notna(), default).astype(str)


def sorted_str(values: Iterable) -> list[str]:
    return sorted({str(v) for v in values})


def ok_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """The ok records (every record when there is no status column)."""
    if "status" not in runs:
        return runs
    return runs[strings(runs, "status") == "ok"]


def fallback_pairs(tables: Mapping[str, pd.DataFrame | None]) -> set[tuple[str, str]]:
    """(workload, device) pairs that ran with CPU fallback ops: the verification table's
    failed fallback check, or a record whose device label carries ``+cpu-fallback``."""
    pairs: set[tuple[str, str]] = set()
    runs = table(tables, "runs")
    if has(runs, "workload", "device", "device_label"):
        hit = runs[strings(runs, "device_label").str.endswith(FALLBACK_SUFFIX)]
        pairs |= {(str(w), str(d)) for w, d in zip(hit["workload"], hit["device"], strict=True)}
    checks = table(tables, "verification")
    if has(checks, "workload", "device", "fallback_pass"):
        known = checks[checks["fallback_pass"].notna()]
        failed = known[~truthy(known["fallback_pass"])]
        pairs |= {
            (str(w), str(d)) for w, d in zip(failed["workload"], failed["device"], strict=True)
        }
    return pairs


def device_labels(frame: pd.DataFrame, fallback: set[tuple[str, str]]) -> list[str]:
    """The device id per row, with ``+cpu-fallback`` where that workload's device fell back."""
    workloads = strings(frame, "workload")
    return [
        f"{d}{FALLBACK_SUFFIX}" if (w, str(d)) in fallback else str(d)
        for w, d in zip(workloads, frame["device"], strict=True)
    ]
