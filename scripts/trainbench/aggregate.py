"""Records -> tables (pandas). Every number here is computed from metrics.json files.

``runs.csv`` has one row per record; ``matmul.csv`` one row per record and
matrix size; ``environments.csv`` one row per distinct machine/software setup.
The summaries used by the report are computed from these tables.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd

from .records import RecordError, atomic_write_text, read_record

RUN_COLUMNS = [
    "workload", "device", "device_label", "backend", "batch_size", "rep", "status",
    "error_class", "error_message", "reason", "attempts", "failed_attempts",
    "samples_per_s", "eval_samples_per_s", "epoch_seconds_median", "warmup_seconds", "warmup_steps",
    "step_p50_s", "step_p90_s", "step_cv", "data_wait_per_step_s",
    "primary_metric", "final_metric", "best_metric", "best_epoch", "final_loss",
    "memory_initial_bytes", "memory_peak_bytes", "memory_method", "memory_limit_bytes",
    "torch_threads", "autocast_dtype", "grad_scaler", "all_on_device", "autocast_active", "cpu_fallback_ops",
    "placement_parameters", "placement_buffers", "placement_optimizer_state", "placement_batch",
    "autocast_requested", "autocast_output_dtype",
    "model_name", "parameters", "gradient_accumulation", "effective_batch_size", "epochs",
    "learning_rate", "max_length", "optimizer", "micro_f1", "macro_f1", "mining_seconds",
    "host", "cpu_model", "device_name", "slurm_job_id", "torch_version", "git_commit", "config_hash",
    "record",
]  # fmt: skip


def _get(mapping: Mapping | None, *keys, default=None):
    value = mapping
    for key in keys:
        if not isinstance(value, Mapping) or key not in value:
            return default
        value = value[key]
    return value


def run_row(record: dict, source: str) -> dict:
    cell = record["cell"]
    result = record.get("result") or {}
    error = record.get("error") or {}
    env = record.get("environment") or {}
    settings = record.get("settings_in_force") or {}
    epochs = result.get("epochs") or []
    epoch_seconds = [e["timed_seconds"] for e in epochs if e.get("timed_seconds")]
    attempts = record.get("attempts") or []
    return {
        "workload": cell["workload"],
        "device": cell["device"],
        "device_label": record.get("device_label", cell["device"]),
        "backend": record.get("backend"),
        "batch_size": cell["batch_size"],
        "rep": cell["rep"],
        "status": record["status"],
        "error_class": error.get("class"),
        "error_message": error.get("message"),
        "reason": record.get("reason"),
        "attempts": len(attempts),
        "failed_attempts": sum(a.get("status") == "failed" for a in attempts),
        "samples_per_s": _get(result, "timed", "samples_per_s"),
        "eval_samples_per_s": _get(result, "eval", "samples_per_s"),
        "epoch_seconds_median": float(np.median(epoch_seconds)) if epoch_seconds else None,
        "warmup_seconds": _get(result, "warmup", "seconds"),
        "warmup_steps": _get(result, "warmup", "steps"),
        "step_p50_s": _get(result, "step_latency_s", "p50"),
        "step_p90_s": _get(result, "step_latency_s", "p90"),
        "step_cv": _get(result, "step_latency_s", "cv"),
        "data_wait_per_step_s": _get(result, "data_wait", "per_step_mean_s"),
        "primary_metric": _get(result, "task", "primary_metric"),
        "final_metric": _get(result, "task", "final"),
        "best_metric": _get(result, "task", "best"),
        "best_epoch": _get(result, "task", "best_epoch"),
        "final_loss": _get(result, "task", "final_loss"),
        "memory_initial_bytes": _get(result, "memory", "device", "initial_bytes"),
        "memory_peak_bytes": _get(result, "memory", "device", "peak_bytes"),
        "memory_method": _get(result, "memory", "device", "method"),
        "memory_limit_bytes": _get(result, "memory", "limit_bytes"),
        "torch_threads": settings.get("torch_threads"),
        "autocast_dtype": _get(settings, "amp", "dtype"),
        "grad_scaler": _get(settings, "amp", "scaler"),
        "all_on_device": _get(result, "verification", "all_on_device"),
        "autocast_active": _get(result, "verification", "autocast_active"),
        "cpu_fallback_ops": ";".join(
            _get(result, "verification", "cpu_fallback_ops", default=[]) or []
        ),
        "placement_parameters": _joined(_get(result, "verification", "parameters")),
        "placement_buffers": _joined(_get(result, "verification", "buffers")),
        "placement_optimizer_state": _joined(_get(result, "verification", "optimizer_state")),
        "placement_batch": _joined(
            [f"{k}={v}" for k, v in sorted((_get(result, "verification", "batch") or {}).items())]
        ),
        "autocast_requested": _get(result, "verification", "autocast_requested"),
        "autocast_output_dtype": _get(result, "verification", "autocast_output_dtype"),
        "model_name": _get(result, "model", "name"),
        "parameters": _get(result, "model", "parameters"),
        "gradient_accumulation": _get(result, "settings", "gradient_accumulation"),
        "effective_batch_size": _get(result, "settings", "effective_batch_size"),
        "epochs": _get(result, "settings", "epochs"),
        "learning_rate": _get(result, "settings", "optimizer_options", "lr"),
        "max_length": _get(result, "settings", "max_length"),
        "optimizer": _get(result, "settings", "optimizer"),
        "mining_seconds": _get(result, "mining", "seconds"),
        "micro_f1": _get(result, "task", "micro_f1"),
        "macro_f1": _get(result, "task", "macro_f1"),
        "host": env.get("host"),
        "cpu_model": env.get("cpu_model"),
        "device_name": _get(env, "device", "name"),
        "slurm_job_id": env.get("slurm_job_id"),
        "torch_version": env.get("torch_version"),
        "git_commit": env.get("git_commit"),
        "config_hash": env.get("config_hash"),
        "record": source,
    }


def _joined(values) -> str | None:
    return ";".join(map(str, values)) if values else None


def _cell_keys(record: dict) -> dict:
    cell = record["cell"]
    return {
        "workload": cell["workload"],
        "device": cell["device"],
        "batch_size": cell["batch_size"],
        "rep": cell["rep"],
        "host": (record.get("environment") or {}).get("host"),
    }


def epoch_rows(record: dict, source: str) -> list[dict]:
    """One row per epoch of an ok training record; scalar eval metrics become eval_* columns."""
    result = record.get("result") or {}
    if record["status"] != "ok" or result.get("kind") != "training":
        return []
    rows = []
    for epoch in result.get("epochs", []):
        row = {
            **_cell_keys(record),
            "epoch": epoch["epoch"],
            "train_loss": epoch["train_loss"],
            "train_seconds": epoch["train_seconds"],
            "timed_seconds": epoch["timed_seconds"],
            "samples_per_s": epoch["samples_per_s"],
            "eval_seconds": epoch["eval_seconds"],
            "eval_samples_per_s": epoch["eval_samples_per_s"],
            "lr": epoch.get("lr"),
            "record": source,
        }
        for key, value in (epoch.get("eval_metrics") or {}).items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                row[f"eval_{key}"] = value
        for key, value in (epoch.get("train_metrics") or {}).items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                row[f"train_{key}"] = value
        rows.append(row)
    return rows


def per_label_rows(record: dict, source: str) -> list[dict]:
    """One row per label at the best epoch (multi-label workloads)."""
    task = (record.get("result") or {}).get("task") or {}
    if record["status"] != "ok" or not task.get("per_label"):
        return []
    return [
        {**_cell_keys(record), "best_epoch": task.get("best_epoch"), **row, "record": source}
        for row in task["per_label"]
    ]


def matmul_rows(record: dict, source: str) -> list[dict]:
    result = record.get("result") or {}
    if record["status"] != "ok" or result.get("kind") != "microbenchmark":
        return []
    cell = record["cell"]
    env = record.get("environment") or {}
    return [
        {
            "workload": cell["workload"],
            "device": cell["device"],
            "device_label": record.get("device_label", cell["device"]),
            "batch_size": cell["batch_size"],
            "rep": cell["rep"],
            "n": row["n"],
            "dtype": _get(result, "settings", "dtype"),
            "median_s": row["median_s"],
            "iqr_s": row["iqr_s"],
            "gflops": row["gflops"],
            "runs": row["runs"],
            "warmup_s": row["warmup_s"],
            "torch_threads": _get(result, "settings", "torch_threads"),
            "host": env.get("host"),
            "record": source,
        }
        for row in result.get("sizes", [])
    ]


def environment_row(record: dict) -> dict:
    env = record.get("environment") or {}
    return {
        "host": env.get("host"),
        "os": env.get("os"),
        "cpu_model": env.get("cpu_model"),
        "logical_cores": env.get("logical_cores"),
        "gpu_models": _joined(sorted(set(env.get("gpu_models") or []))),
        "device": record["cell"]["device"],
        "device_name": _get(env, "device", "name"),
        "python": env.get("python"),
        "torch": env.get("torch_version"),
        "packages": ", ".join(
            f"{k} {v}" for k, v in sorted((env.get("packages") or {}).items()) if k != "torch"
        ),
        "git_commit": env.get("git_commit"),
        "slurm_job_id": env.get("slurm_job_id"),
    }


def load_records(
    paths: Iterable[str | os.PathLike], skip_invalid: bool = False
) -> tuple[list[tuple[str, dict]], list[dict]]:
    """Read and validate every record. A bad file (truncated, corrupted, foreign or
    of another schema version) stops aggregation with the file named, or, with
    ``skip_invalid``, is left out and listed in the returned ``skipped``."""
    records, skipped = [], []
    for path in paths:
        try:
            records.append((str(path), read_record(path)))
        except RecordError as error:
            if not skip_invalid:
                raise
            skipped.append({"record": str(path), "reason": str(error)})
    return records, skipped


# ----------------------------------------------------------------------------- hardware
# Records are grouped by the hardware a cell actually used, not by host name: two
# nodes of one type pool (a cluster's identical nodes, two identical laptops), and
# records of different hardware are never averaged together.


@dataclass(frozen=True)
class Hardware:
    """What a record ran on. CPU cells (and MPS, whose chip is the CPU model): the
    CPU model and core count; CUDA cells also the GPU model. ``host`` stands in
    only where a record does not name its CPU model."""

    cpu: str | None
    cores: int | None
    gpu: str | None  # CUDA cells: the GPU's name, "none" where none was seen, None unknown
    host: str | None = None

    def parts(self, accelerator: bool) -> list[str]:
        """Readable parts, the most telling first (labels use as few as they need)."""
        if self.cpu is None:
            return [str(self.host)]
        cpu = [short_cpu_name(self.cpu), f"{self.cores} cores", self.cpu]
        if not accelerator:
            return cpu
        gpu = {None: "GPU unknown", "none": "no GPU"}.get(self.gpu, self.gpu)
        return [str(gpu), *cpu]


def short_cpu_name(name: str) -> str:
    """'Intel(R) Xeon(R) Platinum 8480+ @ 2.0GHz' -> 'Intel Xeon Platinum 8480+'."""
    text = re.sub(r"\((?:R|TM)\)", "", name, flags=re.I)
    text = re.sub(r"@\s*[\d.]+\s*[GM]Hz", "", text, flags=re.I)
    text = re.sub(r"\b(?:CPU|Processor)\b", "", text)
    return " ".join(text.split()) or name


def _is_cuda(record: dict) -> bool:
    backend = record.get("backend") or str(record["cell"]["device"]).split("-")[0]
    return backend == "cuda"


def record_hardware(record: dict) -> Hardware:
    env = record.get("environment") or {}
    gpu = None
    if _is_cuda(record):
        gpu = _get(env, "device", "name")
        models = sorted(set(env.get("gpu_models") or []))
        if not gpu and len(models) == 1:
            gpu = models[0]  # the child died before naming its GPU; the node has one kind
        elif not gpu and env.get("gpu_models") == []:
            gpu = "none"  # nvidia-smi answered and listed no GPU
    if not env.get("cpu_model"):
        return Hardware(None, None, gpu, env.get("host"))
    return Hardware(env["cpu_model"], env.get("logical_cores"), gpu)


def records_hardware(records: list[tuple[str, dict]]) -> dict[str, Hardware]:
    """Each record's hardware. A CUDA record whose GPU is unknown takes the GPU model
    of its host's other CUDA records when they name exactly one."""
    found = {src: record_hardware(r) for src, r in records}
    host_gpus: dict[str | None, set[str]] = {}
    for src, r in records:
        gpu = found[src].gpu
        if _is_cuda(r) and gpu not in (None, "none"):
            host_gpus.setdefault((r.get("environment") or {}).get("host"), set()).add(gpu)
    for src, r in records:
        gpus = host_gpus.get((r.get("environment") or {}).get("host"), set())
        if _is_cuda(r) and found[src].gpu is None and len(gpus) == 1:
            found[src] = replace(found[src], gpu=next(iter(gpus)))
    return found


