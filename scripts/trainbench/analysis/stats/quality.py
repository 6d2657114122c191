"""Quality of the measurements: the ``stability`` and ``warnings`` tables.

``stability`` — one row per workload × device (every device with a record):

* cells, ok_cells, failed_cells, unavailable_cells: records by status; attempts,
  failed_attempts: summed over records (an ok cell that needed a retry counts in
  failed_attempts); failed_by_class ("oom ×2, signal ×1", a failure without a class
  counts as "unknown") and one ``failed_<class>`` count per class seen in the table;
* crashed: any failed attempt (failed_attempts > 0 or a failed cell);
* disturbed_runs, short_window_runs: ok records flagged so;
* noisy: the between-run CV exceeds 10% at a batch size with ≥ 3 ok repeats (pyperf
  warns from 10%), or bimodal, or (matmul) torch flagged a size noisy in a majority
  of its repeats;
* bimodal: at some batch size (matmul: size) with ≥ 3 ok repeats the sorted
  throughputs split in two groups (:func:`is_bimodal`);
* within_run_cv: median over ok records of step_robust_cv (1.4826·MAD / median of the
  window's step times, Kalibera & Jones's lower level); matmul: of IQR / 1.349 / median;
* between_run_cv: the largest, over batch sizes with ≥ 2 ok repeats, of std (ddof=1) /
  mean of samples_per_s across repeats (the upper level); matmul: of median_s per size;
* epoch_time_cv: per batch size, std / mean of timed_seconds over the full epochs
  (full_epoch true) of all ok repeats, then the median over batch sizes; NaN with
  fewer than 2 full epochs;
* slowest_to_fastest: per batch size, max / min of the repeats' samples_per_s
  (matmul: median_s per size); the largest;
* status: unavailable (every record) > crashed > disturbed > noisy > steady;
* note: the evidence in words ("rep 2 at bs 32 disturbed: 1 other cores; between-run
  CV 14% at bs 128").

``warnings`` — one row per flagged measurement: kind (numerics, disturbed, on battery,
low power mode, threads beyond performance cores, short window, eval speed not measured,
no steady state, slowdown — per ok record of runs.csv —, noisy, bimodal — per workload ×
device, batch_size and rep empty), workload, device, batch_size, rep, detail (the
numbers), affects_verdict (the kind withholds or changes a verdict — split setups,
numerics, disturbed, short window, no steady state: :data:`VERDICT_KINDS`; the reports'
headline counts these rows alone). ``on battery``, ``low power mode``, ``threads beyond
performance cores``: from the record's host facts (:mod:`.machine_state`); none of the
three turns a verdict. ``eval speed not measured``: the warm evaluation passes stayed
below ``timing.min_eval_seconds`` (by default ``timing.min_timed_seconds``; the record
has no evaluation speed; only that cell's ``eval_speed`` row goes without a verdict).
``numerics``: the record's numerical canary (:mod:`trainbench.measure.canary`) failed —
"matmul_transposed rel. error 0.21 > 0.01", then any other failed ops — or raised
("canary error: <message>"); microbenchmark records included. Sorted by kind in that
order, then workload, device, batch size, rep.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pandas as pd
from trainbench.analysis.stats import frames as fr
from trainbench.analysis.stats import machine_state
from trainbench.analysis.stats.machine_state import disturbance_words
from trainbench.analysis.stats.verdicts import failure_text
from trainbench.analysis.tables import compact, count_text

NOISY_CV = 0.10
BIMODAL_RATIO = 1.25
MIN_NOISY_REPEATS = 3
MAX_LISTED = 3

STABILITY_HEAD = [
    "workload", "device", "cells", "ok_cells", "failed_cells", "unavailable_cells", "attempts",
    "failed_attempts", "failed_by_class",
]  # fmt: skip
STABILITY_TAIL = [
    "crashed", "disturbed_runs", "short_window_runs", "noisy", "bimodal", "within_run_cv",
    "between_run_cv", "epoch_time_cv", "slowest_to_fastest", "status", "note",
]  # fmt: skip
STABILITY_COLUMNS = STABILITY_HEAD + STABILITY_TAIL
WARNING_KINDS = (
    "split setups", "numerics", "memory growth", "disturbed", "on battery", "low power mode",
    "threads beyond performance cores", "short window", "eval speed not measured",
    "no steady state", "slowdown", "noisy", "bimodal",
)  # fmt: skip
# The kinds that withhold or change a verdict (docs/statistics.md §3): records of another
# setup are never compared, a failed canary makes a device not working, and no verdict
# rests on a disturbed, short-window or no-steady-state run.
VERDICT_KINDS = ("split setups", "numerics", "disturbed", "short window", "no steady state")
WARNING_COLUMNS = ["kind", "workload", "device", "batch_size", "rep", "detail", "affects_verdict"]


def bimodal_split(values) -> int | None:
    """Where sorted ``values`` split into two groups, or None: with ≥ 3 positive finite
    values, the largest ratio between sorted neighbours is ≥ 1.25 and larger than the
    max/min spread inside each of the two groups it separates (MPS picks a 2–3x slower
    kernel on some cold starts). Returns the size of the lower group."""
    x = np.sort(np.asarray(values, dtype=float))
    x = x[np.isfinite(x) & (x > 0)]
    if x.size < MIN_NOISY_REPEATS:
        return None
    gaps = x[1:] / x[:-1]
    k = int(np.argmax(gaps))
    lower, upper = x[: k + 1], x[k + 1 :]
    inside = max(lower[-1] / lower[0], upper[-1] / upper[0])
    return k + 1 if gaps[k] >= BIMODAL_RATIO and gaps[k] > inside else None


def is_bimodal(values) -> bool:
    """True when :func:`bimodal_split` finds two groups."""
    return bimodal_split(values) is not None


def _bimodal_words(values, k: int, unit: str) -> str:
    x = np.sort(np.asarray(values, dtype=float))
    x = x[np.isfinite(x) & (x > 0)]
    low = ", ".join(compact(v) for v in x[:k])
    high = ", ".join(compact(v) for v in x[k:])
    return f"{low} | {high} {unit}"


def _spread_groups(runs: pd.DataFrame, matmul: pd.DataFrame | None) -> list[dict]:
    """Per workload × device × size: repeats, CV, max/min, bimodal, noisy majority."""
    out = []
    ok = fr.ok_rows(runs)
    ok = ok[np.isfinite(fr.num(ok, "samples_per_s"))]
    values = fr.num(ok, "samples_per_s").to_numpy()
    for (w, d, bs), idx in fr.groups(ok, fr.KEYS).items():
        out.append(_spread(w, d, f"bs {bs}", values[idx], values[idx], 0, "samples/s"))
    if matmul is not None and not matmul.empty:
        mm = fr.prepare(matmul)
        for column in ("batch_size", "n"):
            if column not in mm.columns:
                mm[column] = 0
        times, gflops = fr.num(mm, "median_s").to_numpy(), fr.num(mm, "gflops").to_numpy()
        noisy = fr.flag(mm, "noisy").to_numpy()
        for (w, d, bs, n), idx in fr.groups(mm, [*fr.KEYS, "n"]).items():
            label = f"n {n}" if bs in (0, 1) else f"bs {bs} n {n}"
            t = times[idx][np.isfinite(times[idx])]
            out.append(_spread(w, d, label, t, gflops[idx], int(noisy[idx].sum()), "GFLOP/s"))
    return out


def _spread(w, d, label, values, speeds, noisy_runs, unit) -> dict:
    n = int(values.size)
    mean = float(values.mean()) if n else np.nan
    cv = float(np.std(values, ddof=1) / mean) if n >= 2 and mean > 0 else np.nan
    ratio = float(values.max() / values.min()) if n >= 2 and values.min() > 0 else np.nan
    split = bimodal_split(speeds)
    evidence = {"noisy": [], "bimodal": []}
    if n >= MIN_NOISY_REPEATS and cv > NOISY_CV:
        evidence["noisy"].append(f"between-run CV {fr.percent(cv)} at {label}")
    if noisy_runs * 2 > n:
        evidence["noisy"].append(f"torch flagged {label} noisy in {noisy_runs} of {n} repeats")
    if split is not None:
        evidence["bimodal"].append(f"bimodal at {label}: {_bimodal_words(speeds, split, unit)}")
    return {"key": (w, d), "label": label, "cv": cv, "ratio": ratio, "evidence": evidence}


def _epoch_cv(epochs: pd.DataFrame | None, runs: pd.DataFrame) -> dict[tuple, float]:
    if epochs is None or epochs.empty or "timed_seconds" not in epochs.columns:
        return {}
    ep = fr.prepare(epochs)
    ep = ep[fr.flag(ep, "full_epoch") & np.isfinite(fr.num(ep, "timed_seconds"))]
    if {"batch_size", "rep"} <= set(ep.columns):
        ok_keys = fr.ok_rows(runs)[[*fr.KEYS, "rep"]].drop_duplicates()
        ep = ep.merge(ok_keys, on=[*fr.KEYS, "rep"], how="inner")
    if ep.empty:
        return {}
    t = fr.num(ep, "timed_seconds")
    stats = t.groupby([ep[k] for k in fr.KEYS]).agg(["count", "mean", "std"])
    stats = stats[stats["count"] >= 2]
    cv = (stats["std"] / stats["mean"]).groupby(level=[0, 1]).median()
    return {key: float(v) for key, v in cv.items()}


def _evidence(runs: pd.DataFrame, matmul: pd.DataFrame | None) -> dict[tuple, dict]:
    """Per workload × device: between-run CV, slowest/fastest and the noisy and bimodal
    evidence (shared by the stability and warnings tables)."""
    found: dict[tuple, dict] = defaultdict(_evidence_default)
    for spread in _spread_groups(runs, matmul):
        entry = found[spread["key"]]
        if np.isfinite(spread["cv"]) and not spread["cv"] <= entry["cv"]:
            entry["cv"], entry["cv_at"] = spread["cv"], spread["label"]
        if np.isfinite(spread["ratio"]) and not spread["ratio"] <= entry["ratio"]:
            entry["ratio"] = spread["ratio"]
        entry["noisy"] += spread["evidence"]["noisy"]
        entry["bimodal"] += spread["evidence"]["bimodal"]
    return found


def _listed(items: list[str]) -> list[str]:
    if len(items) <= MAX_LISTED:
        return items
    return [*items[:MAX_LISTED], f"{len(items) - MAX_LISTED} more"]


def _note(g: pd.DataFrame, status: str, row: dict, ev: dict) -> str:
    ok = g[g["status"] == "ok"]
    if status == "unavailable":
        return "unavailable: " + (fr.distinct_text(fr.text(g, "reason")) or "no reason given")
    parts = []
    if row["failed_cells"]:
        parts.append(
            f"{row['failed_cells']} of {row['cells']} cells failed ({row['failed_by_class']})"
        )
    if row["failed_attempts"]:
        parts.append(f"{fr.plural(row['failed_attempts'], 'failed attempt')} in all")
    why = [w or c for w, c in zip(fr.text(ok, "disturbed_reason"), fr.num(ok, "other_cpu_cores"),
                                  strict=True)]  # fmt: skip
    disturbed = [
        f"rep {r} at bs {b} disturbed: {disturbance_words(w)}"
        for r, b, w in zip(ok["rep"], ok["batch_size"], why, strict=True)
    ]
    parts += _listed([t for t, f in zip(disturbed, fr.flag(ok, "disturbed"), strict=True) if f])
    if row["short_window_runs"]:
        parts.append(f"{fr.plural(row['short_window_runs'], 'short window')}")
    parts += ev["noisy"] + ev["bimodal"]
    if not parts and np.isfinite(ev["cv"]):
        parts.append(f"largest between-run CV {fr.percent(ev['cv'])} at {ev['cv_at']}")
    return "; ".join(parts)


def stability_table(
    runs: pd.DataFrame, epochs: pd.DataFrame | None = None, matmul: pd.DataFrame | None = None
) -> pd.DataFrame:
    """The ``stability`` table; see the module docstring."""
    runs = fr.prepare_runs(runs)
    if runs.empty:
        return fr.empty(STABILITY_COLUMNS)
    runs = fr.select(runs, [
        *fr.KEYS, "rep", "status", "error_class", "reason", "attempts", "failed_attempts",
        "disturbed", "short_window", "other_cpu_cores", "step_robust_cv", "samples_per_s",
    ])  # fmt: skip
    failed = runs["status"] == "failed"
    runs = runs.assign(_class=fr.text(runs, "error_class").replace("", "unknown").where(failed))
    classes = sorted(runs["_class"].dropna().unique())
    evidence, epoch_cv = _evidence(runs, matmul), _epoch_cv(epochs, runs)
    within_matmul: dict[tuple, float] = {}
    if matmul is not None and not matmul.empty:
        mm = fr.prepare(matmul)
        robust = fr.num(mm, "iqr_s") / 1.349 / fr.num(mm, "median_s")
        within_matmul = robust.groupby([mm["workload"], mm["device"]]).median().to_dict()
    rows = []
    for (w, d), g in runs.groupby(["workload", "device"], sort=True):
        row = _stability_row(g, classes, evidence.get((w, d)) or _evidence_default())
        if not np.isfinite(row["within_run_cv"]):
            row["within_run_cv"] = float(within_matmul.get((w, d), np.nan))
        row["epoch_time_cv"] = epoch_cv.get((w, d), np.nan)
        rows.append(row)
    columns = STABILITY_HEAD + [f"failed_{c}" for c in classes] + STABILITY_TAIL
    return fr.frame(rows, columns)


def _evidence_default() -> dict:
    return {"cv": np.nan, "ratio": np.nan, "cv_at": "", "noisy": [], "bimodal": []}


def _stability_row(g: pd.DataFrame, classes: list[str], ev: dict) -> dict:
    status = g["status"]
    ok = g[status == "ok"]
    row = {
        "workload": g["workload"].iloc[0],
        "device": g["device"].iloc[0],
        "cells": len(g),
        "ok_cells": int((status == "ok").sum()),
        "failed_cells": int((status == "failed").sum()),
        "unavailable_cells": int((status == "unavailable").sum()),
        "attempts": int(fr.num(g, "attempts").fillna(0).sum()),
        "failed_attempts": int(fr.num(g, "failed_attempts").fillna(0).sum()),
        "failed_by_class": fr.class_tally(g["_class"].dropna()),
    }
    row.update({f"failed_{c}": int((g["_class"] == c).sum()) for c in classes})
    row["crashed"] = bool(row["failed_attempts"] > 0 or row["failed_cells"] > 0)
    row["disturbed_runs"] = int(fr.flag(ok, "disturbed").sum())
    row["short_window_runs"] = int(fr.flag(ok, "short_window").sum())
    row["bimodal"] = bool(ev["bimodal"])
    row["noisy"] = bool(ev["noisy"]) or row["bimodal"]
    robust = fr.num(ok, "step_robust_cv").dropna()
    row["within_run_cv"] = float(robust.median()) if len(robust) else np.nan
    row["between_run_cv"] = ev["cv"]
    row["epoch_time_cv"] = np.nan
    row["slowest_to_fastest"] = ev["ratio"]
    if row["unavailable_cells"] == row["cells"]:
        state = "unavailable"
    elif row["crashed"]:
        state = "crashed"
    elif row["disturbed_runs"]:
        state = "disturbed"
    else:
        state = "noisy" if row["noisy"] else "steady"
    row["status"] = state
    row["note"] = _note(g, state, row, ev)
    return row


# ----------------------------------------------------------------------------- warnings


def _disturbed_detail(why: str | float, start: float, end: float) -> str:
    parts = []
    if detail := disturbance_words(why):
        parts.append(detail)
    if np.isfinite(start) and np.isfinite(end):
        parts.append(f"load average {compact(start)} → {compact(end)}")
    return "; ".join(parts) or "flagged disturbed by the record"


_DETAIL_COLUMNS = (
    "other_cpu_cores", "disturbed_reason", "load_avg_start", "load_avg_end", "window_seconds", "window_steps",
    "eval_warm_seconds", "eval_warm_passes", "warmup_steps", "steady_start_step", "epochs",
    "wall_extension_seconds", "mining_seconds", *machine_state.DETAIL_COLUMNS,
)  # fmt: skip


def _over(x: float, unit: str) -> str:
    return f" over {int(x)} {unit}" if np.isfinite(x) else ""


def _record_detail(kind: str, v: pd.Series) -> str:
    """The numbers behind one record's flag, in words."""
    if kind == "disturbed":
        reason = v.get("disturbed_reason")
        why = reason if isinstance(reason, str) and reason else v["other_cpu_cores"]
        return _disturbed_detail(why, v["load_avg_start"], v["load_avg_end"])
    if kind == "short window":
        return f"window {compact(v['window_seconds'])} s" + _over(v["window_steps"], "steps")
    if kind == "eval speed not measured":
        seconds = compact(v["eval_warm_seconds"])
        over = _over(v["eval_warm_passes"], "passes")
        return f"warm evaluation {seconds} s{over}, below the minimum: no evaluation speed"
    if kind == "no steady state":
        return (
            f"no steady state in the step times; measured from step "
            f"{count_text(v['warmup_steps'])}, no verdict rests on it"
        )
    if kind in machine_state.KINDS:
        return machine_state.detail(kind, v)
    return _slowdown_detail(v)


