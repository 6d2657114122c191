"""Energy: the ``energy`` table, from the energy columns of runs.csv.

Each ok training record carries the energy of its timed training regions (step 0 and
evaluation excluded; :mod:`trainbench.measure.trackers.energy`): the total joules of the
domains it could read (``energy_domains``: gpu from NVML, cpu and dram from RAPL or
IOReport, ane from IOReport), ``joules_per_sample`` and ``samples_per_joule``, or an
``energy_status`` of ``short window`` / ``unavailable`` with ``energy_reason``.

``energy`` — one row per workload × batch size × device with at least one ok or failed
record (training workloads; as the ``speedup`` table). Columns:

* workload, batch_size, device; baseline: the workload's baseline device (the speedup
  table's);
* n: ok records whose energy was measured (status ok, a finite joules per sample);
  joules_per_sample, jps_low, jps_high, interval: their median joules per training
  sample and its interval (:func:`~trainbench.analysis.stats.intervals.summarize`: the range
  below 5 runs, a 95% bootstrap CI from 5), interval the kind;
* samples_per_joule, spj_low, spj_high, spj_interval: the same for samples per joule
  (each run's samples ÷ its joules: higher is more efficient);
* baseline_n, baseline_joules_per_sample: the baseline's n and median here;
* energy_ratio: joules_per_sample ÷ baseline_joules_per_sample (below 1: less energy per
  sample than the baseline); energy_ratio_low, energy_ratio_high,
  energy_ratio_interval: its interval (:func:`~trainbench.analysis.stats.intervals.ratio_interval`)
  and kind; NaN on baseline rows (energy_ratio 1) and where a side has no value;
* verdict: baseline, more efficient (the ratio's interval lies below 1), less efficient
  (above 1), no clear difference, insufficient data or disturbed — the first matching
  rule: the baseline; no ok run on a side; a disturbed run on either side; a short
  energy window on either side; no measured energy on a side (counters unavailable);
  the measured domains differ between the runs of a side (their totals are not
  comparable); fewer than 3 measured repeats on a side; else the interval. reason: that
  rule with its numbers; a verdict between sides that measured different domains (a
  CUDA box's GPU alone against a Mac's whole SoC) says so ("not like for like");
* domains, baseline_domains: the domains summed on this device and on the baseline
  ("gpu+cpu+dram"; distinct sets "; "-joined);
* mean_watts, idle_watts: medians over the measured runs of the mean power over the
  window and of the idle power sampled before training (all readable domains);
* short_window_runs, unavailable_runs, disturbed_runs: this device's ok records here
  whose energy window was short, whose counters were all unavailable, that were
  disturbed;
* unavailable: the device's note for this workload, the same on each of its rows
  ("energy unavailable on cpu: cpu, dram: no /sys/class/powercap …"; "energy
  unavailable in 2 of 6 runs of cpu: …" when only some runs measured nothing); empty
  when every run measured something. Reports show it once per device.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from trainbench.analysis.stats import frames as fr
from trainbench.analysis.stats.intervals import (
    FASTER,
    INSUFFICIENT,
    NO_CLEAR,
    SLOWER,
    Interval,
    ratio_intervals,
    summarize_many,
    verdict,
)
from trainbench.analysis.stats.speed import BASELINE, DISTURBED, MIN_REPEATS
from trainbench.analysis.tables import compact, interval_text

MORE = "more efficient"
LESS = "less efficient"
SHORT = "short window"
ENERGY_COLUMNS = [
    "workload", "batch_size", "device", "baseline", "n", "joules_per_sample", "jps_low",
    "jps_high", "interval", "samples_per_joule", "spj_low", "spj_high", "spj_interval",
    "baseline_n", "baseline_joules_per_sample", "energy_ratio", "energy_ratio_low",
    "energy_ratio_high", "energy_ratio_interval", "verdict", "reason", "domains",
    "baseline_domains", "mean_watts", "idle_watts", "short_window_runs", "unavailable_runs",
    "disturbed_runs", "unavailable",
]  # fmt: skip


@dataclass
class EnergySide:
    """One device's records at one workload × batch size."""

    jps: np.ndarray = field(default_factory=lambda: np.empty(0))
    spj: np.ndarray = field(default_factory=lambda: np.empty(0))
    watts: np.ndarray = field(default_factory=lambda: np.empty(0))
    idle: np.ndarray = field(default_factory=lambda: np.empty(0))
    ok: int = 0
    failed: int = 0
    domains: list[str] = field(default_factory=list)  # of the measured runs
    short: list[str] = field(default_factory=list)
    unavailable: list[str] = field(default_factory=list)  # reasons
    disturbed: list[str] = field(default_factory=list)

    @property
    def n(self) -> int:
        return int(self.jps.size)


def _rep(value) -> str:
    return str(int(value)) if pd.notna(value) and float(value).is_integer() else str(value)


