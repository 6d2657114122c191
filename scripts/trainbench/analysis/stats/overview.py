"""Overview: the ``overview`` and ``attention`` tables.

``overview`` — one row per workload, then one row with workload "(all)":
kind ("training" when the workload has samples_per_s values or epochs rows, else
"microbenchmark"); baseline; devices (config order, then any others sorted,
";"-joined); records, ok, failed, unavailable (records by status); repeats_min,
repeats_max (the fewest / most ok records of any device × batch size cell with ok
records); code (the distinct code that made the records: version, source fingerprint
and git commit, trainbench.common.code_identity; sorted, ";"-joined). The "(all)" row
sums records, ok, failed and unavailable and lists every code; its other columns are
empty.

``attention`` — failed and unavailable records, grouped: status; workload; device;
error_class; detail; cells (records); batch_sizes (distinct, ", "-joined ascending).
Failed records are grouped by workload × device × error_class × detail (the error
message); unavailable records by device × detail (the reason) across workloads, their
workload column listing the workloads ";"-joined — one line per unavailable device,
not one per workload. Failed first (by workload, device), then unavailable (by device).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pandas as pd
from trainbench.analysis.stats import frames as fr

OVERVIEW_COLUMNS = [
    "workload", "kind", "baseline", "devices", "records", "ok", "failed", "unavailable",
    "repeats_min", "repeats_max", "code", "setup",
]  # fmt: skip
ATTENTION_COLUMNS = [
    "status",
    "workload",
    "device",
    "error_class",
    "detail",
    "cells",
    "batch_sizes",
]


def overview_table(
    runs: pd.DataFrame,
    devices: Mapping[str, Sequence[str]] | None,
    baselines: fr.Baselines,
    kinds: Mapping[str, str] | None = None,
) -> pd.DataFrame:
    """The ``overview`` table; see the module docstring. ``kinds``: {workload: kind}
    (default: :func:`trainbench.analysis.stats.frames.workload_kinds` of ``runs``)."""
    runs = fr.prepare_runs(runs)
    kinds = dict(kinds) if kinds is not None else fr.workload_kinds(runs)
    devices = devices or {}
    # The code that made each record (trainbench.common.code_identity); tables made
    # before records named it: the commit.
    codes = fr.text(runs, "code" if "code" in runs else "git_commit")
    rows = []
    for workload in sorted(set(runs["workload"]) | set(kinds)):
        g = runs[runs["workload"] == workload]
        status = g["status"]
        ok = g[status == "ok"]
        per_cell = ok.groupby(["device", "batch_size"]).size()
        rows.append(
            {
                "workload": workload,
                "kind": kinds.get(workload, "training"),
                "baseline": fr.baseline_of(baselines, workload),
                "devices": ";".join(fr.config_order(g["device"], devices.get(workload, ()))),
                "records": len(g),
                "ok": len(ok),
                "failed": int((status == "failed").sum()),
                "unavailable": int((status == "unavailable").sum()),
                "repeats_min": int(per_cell.min()) if len(per_cell) else pd.NA,
                "repeats_max": int(per_cell.max()) if len(per_cell) else pd.NA,
                "code": ";".join(sorted(set(codes[g.index]) - {""})),
                # what was measured: data set and model, from the records (trainbench.analysis.setups)
                "setup": " | ".join(sorted(set(fr.text(g, "setup_text")) - {""})),
            }  # fmt: skip
        )
    if rows:
        total = {k: sum(r[k] for r in rows) for k in ("records", "ok", "failed", "unavailable")}
        rows.append({"workload": "(all)", **total, "code": ";".join(sorted(set(codes) - {""}))})
    table = fr.frame(rows, OVERVIEW_COLUMNS)
    for column in ("repeats_min", "repeats_max"):
        table[column] = pd.to_numeric(table[column]).astype("Int64")
    return table


def _details(bad: pd.DataFrame) -> pd.Series:
    """The error message of a failed record (its reason where it has none), the reason
    of an unavailable one."""
    message, reason = fr.text(bad, "error_message"), fr.text(bad, "reason")
    failed = (bad["status"] == "failed") & (message != "")
    return message.where(failed, reason)


def attention_table(runs: pd.DataFrame) -> pd.DataFrame:
    """The ``attention`` table; see the module docstring."""
    runs = fr.prepare_runs(runs)
    bad = runs[runs["status"].isin(["failed", "unavailable"])]
    if bad.empty:
        return fr.empty(ATTENTION_COLUMNS)
    bad = bad.assign(
        error_class=fr.text(bad, "error_class"),
        detail=_details(bad),
    )
    failed = bad[bad["status"] == "failed"].assign(
        error_class=lambda f: f["error_class"].replace("", "unknown")
    )
    rows = []
    for (w, d, cls, detail), g in failed.groupby(
        ["workload", "device", "error_class", "detail"], sort=True
    ):
        rows.append({"status": "failed", "workload": w, "device": d, "error_class": cls,
                     "detail": detail, "cells": len(g), "batch_sizes": fr.sizes_text(g["batch_size"])})  # fmt: skip
    unavailable = bad[bad["status"] == "unavailable"]
    for (d, detail), g in unavailable.groupby(["device", "detail"], sort=True):
        rows.append({"status": "unavailable", "workload": ";".join(sorted(set(g["workload"]))),
                     "device": d, "error_class": "", "detail": detail, "cells": len(g),
                     "batch_sizes": fr.sizes_text(g["batch_size"])})  # fmt: skip
    return fr.frame(rows, ATTENTION_COLUMNS)
