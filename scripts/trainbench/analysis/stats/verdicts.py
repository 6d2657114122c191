"""Verdicts: the ``verification`` and ``verdicts`` tables.

``verification`` — one row per workload × device with ok training records: the
configuration in force and the verification checks over the ok runs.

* labels (device_label), runs (ok records), device_name, torch_version, threads,
  model, parameters, batch_sizes, gradient_accumulation, effective_batch_sizes,
  learning_rate, optimizer, epochs, max_length, autocast_dtype, grad_scaler: the
  distinct values, "; "-joined (batch sizes ", "-joined ascending);
* placement_pass: all_on_device in every ok run; placement_detail: "9/9 runs";
* autocast_pass: autocast_active equals autocast_requested in every run;
  autocast_detail: "requested in 9/9 runs, active in 9/9"; autocast_output_dtype;
* fallback_pass: no CPU fallback op in any run; fallback_detail: the ops, or "none seen";
* numerics_pass: the numerical canary (:mod:`trainbench.measure.canary`: a battery of ops on
  the device against CPU float64, before training) passed in every ok run that ran
  it — false when it failed or raised in any, empty when no run has a canary (records
  from before it existed); numerics_detail: "9/9 runs pass", "fail in 2/9 runs:
  matmul_transposed rel. error 0.21 > 0.01" (the first failing run's first failed op,
  then any other ops that failed), "canary error in 1/9 runs: <message>", "no canary
  in 3/9 runs";
* parameters_on, batch_on, optimizer_state_on: where they were found (distinct);
* memory_peak_bytes: the largest median peak over batch sizes, memory_peak_batch_size
  its batch size, memory_initial_bytes the median initial memory there (never a
  median across batch sizes); memory_method.

``verdicts`` — one row per workload × device of a training workload: baseline;
status ∈ {baseline, working, not working, insufficient data, disturbed, not faster,
unavailable}; symbol (✅ working or a baseline without failures, ❌ not working or a
baseline with failures, ⚠️ insufficient data / disturbed / not faster, ⚪
unavailable); first_failing (the short item; empty when working); text (the
verdict in words); batch_sizes (of the device's records). The first rule that applies:

1. every record unavailable → unavailable; 2. the baseline device → baseline (a
failed cell or a numerics failure is named as its first failing item);
3. failed cells → not working; 4. a verification check fails → not working;
5. the numerical canary failed in an ok run → not working, first_failing "numerics
fail: <op> rel. error <e> > <tolerance> (k/n runs)"; 6. parity fails at a batch
size → not working; 7. the canary raised in an ok run → insufficient data
("numerics not verified: ..."); 8. parity insufficient data or not comparable (or
missing) at a batch size → insufficient data; 9. a speed verdict disturbed →
disturbed; 10. insufficient data → insufficient data; 11. slower or no clear
difference at a batch size → not faster; 12. faster at every batch size → working.
"Every batch size" means every batch size the baseline device also ran: with per-device
batch sizes (``batch_sizes: {cpu: [16], cuda: [32]}``) a size only this device ran is
compared by training speed (``across_batch_sizes``) and time to target (``best_setting``),
across batch sizes, and a device that shares none with the baseline is insufficient data,
saying so.
Runs without a canary (older records) are not judged on it. Never a median across
batch sizes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from trainbench.analysis.stats import frames as fr
from trainbench.analysis.stats.intervals import FASTER
from trainbench.analysis.tables import compact, interval_text, ratio_text

CHECK_WORDS = {
    "placement": "model, batch tensors and optimizer state on the device",
    "autocast": "autocast active as requested",
    "fallback": "no CPU fallback",
}
SYMBOLS = {
    "working": "✅", "baseline": "✅", "not working": "❌", "insufficient data": "⚠️",
    "disturbed": "⚠️", "not faster": "⚠️", "unavailable": "⚪",
}  # fmt: skip
VERIFICATION_COLUMNS = [
    "workload", "device", "labels", "runs", "device_name", "torch_version", "threads", "model",
    "parameters", "batch_sizes", "gradient_accumulation", "effective_batch_sizes",
    "learning_rate", "optimizer", "epochs", "max_length", "autocast_dtype", "grad_scaler",
    "placement_pass", "placement_detail", "autocast_pass", "autocast_detail",
    "autocast_output_dtype", "fallback_pass", "fallback_detail", "numerics_pass",
    "numerics_detail", "parameters_on", "batch_on",
    "optimizer_state_on", "memory_initial_bytes", "memory_peak_bytes", "memory_peak_batch_size",
    "memory_method",
]  # fmt: skip
VERDICT_COLUMNS = [
    "workload",
    "device",
    "baseline",
    "status",
    "symbol",
    "first_failing",
    "text",
    "batch_sizes",
]
NUMERICS_FACTS = (
    "numerics_status", "numerics_failed_ops", "numerics_first_failed_error",
    "numerics_first_failed_tolerance", "numerics_message",
)  # fmt: skip
_NEEDED = [
    *fr.KEYS,
    "rep",
    "status",
    "error_class",
    "reason",
    "all_on_device",
    "autocast_requested",
    "autocast_active",
    "cpu_fallback_ops",
    "effective_batch_size",
    "memory_initial_bytes",
    "memory_peak_bytes",
    "memory_method",
    *NUMERICS_FACTS,
]
_FACTS = {
    "labels": "device_label", "device_name": "device_name", "torch_version": "torch_version",
    "threads": "torch_threads", "model": "model_name", "parameters": "parameters",
    "gradient_accumulation": "gradient_accumulation", "learning_rate": "learning_rate",
    "optimizer": "optimizer", "epochs": "epochs", "max_length": "max_length",
    "autocast_dtype": "autocast_dtype", "grad_scaler": "grad_scaler",
    "autocast_output_dtype": "autocast_output_dtype", "parameters_on": "placement_parameters",
    "batch_on": "placement_batch", "optimizer_state_on": "placement_optimizer_state",
}  # fmt: skip


def checks_of(placed, requested, active, fallback_ops) -> dict[str, tuple[bool, str]]:
    """The verification checks of a device's ok runs, each (passed, detail), from
    per-run arrays: all_on_device, autocast_requested, autocast_active (bools) and
    cpu_fallback_ops (";"-joined text)."""
    n = len(placed)
    placed, requested, active = (np.asarray(a, dtype=bool) for a in (placed, requested, active))
    ops = sorted({op for text in fallback_ops for op in str(text).split(";") if op})
    return {
        "placement": (bool(n and placed.all()), f"{int(placed.sum())}/{n} runs"),
        "autocast": (
            bool(n and (requested == active).all()),
            f"requested in {int(requested.sum())}/{n} runs, active in {int(active.sum())}/{n}",
        ),
        "fallback": (not ops, ", ".join(ops) or "none seen"),
    }


def device_checks(ok: pd.DataFrame) -> dict[str, tuple[bool, str]]:
    """The verification checks of a device's ok runs, each (passed, detail)."""
    return checks_of(
        fr.flag(ok, "all_on_device"), fr.flag(ok, "autocast_requested"),
        fr.flag(ok, "autocast_active"), fr.text(ok, "cpu_fallback_ops"),
    )  # fmt: skip