def _columns(runs: pd.DataFrame) -> dict[str, np.ndarray]:
    """The columns the sides read, once (robust to absent columns and CSV round trips)."""
    numbers = ("joules_per_sample", "samples_per_joule", "energy_mean_watts", "idle_watts",
               "energy_window_seconds")  # fmt: skip
    texts = ("status", "energy_status", "energy_reason", "energy_domains")
    cols = {c: fr.num(runs, c).to_numpy() for c in numbers}
    cols.update({c: fr.text(runs, c).to_numpy() for c in texts})
    cols["rep"] = runs["rep"].to_numpy()
    cols["disturbed"] = fr.flag(runs, "disturbed").to_numpy()
    return cols


def _side(cols: dict[str, np.ndarray], idx: np.ndarray) -> EnergySide:
    status, energy, rep = cols["status"], cols["energy_status"], cols["rep"]
    ok = idx[status[idx] == "ok"]
    jps = cols["joules_per_sample"]
    measured = ok[(energy[ok] == "ok") & np.isfinite(jps[ok])]

    def values(column: str) -> np.ndarray:
        v = cols[column][measured]
        return np.sort(v[np.isfinite(v)])

    window = cols["energy_window_seconds"]
    return EnergySide(
        jps=values("joules_per_sample"), spj=values("samples_per_joule"),
        watts=values("energy_mean_watts"), idle=values("idle_watts"), ok=len(ok),
        failed=int((status[idx] == "failed").sum()),
        domains=[str(d) for d in cols["energy_domains"][measured]],
        short=[f"rep {_rep(rep[i])} energy window {compact(window[i])} s" for i in ok
               if energy[i] == SHORT],
        unavailable=[cols["energy_reason"][i] or "no energy recorded" for i in ok
                     if energy[i] not in ("ok", SHORT)],
        disturbed=[f"rep {_rep(rep[i])}" for i in ok[cols["disturbed"][ok]]],
    )  # fmt: skip


def _domains(side: EnergySide | None) -> str:
    return fr.distinct_text(side.domains) if side is not None else ""


def _mixed(name: str, side: EnergySide) -> str | None:
    kinds = sorted(set(side.domains))
    if len(kinds) > 1:
        return f"the runs of {name} measured different domains ({'; '.join(kinds)})"
    return None


def _words(device: str, base: str, ratio: Interval, result: str) -> str:
    span = f"{interval_text(ratio.low, ratio.high)}x"
    text = f"energy per sample {compact(ratio.estimate)}x the {base} baseline's, "
    if not ratio.is_range:
        return text + f"{ratio.kind} {span}" + (" contains 1" if result == NO_CLEAR else "")
    if result == MORE:
        return (
            text
            + f"every {device} run used less per sample than every {base} run: {span} ({ratio.kind})"
        )
    if result == LESS:
        return (
            text
            + f"every {device} run used more per sample than every {base} run: {span} ({ratio.kind})"
        )
    return text + f"{device} and {base} runs overlap: {span} ({ratio.kind})"


def _blocked(device: str, base: str, dev: EnergySide | None, ref: EnergySide | None) -> str | None:
    """The reason no interval is read (rules 2-7 of the module docstring), or None."""
    for name, side in ((device, dev), (base, ref)):
        if side is None or side.ok == 0:
            return f"no ok run of {name} at this batch size"
    disturbed = [f"{n} {r}" for n, s in ((device, dev), (base, ref)) for r in s.disturbed]
    if disturbed:
        return DISTURBED + ": " + ", ".join(disturbed) + " (other processes kept cores busy)"
    short = [f"{n} {t}" for n, s in ((device, dev), (base, ref)) for t in s.short]
    if short:
        return "short window: " + "; ".join(short)
    for name, side in ((device, dev), (base, ref)):
        if side.n == 0:
            why = fr.distinct_text(side.unavailable) or "no energy recorded"
            if name == device:
                return f"energy unavailable on {name}: {why}"
            return f"no energy measured on the baseline {name}: {why}"
    for name, side in ((device, dev), (base, ref)):
        mixed = _mixed(name, side)
        if mixed:
            return mixed
    for name, side in ((device, dev), (base, ref)):
        if side.n < MIN_REPEATS:
            return (
                f"{name} has {fr.plural(side.n, 'measured repeat')}; a verdict needs {MIN_REPEATS}"
            )
    return None