def epoch_started_at(step: float, window_steps: float, epochs: float, extension_s: float) -> int:
    """The epoch (1-based) whose first step is ``step``, or 0 where that cannot be read
    from the record: a run without extension steps runs ``step + window_steps`` steps
    in ``epochs`` equal epochs."""
    if not (np.isfinite(step) and np.isfinite(window_steps) and np.isfinite(epochs)):
        return 0
    if extension_s != 0 or epochs < 2 or step <= 0:  # NaN: extension unknown
        return 0
    total = step + window_steps
    per_epoch = total / epochs
    if per_epoch != int(per_epoch) or step % per_epoch:
        return 0
    return int(step // per_epoch) + 1


def _slowdown_detail(v: pd.Series) -> str:
    """Where a run's step times settled at a slower level, and what can cause that: at
    an epoch's first step the work per step may have changed (two_tower's scheduled
    hard-negative mining does), elsewhere heat, other load or the work itself."""
    step = v["steady_start_step"]
    epoch = epoch_started_at(step, v["window_steps"], v["epochs"], v["wall_extension_seconds"])
    where = f"slower from step {count_text(step)} on"
    if not epoch:
        cause = "a shift in level: heat, other load or a change in the work per step"
        return f"{where} ({cause}): measured from there"
    where += f", the first step of epoch {epoch}"
    if v["mining_seconds"] > 0:
        return (
            f"{where}, where this run's hard-negative mining schedule can change the work per "
            "step: measured from there"
        )
    return f"{where} (a shift in level at an epoch boundary): measured from there"


def _record_warnings(runs: pd.DataFrame) -> list[dict]:
    ok = fr.ok_rows(runs)
    steady = fr.text(ok, "steady_state")
    masks = {
        "disturbed": fr.flag(ok, "disturbed"),
        **machine_state.masks(ok),
        "short window": fr.flag(ok, "short_window"),
        "eval speed not measured": fr.flag(ok, "eval_short_window"),
        "no steady state": steady == fr.NO_STEADY_STATE,
        "slowdown": steady == "slowdown",
    }
    values = pd.DataFrame({c: fr.num(ok, c) for c in _DETAIL_COLUMNS}).assign(
        device=fr.text(ok, "device").to_numpy()
    )
    keys = ok[["workload", "device", "batch_size", "rep"]].to_numpy()
    rows = []
    for kind, mask in masks.items():
        for i in np.flatnonzero(mask.to_numpy()):
            workload, device, batch_size, rep = keys[i]
            rows.append({
                "kind": kind, "workload": workload, "device": device, "batch_size": batch_size,
                "rep": rep, "detail": _record_detail(kind, values.iloc[i]),
            })  # fmt: skip
    return rows


def _numerics_warnings(runs: pd.DataFrame) -> list[dict]:
    """One row per ok record whose numerical canary failed or raised."""
    ok = fr.ok_rows(runs)
    status = fr.text(ok, "numerics_status").str.strip().str.lower().to_numpy()
    failed_ops = fr.text(ok, "numerics_failed_ops").to_numpy()
    errors = fr.num(ok, "numerics_first_failed_error").to_numpy()
    tolerances = fr.num(ok, "numerics_first_failed_tolerance").to_numpy()
    messages = fr.text(ok, "numerics_message").to_numpy()
    keys = ok[["workload", "device", "batch_size", "rep"]].to_numpy()
    rows = []
    for i in np.flatnonzero(np.isin(status, ["fail", "error"])):
        if status[i] == "fail":
            ops = [op for op in failed_ops[i].split(";") if op] or ["an op"]
            detail = failure_text(ops[0], errors[i], tolerances[i])
            if len(ops) > 1:
                detail += f" (also failed: {', '.join(ops[1:])})"
        else:
            detail = f"canary error: {messages[i] or 'no message'}"[:400]
        workload, device, batch_size, rep = keys[i]
        rows.append({"kind": "numerics", "workload": workload, "device": device,
                     "batch_size": batch_size, "rep": rep, "detail": detail})  # fmt: skip
    return rows


def warnings_table(
    runs: pd.DataFrame,
    matmul: pd.DataFrame | None = None,
    setups: pd.DataFrame | None = None,
    memory: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """The ``warnings`` table; see the module docstring. ``setups``: the record table of
    workloads split because their records came from different setups (kind "split
    setups": never compared with each other)."""
    runs = fr.prepare_runs(runs)
    rows = [
        {"kind": "split setups", "workload": str(row["workload"]), "device": "",
         "batch_size": pd.NA, "rep": pd.NA, "detail": f"{row['reason']}: {row['split_into']}"}
        for _, row in (setups if setups is not None else pd.DataFrame()).iterrows()
    ]  # fmt: skip
    rows += _numerics_warnings(runs) + _record_warnings(runs)
    growing = memory[fr.flag(memory, "growth")] if memory is not None and not memory.empty else []
    rows += [
        {"kind": "memory growth", "workload": row["workload"], "device": row["device"],
         "batch_size": row["batch_size"], "rep": pd.NA, "detail": row["growth_detail"]}
        for _, row in (growing.iterrows() if len(growing) else [])
    ]  # fmt: skip
    for (w, d), ev in sorted(_evidence(runs, matmul).items()):
        for kind in ("noisy", "bimodal"):
            if ev[kind]:
                rows.append({"kind": kind, "workload": w, "device": d, "batch_size": pd.NA,
                             "rep": pd.NA, "detail": "; ".join(ev[kind])})  # fmt: skip
    for row in rows:
        row["affects_verdict"] = row["kind"] in VERDICT_KINDS
    table = fr.frame(rows, WARNING_COLUMNS)
    if table.empty:
        return table
    order = {k: i for i, k in enumerate(WARNING_KINDS)}
    table["batch_size"] = pd.to_numeric(table["batch_size"]).astype("Int64")
    table["rep"] = pd.to_numeric(table["rep"]).astype("Int64")
    table = table.assign(_order=table["kind"].map(order))
    table = table.sort_values(
        ["_order", "workload", "device", "batch_size", "rep"], na_position="last"
    )
    return table.drop(columns="_order").reset_index(drop=True)