@dataclass(frozen=True)
class Numerics:
    """The numerical canary over a device's ok runs: passed (None when no run has a
    canary), the detail for the verification table, and the verdict's items for a
    failure and for an error ("" when none)."""

    passed: bool | None
    detail: str
    failure: str = ""
    error: str = ""


def failure_text(op: str, error: float, tolerance: float) -> str:
    """ "matmul_transposed rel. error 0.21 > 0.01"; a non-finite output says so."""
    if np.isinf(error):
        return f"{op} non-finite output (tolerance {compact(tolerance)})"
    if not np.isfinite(error):
        return f"{op} failed"
    return f"{op} rel. error {compact(error)} > {compact(tolerance)}"


def _ops(text) -> list[str]:
    return [op for op in str(text).split(";") if op]


def numerics_of(status, failed_ops, errors, tolerances, messages) -> Numerics:
    """The canary over a device's ok runs, from per-run arrays (runs.csv's
    numerics_status, numerics_failed_ops, numerics_first_failed_error,
    numerics_first_failed_tolerance, numerics_message), in run order: the first
    failing run's first failed op is the one named."""
    status = [str(v).strip().lower() for v in status]
    n = len(status)
    fails = [i for i, v in enumerate(status) if v == "fail"]
    errs = [i for i, v in enumerate(status) if v == "error"]
    passes = status.count("pass")
    ran = passes + len(fails) + len(errs)
    parts, failure, error = [], "", ""
    if passes and not fails and not errs:
        parts.append(f"{passes}/{n} runs pass")
    if fails:
        i = fails[0]
        named = _ops(failed_ops[i])
        first = failure_text(named[0] if named else "an op", errors[i], tolerances[i])
        others = sorted({op for j in fails for op in _ops(failed_ops[j])} - set(named[:1]))
        parts.append(f"fail in {len(fails)}/{n} runs: {first}")
        if others:
            parts[-1] += f" (also failed: {', '.join(others)})"
        failure = f"numerics fail: {first} ({len(fails)}/{n} runs)"
    if errs:
        message = str(messages[errs[0]] or "no message")[:300]
        parts.append(f"canary error in {len(errs)}/{n} runs: {message}")
        error = f"numerics not verified: canary error in {len(errs)}/{n} runs: {message}"
    if ran < n:
        parts.append(f"no canary in {n - ran}/{n} runs")
    passed = None if not ran else not (fails or errs)
    return Numerics(passed, "; ".join(parts), failure, error)