def judge_energy(
    device: str,
    base: str | None,
    dev: EnergySide | None,
    ref: EnergySide | None,
    ratio: Interval | None,
) -> tuple[str, str]:
    """(verdict, reason): the first matching rule of the module docstring."""
    if device == base:
        return BASELINE, f"the baseline: {fr.plural(dev.n if dev else 0, 'measured run')}"
    if base is None:
        return INSUFFICIENT, "no baseline device: no ok run of this workload"
    blocked = _blocked(device, base, dev, ref)
    if blocked is not None:
        return (DISTURBED if blocked.startswith(DISTURBED) else INSUFFICIENT), blocked
    raw = verdict(ratio.low, ratio.high) if ratio is not None else INSUFFICIENT
    result = {FASTER: LESS, SLOWER: MORE}.get(raw, raw)
    if result == INSUFFICIENT:
        return INSUFFICIENT, f"no ratio: the {base} median is not positive"
    reason = _words(device, base, ratio, result)
    if _domains(dev) != _domains(ref):
        reason += (
            f"; not like for like: {device} measured {_domains(dev)}, {base} measured "
            f"{_domains(ref)}"
        )
    return result, reason


def _notes(runs: pd.DataFrame) -> dict[tuple, str]:
    """{(workload, device): the unavailable note} over every ok run of that pair."""
    ok = fr.ok_rows(runs)
    status = fr.text(ok, "energy_status").to_numpy()
    reasons = fr.text(ok, "energy_reason").to_numpy()
    notes = {}
    for (workload, device), idx in fr.groups(ok, ["workload", "device"]).items():
        missing = [i for i in idx if status[i] not in ("ok", SHORT)]
        if not missing:
            continue
        why = fr.distinct_text(reasons[i] or "no energy recorded" for i in missing)
        where = f"on {device}" if len(missing) == len(idx) else (
            f"in {len(missing)} of {len(idx)} runs of {device}"
        )  # fmt: skip
        notes[(workload, device)] = f"energy unavailable {where}: {why}"
    return notes


def _median(values: np.ndarray) -> float:
    return float(np.median(values)) if values.size else np.nan


def energy_table(
    runs: pd.DataFrame, baselines: fr.Baselines, workloads: Sequence[str] | None = None
) -> pd.DataFrame:
    """The ``energy`` table; see the module docstring. ``workloads`` limits it to those
    (default: the training workloads)."""
    runs = fr.prepare_runs(runs)
    if workloads is None:
        workloads = [w for w, k in fr.workload_kinds(runs).items() if k == "training"]
    runs = runs[runs["workload"].isin(list(workloads))].reset_index(drop=True)
    keys = ["workload", "batch_size", "device"]
    cols = _columns(runs)
    sides = {key: _side(cols, idx) for key, idx in fr.groups(runs, keys).items()}
    cells = [c for c in sides if sides[c].ok or sides[c].failed]
    pairs, need = [], []
    for cell in cells:
        base = fr.baseline_of(baselines, cell[0])
        ref = sides.get((cell[0], cell[1], base))
        if base is not None and cell[2] != base and ref is not None and ref.n and sides[cell].n:
            need.append(cell)
            pairs.append((sides[cell].jps, ref.jps))
    ratios = dict(zip(need, ratio_intervals(pairs), strict=True))
    jps = summarize_many([sides[c].jps for c in cells])
    spj = summarize_many([sides[c].spj for c in cells])
    notes = _notes(runs)
    rows = []
    for cell, j, s in zip(cells, jps, spj, strict=True):
        base = fr.baseline_of(baselines, cell[0])
        ref = sides.get((cell[0], cell[1], base))
        rows.append(_row(cell, base, sides[cell], ref, j, s, ratios.get(cell), notes))
    return fr.frame(rows, ENERGY_COLUMNS)


def _row(cell, base, side: EnergySide, ref, jps: Interval, spj: Interval, ratio, notes) -> dict:
    workload, batch_size, device = cell
    result, reason = judge_energy(device, base, side, ref, ratio)
    is_base = device == base
    return {
        "workload": workload, "batch_size": batch_size, "device": device, "baseline": base,
        "n": side.n, "joules_per_sample": jps.estimate, "jps_low": jps.low, "jps_high": jps.high,
        "interval": jps.kind if side.n else "", "samples_per_joule": spj.estimate,
        "spj_low": spj.low, "spj_high": spj.high, "spj_interval": spj.kind if side.n else "",
        "baseline_n": ref.n if ref is not None else 0,
        "baseline_joules_per_sample": _median(ref.jps) if ref is not None else np.nan,
        "energy_ratio": 1.0 if is_base and side.n else (ratio.estimate if ratio else np.nan),
        "energy_ratio_low": ratio.low if ratio else np.nan,
        "energy_ratio_high": ratio.high if ratio else np.nan,
        "energy_ratio_interval": ratio.kind if ratio else "", "verdict": result,
        "reason": reason, "domains": _domains(side), "baseline_domains": _domains(ref),
        "mean_watts": _median(side.watts), "idle_watts": _median(side.idle),
        "short_window_runs": len(side.short), "unavailable_runs": len(side.unavailable),
        "disturbed_runs": len(side.disturbed), "unavailable": notes.get((workload, device), ""),
    }  # fmt: skip
