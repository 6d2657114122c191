"""Records the machine's state made slower than the machine can be, for the ``warnings``
table (:mod:`.quality`): on battery power, in Low Power Mode, or more torch threads than
a Mac's performance cores where it also has efficiency cores.

Read from each record's own host facts (runs.csv's ``power_source``, ``battery_percent``,
``low_power_mode``, ``performance_cores``, ``efficiency_cores``, ``torch_threads``), so
the warning travels with the record wherever it is aggregated; a fact the record does
not hold (Linux has no Low Power Mode nor performance cores here, a desktop no battery)
flags nothing. None of them turns a verdict: the report says it beside the numbers.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from trainbench.analysis.stats import frames as fr
from trainbench.analysis.tables import compact, count_text

ON_BATTERY = "on battery"
LOW_POWER_MODE = "low power mode"
BEYOND_PERFORMANCE_CORES = "threads beyond performance cores"
KINDS = (ON_BATTERY, LOW_POWER_MODE, BEYOND_PERFORMANCE_CORES)
# runs.csv's numbers the details quote (with the row's device)
DETAIL_COLUMNS = ("battery_percent", "torch_threads", "performance_cores", "efficiency_cores")


def masks(ok: pd.DataFrame) -> dict[str, pd.Series]:
    """For each kind, which of the ok records ``ok`` it flags."""
    threads, performance = fr.num(ok, "torch_threads"), fr.num(ok, "performance_cores")
    return {
        ON_BATTERY: fr.text(ok, "power_source") == "battery",
        LOW_POWER_MODE: fr.flag(ok, "low_power_mode"),
        BEYOND_PERFORMANCE_CORES: (fr.num(ok, "efficiency_cores") > 0) & (threads > performance),
    }


def detail(kind: str, v: pd.Series) -> str:
    """One flagged record's facts in words, and the fix; ``v``: its DETAIL_COLUMNS and
    ``device``."""
    if kind == ON_BATTERY:
        charge = v["battery_percent"]
        known = np.isfinite(charge)
        left = f" ({compact(charge)}% charge when the record was written)" if known else ""
        return f"ran on battery power{left}: plug the machine in and rerun for a careful benchmark"
    if kind == LOW_POWER_MODE:
        return (
            "ran in Low Power Mode (pmset), which lowers the clock speed: turn it off in "
            "System Settings > Battery and rerun"
        )
    performance = count_text(v["performance_cores"])
    return (
        f"{v['device']} uses {count_text(v['torch_threads'])} threads but this Mac has "
        f"{performance} performance cores: threads beyond them run on its "
        f"{count_text(v['efficiency_cores'])} efficiency cores, which are slower, or wait "
        f"(macOS cannot pin a thread to a core); use at most {performance} threads "
        f"(cpu-t{performance}) to measure the performance cores alone"
    )


def disturbance_words(why: str | float) -> str:
    """What disturbed a run: the record's reason (the cell's own cores judged), or for
    records made before it, the cores other processes kept busy anywhere."""
    if isinstance(why, str):
        return why
    return f"other processes used {compact(why)} cores" if np.isfinite(why) else ""