def hardware_labels(records: list[tuple[str, dict]]) -> tuple[dict[str, str], bool]:
    """Each record's hardware label, and whether devices must carry it: true when some
    device ran on more than one kind of hardware. A device's labels use as few parts
    as keep its kinds apart ("NVIDIA H100 80GB HBM3"; "Intel Xeon Gold 6148, 40 cores"
    only where two kinds share a CPU model)."""
    hardware = records_hardware(records)
    by_device: dict[str, set[Hardware]] = {}
    cuda: dict[str, bool] = {}
    for src, r in records:
        device = r["cell"]["device"]
        by_device.setdefault(device, set()).add(hardware[src])
        cuda[device] = _is_cuda(r)
    names: dict[tuple[str, Hardware], str] = {}
    for device, kinds in by_device.items():
        ordered = sorted(kinds, key=repr)
        parts = {hw: hw.parts(cuda[device]) for hw in ordered}
        for n in range(1, max(len(p) for p in parts.values()) + 1):
            labels = {hw: ", ".join(dict.fromkeys(p[:n])) for hw, p in parts.items()}
            if len(set(labels.values())) == len(ordered):
                break
        else:  # identical readable parts for different kinds: number them
            labels = {hw: f"{labels[hw]} #{i + 1}" for i, hw in enumerate(ordered)}
        names.update({(device, hw): label for hw, label in labels.items()})
    per_record = {src: names[(r["cell"]["device"], hardware[src])] for src, r in records}
    return per_record, any(len(kinds) > 1 for kinds in by_device.values())


