"""Where each device's step time goes, and what bounds it: the ``step_breakdown`` table.

From each ok training run's diagnostic pass (``runs.csv``'s ``bd_*`` columns;
:mod:`trainbench.measure.step_breakdown`) and its timed window's median step (``step_p50_s``,
the steady step ``S``), per run:

* ``data_wait_share`` — the data wait ÷ ``S``;
* ``host_issue_share`` — the host's time to enqueue one step from an idle device ÷ ``S``
  (CUDA, MPS); none on the CPU, where the host computes as it issues;
* ``device_busy`` — the share of ``S`` the device spent working. CUDA: torch.profiler's
  kernel time per step ÷ ``S`` (kernels only: the idle gaps while the host is still
  issuing do not count); MPS, and CUDA where the profiler failed: (``step`` −
  ``host_issue``) ÷ ``S``, the device's work after the host finished issuing, a lower
  bound; CPU: the process's CPU time over the step ÷ (the step × torch threads), the
  share of the cores the step kept busy;
* ``device_span`` — CUDA only: the CUDA events' span around the step's enqueue ÷ ``S``.
  It is not busy time: a device that waits for a slow host between kernels is inside
  the span, so in a launch-bound step the span is about the host's issue time. Kept as
  the cross-check the events give.

Shares are clipped to [0, 1]. Per workload × device × batch size the table gives the
median over repeats with the range, and the label from the medians and
``report.step_breakdown``'s thresholds (docs/statistics.md, "Where a step's time goes"):
``input-bound`` when the data wait is at least ``input_share`` of the step; else
``device-bound`` when the device is busy at least ``device_busy`` of it; else
``launch-bound`` when the host's issue takes at least ``launch_issue_share`` (on the CPU:
always, the issue being the computation) and the device is busy under
``launch_max_busy``; else ``mixed``; ``insufficient data`` without a diagnostic pass.
``reason`` states the label with its numbers.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd
from trainbench.analysis.stats import frames as fr

BREAKDOWN_TABLE_COLUMNS = [
    "workload", "device", "batch_size", "repeats", "steady_step_s",
    "data_wait_share", "data_wait_share_low", "data_wait_share_high",
    "host_issue_share", "host_issue_share_low", "host_issue_share_high",
    "device_busy", "device_busy_low", "device_busy_high", "device_span",
    "diagnostic_seconds", "bound", "reason",
]  # fmt: skip
SHARES = ("data_wait_share", "host_issue_share", "device_busy")


@dataclass(frozen=True)
class BoundRule:
    input_share: float = 0.3
    device_busy: float = 0.7
    launch_issue_share: float = 0.5
    launch_max_busy: float = 0.5

    @classmethod
    def from_config(cls, settings: Mapping | None) -> BoundRule:
        known = {k: float(v) for k, v in (settings or {}).items() if k in cls.__dataclass_fields__}
        return cls(**known)

    def label(self, backend: str, data: float, issue: float, busy: float) -> str:
        if not np.isfinite(busy) and not np.isfinite(data):
            return "insufficient data"
        if np.isfinite(data) and data >= self.input_share:
            return "input-bound"
        if np.isfinite(busy) and busy >= self.device_busy:
            return "device-bound"
        issued = backend == "cpu" or (np.isfinite(issue) and issue >= self.launch_issue_share)
        if issued and np.isfinite(busy) and busy < self.launch_max_busy:
            return "launch-bound"
        return "mixed"


def _clip(values: pd.Series) -> pd.Series:
    return values.clip(lower=0.0, upper=1.0)


def run_shares(runs: pd.DataFrame) -> pd.DataFrame:
    """Per ok training run with a diagnostic pass: its shares (see the module docstring)."""
    steady = fr.num(runs, "step_p50_s")
    steady = steady.where(steady > 0)
    backend = fr.text(runs, "backend")
    cpu = backend == "cpu"
    step, issue = fr.num(runs, "bd_step_s"), fr.num(runs, "bd_host_issue_s")
    cores = fr.num(runs, "bd_cpu_s") / (step * fr.num(runs, "bd_threads")).where(step > 0)
    kernel = fr.num(runs, "bd_kernel_s")
    after_issue = (step - issue).clip(lower=0.0)
    busy = kernel.where(kernel.notna() & (backend == "cuda"), after_issue) / steady
    out = runs[fr.KEYS].copy()
    out["backend"] = backend
    out["steady_step_s"] = steady
    out["data_wait_share"] = _clip(fr.num(runs, "bd_data_wait_s") / steady)
    out["host_issue_share"] = _clip(fr.num(runs, "bd_host_issue_s") / steady).where(~cpu)
    out["device_busy"] = _clip(busy.where(~cpu, cores))
    out["device_span"] = _clip(fr.num(runs, "bd_device_s") / steady).where(backend == "cuda")
    out["diagnostic_seconds"] = fr.num(runs, "bd_seconds")
    return out


def step_breakdown_table(runs: pd.DataFrame, rule: BoundRule | None = None) -> pd.DataFrame:
    """The ``step_breakdown`` table; see the module docstring."""
    rule = rule or BoundRule()
    runs = fr.prepare_runs(runs)
    ok = fr.ok_rows(runs)
    ok = ok[fr.num(ok, "bd_steps") > 0] if "bd_steps" in ok else ok.iloc[0:0]
    if ok.empty:
        return fr.frame([], BREAKDOWN_TABLE_COLUMNS)
    shares = run_shares(ok)
    rows = []
    for (workload, device, batch_size), g in shares.groupby(fr.KEYS, sort=False):
        row = {"workload": workload, "device": device, "batch_size": batch_size,
               "repeats": len(g), "steady_step_s": g["steady_step_s"].median(),
               "device_span": g["device_span"].median(),
               "diagnostic_seconds": g["diagnostic_seconds"].median()}  # fmt: skip
        for share in SHARES:
            values = g[share].dropna()
            row[share] = values.median() if len(values) else np.nan
            row[f"{share}_low"] = values.min() if len(values) else np.nan
            row[f"{share}_high"] = values.max() if len(values) else np.nan
        backend = str(g["backend"].iloc[0])
        row["bound"] = rule.label(
            backend, row["data_wait_share"], row["host_issue_share"], row["device_busy"]
        )
        row["reason"] = _reason(row, backend, rule)
        rows.append(row)
    return fr.frame(rows, BREAKDOWN_TABLE_COLUMNS)


def _pct(value: float) -> str:
    return f"{100 * value:.0f}%" if np.isfinite(value) else "—"


def _reason(row: Mapping, backend: str, rule: BoundRule) -> str:
    """The label with its numbers, e.g. "cuda launch-bound at bs 32: device busy 18%,
    host issue 74% of the 4.1 ms step, data wait 2%"."""
    head = f"{row['device']} {row['bound']} at bs {row['batch_size']}"
    step_ms = 1000 * row["steady_step_s"]
    if backend == "cpu":
        return (
            f"{head}: {_pct(row['device_busy'])} of the cores busy during the "
            f"{step_ms:.3g} ms step, data wait {_pct(row['data_wait_share'])} (on the CPU "
            "the host's issue and the computation cannot be split)"
        )
    busy = f"device busy {_pct(row['device_busy'])}"
    if backend == "mps":
        busy += " (a lower bound: the device's work after the host's issue)"
    span = row.get("device_span")
    if span is not None and np.isfinite(span):
        busy += f" (events' span {_pct(span)})"
    return (
        f"{head}: {busy}, host issue {_pct(row['host_issue_share'])} of the "
        f"{step_ms:.3g} ms step, data wait {_pct(row['data_wait_share'])}"
    )


def bounds_by_device(table: pd.DataFrame) -> dict[tuple, str]:
    """(workload, device) -> "launch-bound at bs 32 (device busy 18%); ..." for verdicts."""
    out: dict[tuple, list[str]] = {}
    for r in table.to_dict("records"):
        text = f"{r['bound']} at bs {r['batch_size']} (device busy {_pct(r['device_busy'])})"
        out.setdefault((r["workload"], r["device"]), []).append(text)
    return {key: "; ".join(parts) for key, parts in out.items()}


def bound_at(table: pd.DataFrame) -> dict[tuple, str]:
    """(workload, device, batch_size) -> its label, for the speedup table."""
    return {(r["workload"], r["device"], r["batch_size"]): r["bound"]
            for r in table.to_dict("records")}  # fmt: skip
