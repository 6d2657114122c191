"""Where the cells' wall time went: the ``cell_time`` table.

One row per device (config order, then any others sorted), over its ok records that
carry a wall-time breakdown (the record's ``wall_time``, ``runs.csv``'s ``wall_*``
columns; :mod:`trainbench.measure.wall_time`). A cell's wall time is its final attempt's
duration, from the launcher starting the child process to the child's exit;
measurement is its canary, warm-up, timed training, extension and evaluation; the rest
(process start and imports, device initialisation, data and model set-up, training
bookkeeping, analysis, writing, exit, unattributed) is the cost of measuring.

* ``cells`` — ok records with a breakdown; ``without_breakdown`` — ok records without
  one (written before records carried it);
* ``median_cell_seconds`` — the median of the cells' wall times;
* ``median_measurement_share`` — the median of each cell's measurement seconds over
  its wall time (0.8 = 80%);
* ``median_outside_seconds``, ``max_outside_seconds`` — each cell's seconds outside
  measurement: the median and the largest;
* ``median_<phase>_seconds`` — the median of each phase outside measurement (medians
  of parts need not add up to the median of the whole);
* ``max_unattributed_seconds`` — the largest time a cell's phases left unattributed;
* ``forked_cells`` — cells whose child was forked from the run's pre-imported server
  (trainbench.launch.fork_server), the rest spawned; ``server_startup_seconds`` — the
  start-up (imports, the first optimizer's one-time work, each workload's modules on its
  first cell) of every server those cells came from, each at the largest its records
  saw, summed over servers: paid once per run, not per cell, and counted in the
  ``process_start_and_imports`` of the cells that waited for it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pandas as pd
from trainbench.analysis.stats import frames as fr
from trainbench.common.vocabulary import MEASUREMENT, PHASES

OUTSIDE_PHASES = [p for p in PHASES if p not in MEASUREMENT]
CELL_TIME_COLUMNS = [
    "device", "cells", "without_breakdown", "median_cell_seconds", "median_measurement_share",
    "median_outside_seconds", "max_outside_seconds",
    *(f"median_{p}_seconds" for p in OUTSIDE_PHASES), "max_unattributed_seconds",
    "forked_cells", "server_startup_seconds",
]  # fmt: skip


def cell_time_table(
    runs: pd.DataFrame, devices: Mapping[str, Sequence[str]] | None = None
) -> pd.DataFrame:
    """The ``cell_time`` table; see the module docstring. ``devices[workload]``: the
    config's device order."""
    runs = fr.prepare_runs(runs)
    ok = fr.ok_rows(runs)
    listed = [d for order in (devices or {}).values() for d in order]
    rows = []
    for device in fr.config_order(ok["device"], listed):
        g = ok[ok["device"] == device]
        seconds = fr.num(g, "wall_attempt_seconds")
        has = seconds.notna()
        g, seconds = g[has], seconds[has]
        outside = fr.num(g, "wall_outside_measurement_seconds")
        share = fr.num(g, "wall_measurement_seconds") / seconds.where(seconds > 0)
        row = {
            "device": device,
            "cells": int(has.sum()),
            "without_breakdown": int((~has).sum()),
            "median_cell_seconds": seconds.median(),
            "median_measurement_share": share.median(),
            "median_outside_seconds": outside.median(),
            "max_outside_seconds": outside.max(),
            "max_unattributed_seconds": fr.num(g, "wall_unattributed_seconds").max(),
        }
        for phase in OUTSIDE_PHASES:
            row[f"median_{phase}_seconds"] = fr.num(g, f"wall_{phase}_seconds").median()
        row.update(_servers(g))
        rows.append(row)
    return fr.frame(rows, CELL_TIME_COLUMNS)


def _servers(g: pd.DataFrame) -> dict:
    """How many of the cells were forked, and the start-up their servers paid once.

    A server's start-up grows while it runs (a workload's modules are imported on its
    first cell), and each record carries it as it stood at that cell's fork: a server's
    start-up is the largest any of its records saw."""
    if "start_method" not in g:
        return {"forked_cells": 0, "server_startup_seconds": None}
    forked = g[g["start_method"] == "fork_server"]
    # Series as keys, never column names: pandas reads a list of names as the keys
    # themselves when it is as long as the frame.
    keys = [forked.get(c, pd.Series("", index=forked.index)) for c in ("host", "start_server")]
    startup = fr.num(forked, "start_server_startup_seconds").groupby(keys).max()
    return {
        "forked_cells": len(forked),
        "server_startup_seconds": startup.sum() if startup.notna().any() else None,
    }