def _numerics_arrays(data: pd.DataFrame) -> list[np.ndarray]:
    """The per-run arrays :func:`numerics_of` takes, in its argument order."""
    text = [fr.text(data, c).to_numpy() for c in ("numerics_status", "numerics_failed_ops")]
    nums = [fr.num(data, c).to_numpy() for c in NUMERICS_FACTS[2:4]]
    return [*text, *nums, fr.text(data, "numerics_message").to_numpy()]


def _memory_facts(ok: pd.DataFrame) -> dict:
    peak = fr.num(ok, "memory_peak_bytes").groupby(ok["batch_size"]).median().dropna()
    facts = {"memory_initial_bytes": np.nan, "memory_peak_bytes": np.nan,
             "memory_peak_batch_size": pd.NA}  # fmt: skip
    if len(peak):
        at = peak.idxmax()
        initial = fr.num(ok, "memory_initial_bytes")[ok["batch_size"] == at].median()
        facts.update(memory_initial_bytes=initial, memory_peak_bytes=float(peak.max()),
                     memory_peak_batch_size=int(at))  # fmt: skip
    return facts


def verification_table(runs: pd.DataFrame, workloads: Sequence[str] | None = None) -> pd.DataFrame:
    """The ``verification`` table; see the module docstring. ``workloads``: the training
    workloads (default: as :func:`trainbench.analysis.stats.frames.workload_kinds` says)."""
    runs = fr.prepare_runs(runs)
    if workloads is None:
        workloads = [w for w, k in fr.workload_kinds(runs).items() if k == "training"]
    ok = fr.ok_rows(runs)
    ok = fr.select(ok[ok["workload"].isin(list(workloads))], [*_NEEDED, *_FACTS.values()])
    facts = {name: fr.text(ok, col).to_numpy() for name, col in _FACTS.items()}
    facts["memory_method"] = fr.text(ok, "memory_method").to_numpy()
    flags = [
        fr.flag(ok, c).to_numpy()
        for c in ("all_on_device", "autocast_requested", "autocast_active")
    ]
    ops = fr.text(ok, "cpu_fallback_ops").to_numpy()
    numerics = _numerics_arrays(ok)
    sizes, effective = ok["batch_size"].to_numpy(), fr.num(ok, "effective_batch_size").to_numpy()
    rows = []
    for (w, d), idx in fr.groups(ok, ["workload", "device"]).items():
        row = {"workload": w, "device": d, "runs": len(idx)}
        row.update({name: fr.distinct_text(values[idx]) for name, values in facts.items()})
        row["batch_sizes"] = fr.sizes_text(sizes[idx])
        row["effective_batch_sizes"] = fr.sizes_text(effective[idx])
        for name, (passed, detail) in checks_of(*(f[idx] for f in flags), ops[idx]).items():
            row[f"{name}_pass"], row[f"{name}_detail"] = passed, detail
        found = numerics_of(*(a[idx] for a in numerics))
        row["numerics_pass"], row["numerics_detail"] = found.passed, found.detail
        row.update(_memory_facts(ok.iloc[idx]))
        rows.append(row)
    table = fr.frame(rows, VERIFICATION_COLUMNS)
    table["memory_peak_batch_size"] = pd.to_numeric(table["memory_peak_batch_size"]).astype("Int64")
    return table


# ----------------------------------------------------------------------------- verdicts


def _is_false(value) -> bool:
    return pd.notna(value) and str(value).strip().lower() in ("false", "0", "0.0")