def label_machines(tables: dict[str, pd.DataFrame], records: list[tuple[str, dict]]) -> None:
    """Every table row gets its record's ``hardware``. When some device ran on more
    than one kind of hardware (merged results folders, a cluster's node types), every
    device becomes ``device@hardware``, so different hardware is never averaged
    together while identical nodes pool."""
    labels, split = hardware_labels(records)
    for frame in tables.values():
        if frame.empty or "record" not in frame.columns:
            continue
        frame["hardware"] = frame["record"].map(labels)
        if split and "device" in frame.columns:
            frame["device"] = frame["device"].astype(str) + "@" + frame["hardware"].astype(str)


def _environments(records: list[tuple[str, dict]]) -> pd.DataFrame:
    """One row per machine, device and software setup (not per record): the Slurm
    jobs that ran on it are listed together."""
    rows = [
        {**environment_row(r), "record": src} for src, r in records if r["status"] != "unavailable"
    ]
    return pd.DataFrame(rows)


def _pool_environments(env: pd.DataFrame) -> pd.DataFrame:
    if env.empty:
        return env
    env = env.drop(columns=["record"])
    keys = [c for c in env.columns if c != "slurm_job_id"]
    jobs = env["slurm_job_id"].map(lambda v: None if pd.isna(v) else str(v))
    pooled = (
        env.assign(slurm_job_id=jobs)
        .groupby(keys, dropna=False, sort=False)["slurm_job_id"]
        .agg(lambda ids: _joined(sorted(set(ids.dropna()), key=lambda x: (len(x), x))))
        .reset_index()
        .rename(columns={"slurm_job_id": "slurm_job_ids"})
    )
    return pooled.sort_values(["host", "device"]).reset_index(drop=True)


