"""Reading, writing and formatting tables: the one place numbers become text.

Computes nothing: the statistics layer (:mod:`trainbench.analysis.stats`) computes every
published number; figures and reports read the tables written here and format
them with these functions.
"""

from __future__ import annotations

import math
import os

import numpy as np
import pandas as pd
from trainbench.common.records import atomic_write_text

MISSING = "—"


def read_table(path: str | os.PathLike) -> pd.DataFrame:
    """A table written by :func:`write_table` or the aggregate rule; an empty table
    has no columns in CSV."""
    try:
        return pd.read_csv(path)
    except pd.errors.EmptyDataError:
        return pd.DataFrame()


def is_missing(value) -> bool:
    if value is None or value is pd.NA:
        return True
    try:
        return bool(isinstance(value, (float, np.floating)) and math.isnan(value))
    except TypeError:
        return False


def sig(x, digits: int = 3) -> str:
    """A number with ``digits`` significant digits, without exponent for 1e-4 <= |x| < 1e15."""
    if is_missing(x):
        return MISSING
    x = float(x)
    if math.isinf(x):
        return "∞" if x > 0 else "−∞"
    if x == 0:
        return "0"
    magnitude = math.floor(math.log10(abs(x)))
    if magnitude < -4 or magnitude >= 15:
        return f"{x:.{digits - 1}e}"
    rounded = round(x, digits - 1 - magnitude)
    # rounding can carry into the next power of ten (999.6 -> 1000)
    magnitude = math.floor(math.log10(abs(rounded))) if rounded else magnitude
    decimals = max(0, digits - 1 - magnitude)
    return f"{rounded:.{decimals}f}"


def compact(x, digits: int = 3) -> str:
    """A number for prose: ``digits`` significant digits, no trailing zeros
    ("2", "0.01", "0.912")."""
    text = sig(x, digits)
    if "." in text and "e" not in text:
        text = text.rstrip("0").rstrip(".")
    return text


def bytes_text(x) -> str:
    """Bytes as MiB below 1 GiB, GiB from there on."""
    if is_missing(x):
        return MISSING
    x = float(x)
    if abs(x) >= 1024**3:
        return f"{sig(x / 1024**3)} GiB"
    return f"{sig(x / 1024**2)} MiB"


def ratio_text(x, digits: int = 3) -> str:
    """A speedup or other ratio: "2.95x"."""
    return MISSING if is_missing(x) else f"{compact(x, digits)}x"


def interval_text(low, high, fmt=compact) -> str:
    """ "low–high", or "—" where either end is missing."""
    if is_missing(low) or is_missing(high):
        return MISSING
    return f"{fmt(low)}–{fmt(high)}"


def is_bytes_column(name) -> bool:
    name = str(name)
    return name == "bytes" or name.endswith("_bytes")


# Columns that count things, shown exactly (never at 3 significant digits): a table
# column is one when its name is listed here or ends with one of COUNT_SUFFIXES.
COUNT_COLUMNS = frozenset({
    "batch_size", "samples", "steps", "repeats", "reached", "cells", "candidates", "epochs",
    "epoch", "best_epoch", "point", "rep", "n", "baseline_n", "records", "ok", "failed",
    "unavailable", "runs", "pairs", "support", "threads", "torch_threads", "parameters",
    "gradient_accumulation", "max_length", "logical_cores", "compared_at", "points_compared",
    "min_repeats", "max_repeats", "repeats_min", "repeats_max", "samples_median",
    "steps_median", "without_breakdown", "predicted_positive", "run_seed",
    "steady_start_step", "attempts", "samples_resolution", "baseline_samples_min",
    "baseline_samples_max",
})  # fmt: skip
COUNT_SUFFIXES = (
    "_batch_size", "_runs", "_cells", "_attempts", "_repeats", "_steps", "_samples", "_epochs",
)  # fmt: skip


def is_count_column(name) -> bool:
    """Whether a table column counts things (:data:`COUNT_COLUMNS`): shown exactly."""
    name = str(name)
    return name in COUNT_COLUMNS or name.endswith(COUNT_SUFFIXES)


def count_text(x) -> str:
    """A count exactly: whole numbers without a decimal point ("1024", "8192", also when
    a CSV round trip made them floats), a median between two counts to 2 decimals
    ("6144.5"), text that is no number as it is ("32; 64")."""
    if is_missing(x):
        return MISSING
    try:
        x = float(x)  # also a number kept as text ("2.0")
    except (TypeError, ValueError):
        return str(x)
    if math.isnan(x):
        return MISSING
    if math.isinf(x):
        return "∞" if x > 0 else "−∞"
    if x.is_integer():
        return str(int(x))
    return f"{round(x, 2):f}".rstrip("0").rstrip(".")


def cell_text(value, is_bytes: bool = False, is_count: bool = False) -> str:
    """One table cell: counts exactly (:func:`count_text`), other floats with 3
    significant digits, ``*_bytes`` in MiB/GiB, booleans as yes/no, missing values as
    "—", pipes escaped."""
    if is_missing(value):
        return MISSING
    if isinstance(value, (bool, np.bool_)):
        return "yes" if value else "no"
    if is_count:
        return count_text(value).replace("|", "\\|").replace("\n", " ")
    if isinstance(value, (int, np.integer)):
        return bytes_text(value) if is_bytes else str(int(value))
    if isinstance(value, (float, np.floating)):
        return bytes_text(value) if is_bytes else sig(value)
    text = str(value)
    return text.replace("|", "\\|").replace("\n", " ") if text else ""


def to_markdown(frame: pd.DataFrame | None) -> str:
    """A Markdown (pipe) table for reading: see :func:`cell_text` (count columns by
    :func:`is_count_column`). The numbers in the CSV stay unrounded."""
    if frame is None or frame.columns.empty:
        return "_(no rows)_"
    text = pd.DataFrame(
        {
            column: [
                cell_text(v, is_bytes_column(column), is_count_column(column))
                for v in frame[column].tolist()
            ]
            for column in frame.columns
        },
        columns=frame.columns,
    )
    if text.empty:
        header = "| " + " | ".join(map(str, frame.columns)) + " |"
        return header + "\n|" + "|".join("---" for _ in frame.columns) + "|"
    return text.to_markdown(index=False, disable_numparse=True)


def write_table(
    frame: pd.DataFrame, csv_path: str | os.PathLike, md_path: str | os.PathLike | None = None
) -> None:
    """Write ``frame`` as CSV (full precision) and, when ``md_path`` is given, as
    Markdown (:func:`to_markdown`), each atomically."""
    atomic_write_text(csv_path, frame.to_csv(index=False))
    if md_path is not None:
        atomic_write_text(md_path, to_markdown(frame) + "\n")
