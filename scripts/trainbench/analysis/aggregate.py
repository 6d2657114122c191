"""Records -> record tables (rule ``aggregate``): facts copied out of metrics.json
files, one row per record (``runs``), per record and epoch (``epochs``), per record
and label (``per_label_runs``), per record and matrix size (``matmul``), per record and
evaluation pass (``quality``, :mod:`.quality_rows`), and one row
per machine/software setup (``environments``). Merged results folders are read with
each record counted once (:mod:`.record_identity`: ``duplicates``) and kept apart by
hardware (:mod:`.hardware`), software (:mod:`.software`: ``software``) and setup
(:mod:`.setups`: ``setups``). Nothing here is a statistic: the
statistics layer (:mod:`trainbench.analysis.stats`) computes every published number from
these tables. docs/statistics.md lists the columns."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

import pandas as pd
from trainbench.analysis.hardware import label_machines, machine_devices
from trainbench.analysis.loss_tables import loss_tables, read_references
from trainbench.analysis.quality_rows import quality_rows
from trainbench.analysis.record_identity import (
    DUPLICATE_COLUMNS,
    count_once,
    results_folders,
)
from trainbench.analysis.record_view import RecordView, view_record
from trainbench.analysis.run_rows import RUN_COLUMNS, joined, run_row, viewed
from trainbench.analysis.setups import label_setups
from trainbench.analysis.software import NOTE_COLUMNS, software_labels
from trainbench.common.records import RecordError, atomic_write_text, read_record

SETUP_COLUMNS = ["workload", "setups", "split_into", "reason"]


def _cell_keys(r: RecordView) -> dict:
    return {
        "workload": r.cell.workload,
        "device": r.cell.device,
        "batch_size": r.cell.batch_size,
        "rep": r.cell.rep,
        "host": r.environment.host,
    }


def _numbers(prefix: str, values: Mapping | None) -> dict:
    """``{prefix + key: value}`` for the numeric (not boolean) values of ``values``."""
    return {
        f"{prefix}{key}": value
        for key, value in (values or {}).items()
        if isinstance(value, (int, float)) and not isinstance(value, bool)
    }


def epoch_rows(record: Mapping | RecordView, source: str) -> list[dict]:
    """One row per epoch of an ok training record; scalar eval metrics become eval_* columns."""
    r = viewed(record)
    if r.status != "ok" or not r.result.is_training:
        return []
    return [
        {
            **_cell_keys(r),
            "epoch": epoch["epoch"],
            "train_loss": epoch["train_loss"],
            "train_seconds": epoch["train_seconds"],
            "timed_seconds": epoch["timed_seconds"],
            "full_epoch": epoch.get("full_epoch"),
            "samples_per_s": epoch["samples_per_s"],
            "eval_seconds": epoch["eval_seconds"],
            "eval_cold": epoch.get("eval_cold"),
            "lr": epoch.get("lr"),
            **{
                f"memory_{k}": v
                for k, v in (epoch.get("memory") or {}).items()
                if k.endswith("_bytes")
            },
            "record": source,
            **_numbers("eval_", epoch.get("eval_metrics")),
            **_numbers("train_", epoch.get("train_metrics")),
        }
        for epoch in r.result.epochs
    ]


def per_label_rows(record: Mapping | RecordView, source: str) -> list[dict]:
    """One row per label at the best epoch (multi-label workloads)."""
    r = viewed(record)
    task = r.result.task
    if r.status != "ok" or not task.per_label:
        return []
    return [
        {**_cell_keys(r), "best_epoch": task.best_epoch, **row, "record": source}
        for row in task.per_label
    ]


def matmul_rows(record: Mapping | RecordView, source: str) -> list[dict]:
    """One row per matrix size of an ok microbenchmark record."""
    r = viewed(record)
    result = r.result
    if r.status != "ok" or result.kind != "microbenchmark":
        return []
    return [
        {
            "workload": r.cell.workload,
            "device": r.cell.device,
            "device_label": r.device_label or r.cell.device,
            "batch_size": r.cell.batch_size,
            "rep": r.cell.rep,
            "n": row["n"],
            "dtype": result.settings.dtype,
            "median_s": row["median_s"],
            "iqr_s": row["iqr_s"],
            "gflops": row["gflops"],
            "runs": row["runs"],
            "warmup_s": row["warmup_s"],
            "noisy": row.get("noisy"),
            "disturbed": result.host.disturbed if result.host else None,
            "torch_threads": result.settings.torch_threads,
            "host": r.environment.host,
            "record": source,
        }
        for row in result.sizes
    ]


def environment_row(record: Mapping | RecordView) -> dict:
    r = viewed(record)
    env = r.environment
    return {
        "host": env.host,
        "os": env.os,
        "cpu_model": env.cpu_model,
        "logical_cores": env.logical_cores,
        "gpu_models": joined(sorted(set(env.gpu_models or []))),
        "device": r.cell.device,
        "device_name": env.device.name,
        "python": env.python,
        "torch": env.torch_version,
        "packages": ", ".join(f"{k} {v}" for k, v in sorted(env.packages.items()) if k != "torch"),
        "git_commit": env.git_commit,
        "code": env.code_label,
        "slurm_job_id": env.slurm_job_id,
    }


INVALID_RECORD_FIX = (
    "Fix: `make rerun-failed` reruns the cell (a broken record counts as failed), or set "
    "aggregate.skip_invalid_records: true to leave it out (the report then lists it)."
)


def load_records(
    paths: Iterable[str | os.PathLike], skip_invalid: bool = False
) -> tuple[list[tuple[str, dict]], list[dict]]:
    """Read and validate every record. A bad file (truncated, corrupted, foreign or
    of another schema version) stops aggregation with the file named and the fix,
    or, with ``skip_invalid``, is left out and listed in the returned ``skipped``."""
    records, skipped = [], []
    for path in paths:
        try:
            records.append((str(path), read_record(path)))
        except RecordError as error:
            if not skip_invalid:
                raise RecordError(f"{error}. {INVALID_RECORD_FIX}") from None
            skipped.append({"record": str(path), "reason": str(error)})
    return records, skipped


def _environments(views: list[tuple[str, RecordView]]) -> pd.DataFrame:
    """One row per machine, device and software setup (not per record): the Slurm
    jobs that ran on it are listed together."""
    rows = [{**environment_row(r), "record": src} for src, r in views if r.status != "unavailable"]
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
        .agg(lambda ids: joined(sorted(set(ids.dropna()), key=lambda x: (len(x), x))))
        .reset_index()
        .rename(columns={"slurm_job_id": "slurm_job_ids"})
    )
    return pooled.sort_values(["host", "device"]).reset_index(drop=True)


def build_tables(
    records: list[tuple[str, dict]],
    own: set[str] | None = None,
    folders: Mapping[str, str] | None = None,
    duplicates: list[dict] | None = None,
) -> dict[str, pd.DataFrame]:
    """The record tables of ``records``; ``own``: the paths of this run's own records
    (the rest came from aggregate.include_results); ``folders``: each record's results
    folder ("" own; :func:`.record_identity.results_folders` when not given);
    ``duplicates``: the notes of records already counted once
    (:func:`.record_identity.count_once`; None: they are counted here)."""
    if duplicates is None:
        counted = count_once(records, own)
        records, duplicates = counted.records, counted.notes
    if folders is None:
        folders = results_folders([src for src, _ in records], own)
    views = [(src, view_record(r)) for src, r in records]  # each record viewed once
    runs = pd.DataFrame([run_row(r, src) for src, r in views], columns=RUN_COLUMNS)
    matmul = pd.DataFrame([row for src, r in views for row in matmul_rows(r, src)])
    epochs = pd.DataFrame([row for src, r in views for row in epoch_rows(r, src)])
    per_label = pd.DataFrame([row for src, r in views for row in per_label_rows(r, src)])
    quality = pd.DataFrame([row for src, r in views for row in quality_rows(r, src)])
    runs = runs.sort_values(["workload", "device", "batch_size", "rep"]).reset_index(drop=True)
    tables = {
        "runs": runs,
        "matmul": matmul,
        "epochs": epochs,
        "per_label_runs": per_label,
        "quality": quality,
        "environments": _environments(views),
    }
    runs["results_folder"] = runs["record"].map(folders).fillna("")
    software, software_notes = software_labels(records, machine_devices(records), folders)
    label_machines(tables, records, software)
    notes = label_setups(tables, records, own)
    tables["setups"] = pd.DataFrame(notes, columns=SETUP_COLUMNS)
    tables["software"] = pd.DataFrame(software_notes, columns=NOTE_COLUMNS)
    tables["duplicates"] = pd.DataFrame(duplicates, columns=DUPLICATE_COLUMNS)
    tables["environments"] = _pool_environments(tables["environments"])
    return tables


def write_tables(
    record_paths: Iterable[str],
    outputs: Mapping[str, str],
    skip_invalid: bool = False,
    own: Iterable[str] | None = None,
    references: Iterable[str] = (),
    include_results: Iterable[str] = (),
) -> dict[str, pd.DataFrame]:
    """Read the records (and the float64 references' records), count each once, and
    write every record table named in ``outputs``; ``include_results``: the included
    folders as configured (they name the records' ``results_folder``)."""
    records, skipped = load_records(record_paths, skip_invalid)
    own_paths = {str(p) for p in own} if own is not None else None
    counted = count_once(records, own_paths)
    records = counted.records
    folders = results_folders([src for src, _ in records], own_paths, include_results)
    tables = build_tables(records, own_paths, folders, counted.notes)
    tables["skipped"] = pd.DataFrame(skipped, columns=["record", "reason"])
    tables.update(loss_tables(records, read_references(references)))
    for name, frame in tables.items():
        if name in outputs.keys():  # noqa: SIM118 - `in` on a Snakemake Namedlist tests values
            atomic_write_text(outputs[name], frame.to_csv(index=False))
    return tables