def build_tables(records: list[tuple[str, dict]]) -> dict[str, pd.DataFrame]:
    runs = pd.DataFrame([run_row(r, src) for src, r in records], columns=RUN_COLUMNS)
    matmul = pd.DataFrame([row for src, r in records for row in matmul_rows(r, src)])
    epochs = pd.DataFrame([row for src, r in records for row in epoch_rows(r, src)])
    per_label = pd.DataFrame([row for src, r in records for row in per_label_rows(r, src)])
    runs = runs.sort_values(["workload", "device", "batch_size", "rep"]).reset_index(drop=True)
    tables = {
        "runs": runs,
        "matmul": matmul,
        "epochs": epochs,
        "per_label_runs": per_label,
        "environments": _environments(records),
    }
    label_machines(tables, records)
    tables["environments"] = _pool_environments(tables["environments"])
    return tables


def write_tables(
    record_paths: Iterable[str], outputs: Mapping[str, str], skip_invalid: bool = False
) -> dict[str, pd.DataFrame]:
    records, skipped = load_records(record_paths, skip_invalid)
    tables = build_tables(records)
    tables["skipped"] = pd.DataFrame(skipped, columns=["record", "reason"])
    for name, frame in tables.items():
        if name in outputs.keys():  # noqa: SIM118 - `in` on a Snakemake Namedlist tests values
            atomic_write_text(outputs[name], frame.to_csv(index=False))
    return tables