def _parity_item(rows: list[dict], speed_sizes: list) -> tuple[str, str] | None:
    """(status, item) for the first parity problem, or None."""
    by_size = {r["batch_size"]: r for r in rows}
    for bs, r in sorted(by_size.items()):
        if r["parity"] == "fail":
            if r.get("eval_parity") == "fail":
                what = _eval_failure(r)
            elif _is_false(r["drift_within"]):
                what = (
                    f"its losses drift from float64 {compact(r['drift_low'])}–"
                    f"{compact(r['drift_high'])}x the {r['precision']} envelope"
                )
            elif _is_false(r["metric_within"]):
                metric = r["primary_metric"] if isinstance(r["primary_metric"], str) else "metric"
                what = f"{metric} {compact(r['final_metric'])} vs {compact(r['baseline_metric'])}"
            else:
                what = f"loss {compact(r['final_loss'])} vs {compact(r['baseline_loss'])}"
            return "not working", f"parity fails at bs {bs}: {what}"
    for bs, r in sorted(by_size.items()):
        if r["parity"] in ("insufficient data", "not comparable"):
            return "insufficient data", f"parity {r['parity']} at bs {bs}: {r['rule']}"
    missing = [bs for bs in speed_sizes if bs not in by_size]
    if missing:
        return (
            "insufficient data",
            f"no parity comparison at bs {missing[0]}: no final metric or loss",
        )
    return None


def _eval_failure(r: dict) -> str:
    """Why the evaluation comparison failed, with the numbers that decided it."""
    ratio = r.get("eval_error_ratio")
    if ratio is None or pd.isna(ratio):
        return "its evaluation outputs differ from CPU float64 (not finite, or an integer output differs)"
    return (
        f"its evaluation outputs differ from CPU float64 ({compact(ratio)}x the "
        f"{r.get('eval_precision') or 'float32'} envelope: error {compact(r['eval_error'])}, "
        f"float32 floor {compact(r['eval_floor'])})"
    )


def _speed_item(rows: list[dict]) -> tuple[str, str] | None:
    if not rows:
        return "insufficient data", "no speed comparison: no ok training run with a throughput"
    for wanted in ("disturbed", "insufficient data"):
        for r in rows:
            if r["verdict"] == wanted:
                return wanted, f"{wanted} at bs {r['batch_size']}: {r['reason']}"
    for r in rows:
        if r["verdict"] != FASTER:
            span = interval_text(r["speedup_low"], r["speedup_high"])
            return "not faster", (
                f"{r['verdict']} at bs {r['batch_size']}: {span}x, {r['speedup_interval']}"
            )
    return None


def _working_text(ok_runs: int, parity: list[dict], speed: list[dict]) -> str:
    same = [r["batch_size"] for r in parity if r["parity"] == "identical"]
    held = "parity holds at every batch size"
    if same:
        held += f" (identical results at bs {fr.sizes_text(same)})"
    speedups = [r["speedup"] for r in speed]
    low, high = min(speedups), max(speedups)
    span = ratio_text(low) if low == high else f"{interval_text(low, high)}x"
    return (
        f"every verification check passed in all {fr.plural(ok_runs, 'run')}, {held}, and "
        f"training is faster at every batch size: {span}"
    )


def _verdict(
    device,
    base,
    status,
    classes,
    reasons,
    checks,
    numerics: Numerics,
    parity,
    speed,
    unshared: bool = False,
) -> tuple[str, str, str]:
    """(status, first_failing, text) of one device of a workload."""
    if (status == "unavailable").all():
        item = "unavailable: " + (fr.distinct_text(reasons) or "no reason given")
        return "unavailable", item, item
    failed = classes[status == "failed"]
    cells_failed = (
        f"{len(failed)} of {len(status)} cells failed ({fr.class_tally(failed)})"
        if len(failed)
        else ""
    )
    n_ok = int((status == "ok").sum())
    if device == base:
        items = "; ".join(filter(None, [cells_failed, numerics.failure]))
        text = f"the baseline: {fr.plural(n_ok, 'ok run')}"
        return "baseline", items, text + (f"; {items}" if items else "")
    if cells_failed:
        return "not working", cells_failed, cells_failed
    failing = [f"{CHECK_WORDS[k]} ({detail})" for k, (ok, detail) in checks.items() if not ok]
    if failing:
        item = "verification failed: " + "; ".join(failing)
        return "not working", item, item
    if numerics.failure:
        return "not working", numerics.failure, numerics.failure
    if unshared:
        item = (f"no batch size shared with the baseline {base} (each has its own): "
                "across_batch_sizes compares their training speed and best_setting their "
                "time to target, across batch sizes")  # fmt: skip
        return "insufficient data", item, item
    sizes = [r["batch_size"] for r in speed]
    found = _parity_item(parity, sizes)
    if found is None or found[0] != "not working":
        found = ("insufficient data", numerics.error) if numerics.error else found
    for item in (found, _speed_item(speed)):
        if item is not None:
            return item[0], item[1], item[1]
    return "working", "", _working_text(n_ok, parity, speed)


