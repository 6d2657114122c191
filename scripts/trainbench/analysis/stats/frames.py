"""Shared plumbing of the statistics layer: columns read robustly after a CSV round
trip (bools as text, ints as floats, absent columns), groups as index arrays, the
baseline choice, the workload kinds and a few phrases used in several tables."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import pandas as pd
from trainbench.analysis.tables import compact
from trainbench.config.device_ids import column_of

KEYS = ["workload", "device", "batch_size"]
MICROBENCHMARKS = frozenset({"matmul"})
TRUE_TEXT = frozenset({"true", "1", "1.0", "yes"})
BOOL_COLUMNS = (
    "disturbed", "short_window", "eval_short_window", "all_on_device", "autocast_requested",
    "autocast_active", "full_epoch", "eval_cold", "noisy", "higher_is_better",
)  # fmt: skip
NO_STEADY_STATE = "no steady state"
Baselines = Mapping[str, "str | None"] | str | None


def empty(columns: Sequence[str]) -> pd.DataFrame:
    return pd.DataFrame(columns=list(columns))


def frame(rows: list[dict], columns: Sequence[str]) -> pd.DataFrame:
    """A table with exactly ``columns`` in this order (empty rows -> empty table)."""
    return pd.DataFrame(rows, columns=list(columns)) if rows else empty(columns)


def num(data: pd.DataFrame, column: str) -> pd.Series:
    """A column as floats; absent -> all NaN; non-numeric text -> NaN."""
    if column not in data.columns:
        return pd.Series(np.nan, index=data.index, dtype=float)
    return pd.to_numeric(data[column], errors="coerce").astype(float)


def flag(data: pd.DataFrame, column: str) -> pd.Series:
    """A column as bools: True, "True", "true", 1, "1.0" are true; anything else
    (False, NaN, absent) is false."""
    if column not in data.columns:
        return pd.Series(False, index=data.index, dtype=bool)
    col = data[column]
    if col.dtype == bool:
        return col
    return col.astype(str).str.strip().str.lower().isin(TRUE_TEXT)


def text(data: pd.DataFrame, column: str) -> pd.Series:
    """A column as text, "" where missing."""
    if column not in data.columns:
        return pd.Series("", index=data.index, dtype=object)
    col = data[column]
    return col.where(col.notna(), "").astype(str).where(col.notna(), "")


def _integral(series: pd.Series) -> pd.Series:
    values = pd.to_numeric(series, errors="coerce")
    finite = values.dropna()
    if len(finite) == len(values) and (finite == finite.round()).all():
        return values.astype("int64")
    return values


def prepare(
    data: pd.DataFrame | None, keys: Iterable[str] = ("workload", "device")
) -> pd.DataFrame:
    """A normalized copy: key columns present, workload/device/status as text,
    batch_size/rep/n/epoch as ints where they are whole, the known bool columns as bools."""
    data = pd.DataFrame() if data is None else data.copy()
    for column in keys:
        if column not in data.columns:
            data[column] = pd.Series(dtype=object)
        data[column] = text(data, column)
    if "status" in data.columns:
        data["status"] = text(data, "status").str.strip().str.lower()
    for column in ("batch_size", "rep", "n", "epoch"):
        if column in data.columns:
            data[column] = _integral(data[column])
    for column in BOOL_COLUMNS:
        if column in data.columns:
            data[column] = flag(data, column)
    return data


def prepare_runs(runs: pd.DataFrame | None) -> pd.DataFrame:
    data = prepare(runs, ("workload", "device", "status"))
    for column in ("batch_size", "rep"):
        if column not in data.columns:
            data[column] = pd.Series(dtype="int64")
    return data


def select(data: pd.DataFrame, names: Iterable[str]) -> pd.DataFrame:
    """The columns of ``names`` that ``data`` has (narrow frames group much faster)."""
    return data[[c for c in dict.fromkeys(names) if c in data.columns]]


def ok_rows(runs: pd.DataFrame) -> pd.DataFrame:
    return runs[runs["status"] == "ok"]


def groups(data: pd.DataFrame, keys: Sequence[str]) -> dict[tuple, np.ndarray]:
    """{key tuple: positional indices} for ``keys`` (at least two), sorted."""
    if data.empty:
        return {}
    return data.groupby(list(keys), sort=True, dropna=False).indices


# ----------------------------------------------------------------------------- baselines


def matches(device: str, ident: str) -> bool:
    """A device matches a configured id when it equals it or is ``id@hardware``."""
    return device == ident or column_of(device) == ident


def resolve(ident: str | None, candidates: Iterable[str]) -> str | None:
    """The first (sorted) candidate matching ``ident``."""
    if not ident:
        return None
    found = sorted(d for d in candidates if matches(d, ident))
    return found[0] if found else None


def _presence(runs: pd.DataFrame, matmul: pd.DataFrame | None) -> pd.DataFrame:
    parts = [runs[["workload", "device", "status"]]]
    if matmul is not None and not matmul.empty:
        mm = prepare(matmul)[["workload", "device"]].assign(status="ok")
        parts.append(mm)
    return pd.concat(parts, ignore_index=True)


def choose_baselines(
    runs: pd.DataFrame,
    devices: Mapping[str, Sequence[str]] | None,
    baseline: str | None = None,
    matmul: pd.DataFrame | None = None,
) -> dict[str, str | None]:
    """The baseline device of each workload: ``baseline`` (report.baseline_device) where
    the workload has records of it; else the first device of ``devices[workload]``
    with ok records, else the first listed with any record; else the first device
    (sorted) with ok records. A listed id matches ``id`` and ``id@hardware`` (the first
    such, sorted). None only when the workload has no ok record at all."""
    runs = prepare_runs(runs)
    present = _presence(runs, matmul)
    devices = devices or {}
    chosen: dict[str, str | None] = {}
    for workload, g in present.groupby("workload", sort=True):
        every = set(g["device"])
        ok = set(g.loc[g["status"] == "ok", "device"])
        listed = list(devices.get(workload, ()))
        choice = resolve(baseline, every)
        for pool in (ok, every):
            for ident in listed:
                choice = choice or resolve(ident, pool)
        chosen[str(workload)] = choice or (sorted(ok)[0] if ok else None)
    return chosen


def baseline_of(baselines: Baselines, workload: str) -> str | None:
    if baselines is None or isinstance(baselines, str):
        return baselines
    return baselines.get(workload)


def config_order(present: Iterable[str], listed: Sequence[str]) -> list[str]:
    """``present`` devices in the config's order (``id`` and ``id@hardware`` at the
    position of ``id``), then any others sorted."""
    present = sorted(set(present))
    ordered = [d for ident in listed for d in present if matches(d, ident)]
    seen = list(dict.fromkeys(ordered))
    return seen + [d for d in present if d not in seen]


# ----------------------------------------------------------------------------- workloads


def workload_kinds(
    runs: pd.DataFrame, epochs: pd.DataFrame | None = None, matmul: pd.DataFrame | None = None
) -> dict[str, str]:
    """ "training" when the workload has a samples_per_s value or epochs rows, else
    "microbenchmark". A workload with no ok record and no such rows is training unless
    it appears in the matmul table or is a known microbenchmark (matmul)."""
    runs = prepare_runs(runs)
    speed = runs.loc[np.isfinite(num(runs, "samples_per_s")), "workload"]
    trained = set(speed)
    if epochs is not None and not epochs.empty and "workload" in epochs.columns:
        trained |= set(text(epochs, "workload"))
    micro = set(MICROBENCHMARKS)
    if matmul is not None and not matmul.empty and "workload" in matmul.columns:
        micro |= set(text(matmul, "workload"))
    with_ok = set(ok_rows(runs)["workload"])
    kinds = {}
    for workload in sorted(set(runs["workload"]) | trained | (micro & with_ok)):
        if workload in trained or (workload not in micro and workload not in with_ok):
            kinds[workload] = "training"
        else:
            kinds[workload] = "microbenchmark"
    return kinds


# ----------------------------------------------------------------------------- phrases


def plural(n: int, noun: str) -> str:
    """ "1 run", "3 runs"."""
    return f"{n} {noun if n == 1 else noun + 's'}"


def class_counts(classes: Iterable[str]) -> str:
    """ "oom" for one class, "oom ×2, signal ×1" for several (most frequent first)."""
    counts = Counter(c or "unknown" for c in classes)
    if len(counts) == 1:
        return next(iter(counts))
    return ", ".join(f"{c} ×{k}" for c, k in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def class_tally(classes: Iterable[str]) -> str:
    """ "oom ×2, signal ×1" (always with counts)."""
    counts = Counter(c or "unknown" for c in classes)
    return ", ".join(f"{c} ×{k}" for c, k in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def percent(x: float) -> str:
    """A fraction as a percentage for prose: 0.142 -> "14.2%"."""
    return f"{compact(100 * x)}%"


def sizes_text(values: Iterable) -> str:
    """Distinct sizes ascending, ", "-joined."""
    distinct = sorted({int(v) for v in values if pd.notna(v)})
    return ", ".join(map(str, distinct))


def distinct_text(values: Iterable, sep: str = "; ") -> str:
    """Distinct non-missing values, sorted, joined; whole floats written as ints."""
    out = set()
    for v in values:
        if v is None or (isinstance(v, float) and np.isnan(v)) or v is pd.NA or v == "":
            continue
        if isinstance(v, (float, np.floating)) and float(v).is_integer():
            v = int(v)
        out.add(str(v))
    return sep.join(sorted(out, key=lambda s: (len(s), s) if s.isdigit() else (0, s)))