def read_table(path: str | os.PathLike) -> pd.DataFrame:
    """A table written by write_tables; an empty table has no columns in CSV."""
    try:
        return pd.read_csv(path)
    except pd.errors.EmptyDataError:
        return pd.DataFrame()


# ----------------------------------------------------------------------------- summaries


def baseline_device(runs: pd.DataFrame, requested: str | None = None) -> str | None:
    """The device speedups are relative to: as configured, else the first CPU device
    with ok runs (with several thread counts, the one with the most threads)."""
    if requested:
        return requested
    ok = runs[(runs["status"] == "ok") & (runs["backend"] == "cpu")]
    # The baseline is plain eager PyTorch; compiled CPU columns are compared with it.
    ok = ok[~ok["device"].astype(str).str.contains("-compile", regex=False)]
    if ok.empty:
        return None
    threads = ok.groupby("device")["torch_threads"].max().sort_values(ascending=False)
    return str(threads.index[0])


def throughput_summary(runs: pd.DataFrame, baseline: str | None) -> pd.DataFrame:
    """Median training/eval throughput over ok repeats per workload x device x batch size,
    and the speedup vs the baseline device (ratio of medians). With no baseline
    given, each workload is compared with its own CPU baseline (thread-count
    variants such as cpu-t4 differ between workloads)."""
    ok = runs[(runs["status"] == "ok") & runs["samples_per_s"].notna()]
    if ok.empty:
        return pd.DataFrame()
    if baseline is None:
        parts = []
        for workload in sorted(ok["workload"].unique()):
            of_workload = runs[runs["workload"] == workload]
            base = baseline_device(of_workload)
            if base is not None:
                parts.append(throughput_summary(of_workload, base))
        return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()
    grouped = ok.groupby(["workload", "device", "batch_size"])
    summary = grouped.agg(
        repeats=("rep", "count"),
        samples_per_s=("samples_per_s", "median"),
        samples_per_s_min=("samples_per_s", "min"),
        samples_per_s_max=("samples_per_s", "max"),
        eval_samples_per_s=("eval_samples_per_s", "median"),
        epoch_seconds=("epoch_seconds_median", "median"),
        step_cv=("step_cv", "median"),
        final_metric=("final_metric", "median"),
        primary_metric=("primary_metric", "first"),
        peak_memory_bytes=("memory_peak_bytes", "median"),
        mining_seconds=("mining_seconds", "median"),
    ).reset_index()
    if baseline is not None:
        base = summary[summary["device"] == baseline][
            ["workload", "batch_size", "samples_per_s", "eval_samples_per_s"]
        ]
        base = base.rename(
            columns={"samples_per_s": "_base_train", "eval_samples_per_s": "_base_eval"}
        )
        summary = summary.merge(base, on=["workload", "batch_size"], how="left")
        summary["speedup"] = summary["samples_per_s"] / summary["_base_train"]
        summary["eval_speedup"] = summary["eval_samples_per_s"] / summary["_base_eval"]
        summary = summary.drop(columns=["_base_train", "_base_eval"])
    return summary