def _baseline_sizes(runs: pd.DataFrame, baselines: fr.Baselines) -> dict[str, set]:
    """Per workload, the batch sizes at which its baseline device has any record: a
    device is judged at those only (with per-device batch sizes, a size the baseline
    never ran has nothing to be compared with)."""
    out: dict[str, set] = {}
    for w, g in runs.groupby("workload", sort=False):
        base = fr.baseline_of(baselines, w)
        out[str(w)] = set(g.loc[g["device"] == base, "batch_size"].tolist())
    return out


def _by_device(table: pd.DataFrame) -> dict[tuple, list[dict]]:
    grouped: dict[tuple, list[dict]] = {}
    if table is not None and not table.empty:
        for row in table.sort_values("batch_size").to_dict("records"):
            grouped.setdefault((row["workload"], row["device"]), []).append(row)
    return grouped


def verdicts_table(
    runs: pd.DataFrame,
    speedup: pd.DataFrame,
    parity: pd.DataFrame,
    baselines: fr.Baselines,
    workloads: Sequence[str] | None = None,
) -> pd.DataFrame:
    """The ``verdicts`` table from the record table and the published speedup and
    parity tables; see the module docstring."""
    runs = fr.prepare_runs(runs)
    if workloads is None:
        workloads = [w for w, k in fr.workload_kinds(runs).items() if k == "training"]
    runs = fr.select(runs[runs["workload"].isin(list(workloads))], _NEEDED)
    speed_by, parity_by = _by_device(speedup), _by_device(parity)
    status = runs["status"].to_numpy()
    classes = fr.text(runs, "error_class").replace("", "unknown").to_numpy()
    reasons, sizes = fr.text(runs, "reason").to_numpy(), runs["batch_size"].to_numpy()
    flags = [
        fr.flag(runs, c).to_numpy()
        for c in ("all_on_device", "autocast_requested", "autocast_active")
    ]
    ops = fr.text(runs, "cpu_fallback_ops").to_numpy()
    numerics = _numerics_arrays(runs)
    rows = []
    shared = _baseline_sizes(runs, baselines)
    for (w, d), idx in fr.groups(runs, ["workload", "device"]).items():
        base = fr.baseline_of(baselines, w)
        ok = idx[status[idx] == "ok"]
        checks = checks_of(*(f[ok] for f in flags), ops[ok])
        canary = numerics_of(*(a[ok] for a in numerics))
        both = shared.get(w, set())  # per-device batch sizes: judged where both ran
        every_speed = speed_by.get((w, d), [])
        speed = [r for r in every_speed if r["batch_size"] in both]
        parity = [r for r in parity_by.get((w, d), []) if r["batch_size"] in both]
        found = _verdict(d, base, status[idx], classes[idx], reasons[idx], checks, canary,
                         parity, speed, unshared=bool(every_speed) and not speed)  # fmt: skip
        state, first, text = found
        alone = sorted({int(r["batch_size"]) for r in every_speed} - both)
        if alone and speed:  # per-device batch sizes: say which were not compared
            text += (f" (of the batch sizes {base} ran too; {fr.sizes_text(alone)} ran on {d} "
                     "alone: across_batch_sizes compares its speed there, best_setting "
                     "its time to target)")  # fmt: skip
        symbol = "❌" if state == "baseline" and first else SYMBOLS[state]
        rows.append({"workload": w, "device": d, "baseline": base, "status": state,
                     "symbol": symbol, "first_failing": first, "text": text,
                     "batch_sizes": fr.sizes_text(sizes[idx])})  # fmt: skip
    return fr.frame(rows, VERDICT_COLUMNS)
