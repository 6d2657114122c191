"""Record tables of per-step training losses and of the float64 references (rule
``aggregate``): the facts the parity test's loss-drift check is computed from.

``step_losses.csv``: one row per record (a run's or a reference's) and step, for the
first steps only — as many as the longest reference has (the drift check needs no
more) — keyed by the record's path, which joins it to ``runs.csv`` (device labels,
status) and ``references.csv``. ``references.csv``: one row per reference record.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping

import pandas as pd

REFERENCE_COLUMNS = [
    "workload", "batch_size", "rep", "run_seed", "status", "reason", "dtype", "loss_dtype",
    "steps", "requested_steps", "baseline_device", "seconds", "record",
]  # fmt: skip
STEP_COLUMNS = ["record", "kind", "step", "loss"]


def _flat(losses: Iterable[Iterable[float]] | None) -> list[float]:
    return [float(x) for epoch in losses or [] for x in epoch]


def reference_row(record: Mapping, source: str) -> dict:
    cell, result = record.get("cell") or {}, record.get("result") or {}
    spec = record.get("spec") or {}
    losses = _flat((result.get("steps") or {}).get("losses"))
    reason = record.get("reason")
    if record.get("status") == "failed":
        error = record.get("error") or {}
        reason = f"{error.get('error_class', 'failed')}: {error.get('message', '')}".strip()
    return {
        "workload": cell.get("workload"),
        "batch_size": cell.get("batch_size"),
        "rep": cell.get("rep"),
        "run_seed": spec.get("run_seed"),
        "status": record.get("status"),
        "reason": reason,
        "dtype": result.get("dtype"),
        "loss_dtype": result.get("loss_dtype"),
        "steps": len(losses) if losses else None,
        "requested_steps": result.get("requested_steps"),
        "baseline_device": cell.get("device"),
        "seconds": result.get("seconds"),
        "record": source,
    }


def read_references(paths: Iterable[str | os.PathLike]) -> list[tuple[str, dict]]:
    out = []
    for path in paths:
        with open(path) as fh:
            out.append((str(path), json.load(fh)))
    return out


def step_rows(record: Mapping, source: str, kind: str, max_steps: int) -> list[dict]:
    losses = _flat(((record.get("result") or {}).get("steps") or {}).get("losses"))
    return [
        {"record": source, "kind": kind, "step": i, "loss": v}
        for i, v in enumerate(losses[:max_steps])
    ]


def loss_tables(
    records: list[tuple[str, dict]], references: list[tuple[str, dict]]
) -> dict[str, pd.DataFrame]:
    """``references`` and ``step_losses`` (see the module docstring)."""
    refs = pd.DataFrame([reference_row(r, src) for src, r in references], columns=REFERENCE_COLUMNS)
    longest = int(refs["steps"].max()) if refs["steps"].notna().any() else 0
    rows = [
        row
        for src, r in references
        if r.get("status") == "ok"
        for row in step_rows(r, src, "reference", longest)
    ]
    rows += [
        row
        for src, r in records
        if r.get("status") == "ok" and (r.get("result") or {}).get("kind") == "training"
        for row in step_rows(r, src, "run", longest)
    ]
    return {"references": refs, "step_losses": pd.DataFrame(rows, columns=STEP_COLUMNS)}
