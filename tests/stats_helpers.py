"""Synthetic record tables for the statistics-layer tests and the timing script
(plain functions, no fixtures): runs.csv, epochs.csv and matmul.csv rows as the
aggregate rule writes them."""

from __future__ import annotations

import numpy as np
import pandas as pd

GIB = 1024**3


def run(workload, device, batch_size, rep, status="ok", **values) -> dict:
    """One runs.csv row: an ok training record with sane defaults, overridden by ``values``."""
    row = {
        "workload": workload, "device": device, "device_label": device, "backend": device,
        "batch_size": batch_size, "rep": rep, "status": status, "error_class": None,
        "error_message": None, "reason": None, "attempts": 1, "failed_attempts": 0,
        "samples_per_s": np.nan, "eval_samples_per_s": np.nan, "window_steps": 100,
        "window_seconds": 5.0, "short_window": False, "steady_state": "flat",
        "step_robust_cv": 0.02, "disturbed": False, "other_cpu_cores": 0.05,
        "eval_short_window": False, "primary_metric": "accuracy", "final_metric": np.nan,
        "final_loss": np.nan, "all_on_device": True, "autocast_requested": False,
        "autocast_active": False, "cpu_fallback_ops": "", "git_commit": "abc123",
        "eval_parity_status": "pass", "eval_parity_error_ratio": 0.01,
        "eval_parity_metric_difference": 0.0,
    }  # fmt: skip
    if status != "ok":
        row["eval_parity_status"] = row["eval_parity_error_ratio"] = None
        for key in ("samples_per_s", "window_steps", "window_seconds", "step_robust_cv"):
            row[key] = np.nan
        row["steady_state"] = None
    row.update(values)
    return row


def cell(workload, device, batch_size, speeds, **values) -> list[dict]:
    """One ok record per throughput in ``speeds`` (reps 0, 1, …)."""
    return [
        run(workload, device, batch_size, rep, samples_per_s=float(v), **values)
        for rep, v in enumerate(speeds)
    ]


def frame(rows) -> pd.DataFrame:
    return pd.DataFrame(rows)


def epochs_for(runs: pd.DataFrame, n_epochs: int = 3, full_from: int = 2) -> pd.DataFrame:
    """epochs.csv rows for every ok record: epochs before ``full_from`` are not full."""
    ok = runs[(runs["status"] == "ok") & runs["samples_per_s"].notna()]
    rows = []
    for r in ok.itertuples(index=False):
        for epoch in range(1, n_epochs + 1):
            rows.append(
                {
                    "workload": r.workload,
                    "device": r.device,
                    "batch_size": r.batch_size,
                    "rep": r.rep,
                    "epoch": epoch,
                    "train_loss": 2.0 / epoch,
                    "timed_seconds": 1000.0 / r.samples_per_s,
                    "full_epoch": epoch >= full_from,
                    "samples_per_s": r.samples_per_s,
                    "eval_seconds": 0.5,
                    "eval_cold": epoch == 1,
                    "eval_accuracy": 0.5 + 0.1 * epoch,
                    "train_accuracy": 0.4 + 0.1 * epoch,
                }  # fmt: skip
            )
    return pd.DataFrame(rows)


def matmul_rows(device, times: dict, reps: int = 3, batch_size: int = 1, **values) -> list[dict]:
    """matmul.csv rows: for each size n, ``reps`` repeats near ``times[n]`` seconds."""
    return [
        {
            "workload": "matmul",
            "device": device,
            "batch_size": batch_size,
            "rep": r,
            "n": n,
            "median_s": t * (1 + 0.01 * r),
            "iqr_s": 0.01 * t,
            "gflops": 2 * n**3 / (t * (1 + 0.01 * r)) / 1e9,
            "noisy": False,
            "disturbed": False,
            **values,
        }  # fmt: skip
        for n, t in times.items()
        for r in range(reps)
    ]


def synthetic_tables(
    workloads: int = 5,
    devices=("cpu", "mps", "cuda", "cpu-t4"),
    sizes=(8, 16, 32, 64, 128),
    reps: int = 10,
    seed: int = 0,
) -> dict[str, pd.DataFrame]:
    """A large record set (workloads × devices × sizes × reps, plus epochs) for timing."""
    rng = np.random.default_rng(seed)
    rows = []
    for w in range(workloads):
        for d, device in enumerate(devices):
            for bs in sizes:
                base = 100.0 * (1 + d) * (1 + bs / 64)
                for rep in range(reps):
                    rows.append(run(
                        f"w{w}", device, bs, rep, samples_per_s=base * rng.normal(1, 0.03),
                        eval_samples_per_s=3 * base * rng.normal(1, 0.03),
                        final_metric=0.9 + rng.normal(0, 0.005), final_loss=0.3,
                        memory_peak_bytes=bs * 1e7, memory_initial_bytes=1e8,
                        memory_limit_bytes=16 * GIB, step_robust_cv=0.02,
                    ))  # fmt: skip
    runs = pd.DataFrame(rows)
    return {"runs": runs, "epochs": epochs_for(runs), "per_label_runs": pd.DataFrame(),
            "matmul": pd.DataFrame()}  # fmt: skip