def matmul_summary(matmul: pd.DataFrame, baseline: str | None) -> pd.DataFrame:
    if matmul.empty:
        return matmul
    summary = (
        matmul.groupby(["device", "batch_size", "n"])
        .agg(repeats=("rep", "count"), gflops=("gflops", "median"), median_s=("median_s", "median"))
        .reset_index()
    )
    if baseline is not None:
        base = summary[summary["device"] == baseline][["batch_size", "n", "median_s"]].rename(
            columns={"median_s": "_base"}
        )
        summary = summary.merge(base, on=["batch_size", "n"], how="left")
        summary["speedup"] = summary["_base"] / summary["median_s"]
        summary = summary.drop(columns=["_base"])
    return summary


def cells_needing_attention(runs: pd.DataFrame) -> pd.DataFrame:
    """Failed and unavailable cells, one row per (workload, device, status, class, reason)."""
    bad = runs[runs["status"] != "ok"].copy()
    if bad.empty:
        return bad
    bad["detail"] = bad["error_message"].fillna(bad["reason"]).fillna("")
    return (
        bad.groupby(["workload", "device", "status", "error_class", "detail"], dropna=False)
        .agg(
            cells=("rep", "count"),
            batch_sizes=("batch_size", lambda s: ", ".join(map(str, sorted(set(s))))),
        )
        .reset_index()
    )


def write_markdown_table(frame: pd.DataFrame, path: str | Path) -> None:
    atomic_write_text(path, frame.to_markdown(index=False) + "\n")


# ----------------------------------------------------------------------------- analysis tables

ANALYSIS_TABLES = (
    "speedup",
    "eval_speed",
    "stability",
    "per_label",
    "parity",
    "memory",
    "crossover",
    "collapse",
)


def analysis_tables(
    runs: pd.DataFrame,
    epochs: pd.DataFrame,
    per_label_runs: pd.DataFrame,
    matmul: pd.DataFrame,
    baseline: str | None = None,
) -> dict[str, pd.DataFrame]:
    """The published tables (speedup with CIs, stability, parity...), each workload
    against its own baseline device unless ``baseline`` names one."""
    from . import stats

    per_workload: dict[str, list[pd.DataFrame]] = {
        name: [] for name in ("speedup", "eval_speed", "per_label", "parity")
    }
    crossover = []
    for workload in sorted(runs["workload"].unique()) if not runs.empty else []:
        of_workload = runs[runs["workload"] == workload]
        base = baseline_device(of_workload, baseline)
        per_workload["speedup"].append(stats.speedup_table(of_workload, base))
        per_workload["eval_speed"].append(
            stats.speedup_table(of_workload, base, value="eval_samples_per_s")
        )
        per_workload["parity"].append(stats.parity_table(of_workload, base))
        if not per_label_runs.empty:
            rows = per_label_runs[per_label_runs["workload"] == workload]
            per_workload["per_label"].append(stats.per_label_table(rows, base))
        if not matmul.empty and workload in set(matmul["workload"]):
            crossover.append(
                stats.crossover_table(matmul[matmul["workload"] == workload], None, base)
            )
        elif of_workload["samples_per_s"].notna().any():
            crossover.append(stats.crossover_table(None, of_workload, base))

    def joined(frames: list[pd.DataFrame]) -> pd.DataFrame:
        frames = [f for f in frames if not f.empty]
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()

    return {
        "speedup": joined(per_workload["speedup"]),
        "eval_speed": joined(per_workload["eval_speed"]),
        "stability": stats.stability_table(runs, epochs if not epochs.empty else None),
        "per_label": joined(per_workload["per_label"]),
        "parity": joined(per_workload["parity"]),
        "memory": stats.memory_table(runs),
        "crossover": joined(crossover),
        "collapse": stats.collapse_table(runs),
    }
