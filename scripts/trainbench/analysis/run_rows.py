"""One record as its ``runs.csv`` row: every column the statistics read, flattened
from the record's sections (speed, energy, host, task, verification, canary, wall
time, start, the diagnostic pass, evaluation parity)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from trainbench.analysis.record_view import (
    Energy,
    Environment,
    Host,
    RecordView,
    Result,
    Timed,
    view_record,
)
from trainbench.common.precision_classes import tf32_reaches
from trainbench.common.vocabulary import PHASES

# Energy over the timed training regions (trainbench.measure.trackers.energy): see _energy_facts.
ENERGY_DOMAINS = ("gpu", "cpu", "dram", "ane")
ENERGY_COLUMNS = [
    "energy_status", "energy_reason", "energy_window_seconds", "energy_regions",
    "energy_samples", "energy_joules", "joules_per_sample", "samples_per_joule",
    "energy_mean_watts", "energy_domains",
    *(f"energy_{d}_{x}" for d in ENERGY_DOMAINS for x in ("joules", "status")),
    "eval_energy_joules", "eval_energy_status", "idle_watts", "gpu_temp_before_c",
    "gpu_temp_after_c", "gpu_power_limit_before_w", "gpu_power_limit_after_w",
]  # fmt: skip
# Where the final attempt's wall time went (the record's wall_time): see _wall_facts.
WALL_COLUMNS = [
    "wall_attempt_seconds", "wall_measurement_seconds", "wall_outside_measurement_seconds",
    "wall_measurement_share", "wall_interrupted", *(f"wall_{p}_seconds" for p in PHASES),
    "start_method", "start_server", "start_server_startup_seconds",
]  # fmt: skip
# The diagnostic pass after the timed window (trainbench.measure.step_breakdown): medians per step.
BREAKDOWN_COLUMNS = [
    "bd_steps", "bd_seconds", "bd_data_wait_s", "bd_host_issue_s", "bd_step_s",
    "bd_device_s", "bd_kernel_s", "bd_cpu_s", "bd_threads", "bd_error",
]  # fmt: skip
# The final weights evaluated on the device and by the CPU in float64 and float32
# (trainbench.measure.eval_parity): the worst output's error, floor, envelope and ratio.
EVAL_PARITY_COLUMNS = [
    "eval_parity_status", "eval_parity_precision", "eval_parity_precision_reason",
    "eval_parity_error", "eval_parity_floor", "eval_parity_envelope", "eval_parity_error_ratio",
    "eval_parity_decided_by", "eval_parity_output", "eval_parity_metric_difference",
    "eval_parity_reference", "eval_parity_seconds", "eval_parity_floor_seconds",
    "eval_parity_message",
]  # fmt: skip
# What decides speed besides the hardware, and where the record came from (merged results,
# trainbench.analysis.software): torch (version string), measurement_code (the measuring
# code's 12-character behaviour digest; empty in older records), software (the part of the
# device label that splits records of one machine's device by software, "torch 2.5.1";
# empty when nothing splits), machine_device (the device label without that part: what a
# comparison holds fixed), results_folder ("" for this run's own records, else the
# included folder as configured), started_unix (the first attempt's start).
SOFTWARE_COLUMNS = [
    "torch", "measurement_code", "software", "machine_device", "results_folder", "started_unix",
]  # fmt: skip
RUN_COLUMNS = [
    "workload", "device", "device_label", "backend", "batch_size", "rep", "status",
    "error_class", "error_message", "reason", "attempts", "failed_attempts",
    "samples_per_s", "window_steps", "window_samples", "window_seconds", "short_window",
    "steady_state", "steady_start_step", "window_phase", "warmup_steps", "warmup_seconds", "first_step_seconds",
    "step_p50_s", "step_p90_s", "step_cv", "step_robust_cv",
    "outlier_steps", "outlier_steps_severe", "outlier_seconds_share",
    "stall_steps", "stall_seconds", "stall_seconds_share", "stall_largest_share", "stalls_excluded",
    "samples_per_s_all_steps", "data_wait_per_step_s",
    "eval_samples_per_s", "eval_warm_seconds", "eval_warm_passes", "eval_cold_seconds",
    "eval_short_window", "epoch_seconds_median", "full_epochs",
    "other_cpu_cores", "cell_cpu_others_share", "disturbed_reason", "cpu_pinned", "load_avg_start",
    "load_avg_end", "disturbed", "logical_cores",
    "performance_cores", "efficiency_cores", "power_source", "battery_percent", "low_power_mode",
    "primary_metric", "higher_is_better", "final_metric", "best_metric", "best_epoch", "final_loss",
    "memory_initial_bytes", "memory_peak_bytes", "memory_method", "memory_limit_bytes",
    *ENERGY_COLUMNS,
    "torch_threads", "autocast_dtype", "tf32_matmul", "tf32_cudnn", "tf32_override", "tf32_reach",
    "float32_matmul_precision", "grad_scaler", "all_on_device", "autocast_active", "cpu_fallback_ops",
    "placement_parameters", "placement_buffers", "placement_optimizer_state", "placement_batch",
    "autocast_requested", "autocast_output_dtype",
    "numerics_status", "numerics_failed_ops", "numerics_max_rel_error", "numerics_max_error_ratio",
    "numerics_first_failed_error", "numerics_first_failed_tolerance", "numerics_message",
    "model_name", "parameters", "gradient_accumulation", "effective_batch_size", "epochs",
    "learning_rate", "max_length", "optimizer", "micro_f1", "macro_f1", "mining_seconds",
    "host", "cpu_model", "device_name", "slurm_job_id", "torch_version", "git_commit", "code", "config_hash",
    "run_seed", *WALL_COLUMNS, *BREAKDOWN_COLUMNS, *EVAL_PARITY_COLUMNS,
    *SOFTWARE_COLUMNS, "record",
]  # fmt: skip


def _load_avg(value) -> float | None:
    return value[0] if isinstance(value, list) and value else None


def phase_text(phase) -> str | None:
    """The schedule phase a window is held to, in words ("epochs 2-3: ..."); None when
    the workload's work per step does not change by epoch."""
    if not phase:
        return None
    first, last = phase.get("first_epoch"), phase.get("last_epoch")
    epochs = f"epoch {first}" if first == last else f"epochs {first}-{last}"
    return f"{epochs}: {phase.get('phase')}"


def _stall_facts(timed: Timed) -> dict:
    """The window's stalls (docs/statistics.md §1, "A stall cannot set a throughput"):
    empty for a record written before the rule."""
    stalls = timed.stalls
    return {
        "stall_steps": stalls.count if stalls else None,
        "stall_seconds": stalls.seconds if stalls else None,
        "stall_seconds_share": stalls.share if stalls else None,
        "stall_largest_share": stalls.largest_share if stalls else None,
        "stalls_excluded": stalls.excluded if stalls else None,
        # a record before the rule: samples_per_s is every step's
        "samples_per_s_all_steps": timed.samples_per_s_all_steps if stalls else timed.samples_per_s,
    }


def _speed_facts(result: Result) -> dict:
    """The measurement window of a training result (docs/statistics.md section 1)."""
    timed, steady, outliers = result.timed, result.steady_state, result.outliers
    full = [e["timed_seconds"] for e in result.epochs if e.get("full_epoch")]
    return {
        "samples_per_s": timed.samples_per_s,
        "window_steps": timed.steps,
        "window_samples": timed.samples,
        "window_seconds": timed.seconds,
        "short_window": timed.short_window,
        "steady_state": steady.classification,
        "steady_start_step": steady.start_step,
        "window_phase": phase_text(result.window_phase),
        "warmup_steps": result.settings.warmup_steps,
        "warmup_seconds": result.warmup.seconds,
        "first_step_seconds": result.warmup.first_step_seconds,
        "step_p50_s": result.step_latency_s.p50,
        "step_p90_s": result.step_latency_s.p90,
        "step_cv": result.step_latency_s.cv,
        "step_robust_cv": result.step_latency_s.robust_cv,
        "outlier_steps": (outliers.high_mild or 0) + (outliers.high_severe or 0)
        if outliers
        else None,
        "outlier_steps_severe": outliers.high_severe if outliers else None,
        "outlier_seconds_share": outliers.high_seconds_share if outliers else None,
        **_stall_facts(timed),
        "data_wait_per_step_s": result.data_wait.per_step_mean_s,
        # Below the minimum window an evaluation speed is not measured (records before
        # that rule still carry the short window's value).
        "eval_samples_per_s": None if result.eval.short_window else result.eval.samples_per_s,
        "eval_warm_seconds": result.eval.warm.seconds,
        "eval_warm_passes": result.eval.warm.passes,
        "eval_cold_seconds": result.eval.cold_seconds,
        "eval_short_window": result.eval.short_window,
        "epoch_seconds_median": float(np.median(full)) if full else None,
        "full_epochs": len(full) if result.epochs else None,
    }


def _energy_facts(energy: Energy | None) -> dict:
    """The record's ``energy`` (training results): energy_status ok / short window /
    unavailable and energy_reason (why, or which domains were not measured); the window
    (seconds, regions, samples of the timed training regions, step 0 excluded);
    energy_joules, the total of the readable domains, and per sample / samples per
    joule / mean watts from it; energy_domains, the domains in the total ("gpu+cpu");
    per domain its joules and status (absent: not a domain of this device); the eval
    regions' total and status; idle_watts (all readable domains, before step 0); the
    GPU's temperature and enforced power limit before and after (NVML)."""
    if energy is None:
        return {}
    facts = {
        "energy_status": energy.status,
        "energy_reason": energy.reason,
        "energy_window_seconds": energy.window_seconds,
        "energy_regions": energy.regions,
        "energy_samples": energy.samples,
        "energy_joules": energy.total_joules,
        "joules_per_sample": energy.joules_per_sample,
        "samples_per_joule": energy.samples_per_joule,
        "energy_mean_watts": energy.mean_watts,
        "energy_domains": energy.measured or None,
        "eval_energy_joules": energy.eval.total_joules,
        "eval_energy_status": energy.eval.status,
        "idle_watts": energy.idle.total_watts,
    }
    for name, domain in energy.domains.items():
        facts[f"energy_{name}_joules"] = domain.get("joules")
        facts[f"energy_{name}_status"] = domain.get("status")
    for when in ("before", "after"):
        state = getattr(energy.gpu_state, when)
        facts[f"gpu_temp_{when}_c"] = state.temperature_c
        facts[f"gpu_power_limit_{when}_w"] = state.power_limit_w
    return facts


def _host_facts(host: Host | None) -> dict:
    if host is None:
        return {"disturbed": None}
    return {
        "other_cpu_cores": host.other_cpu_cores,
        "cell_cpu_others_share": host.cell_cpu_others_share,
        "disturbed_reason": host.disturbed_reason,
        "cpu_pinned": len(host.cell_cpus) < host.logical_cores
        if host.cell_cpus and host.logical_cores
        else None,
        "load_avg_start": _load_avg(host.load_avg_start),
        "load_avg_end": _load_avg(host.load_avg_end),
        "disturbed": host.disturbed,
        "logical_cores": host.logical_cores,
    }


def _machine_state_facts(env: Environment) -> dict:
    """The Mac's performance and efficiency cores, and the power the machine ran on
    (source, battery charge, Low Power Mode) when the record was written."""
    return {
        "performance_cores": env.cpu_core_levels.performance_cores,
        "efficiency_cores": env.cpu_core_levels.efficiency_cores,
        "power_source": env.power.source,
        "battery_percent": env.power.battery_percent,
        "low_power_mode": env.power.low_power_mode,
    }


def _verification_facts(verification: Mapping, settings: Mapping) -> dict:
    amp = settings.get("amp") or {}
    return {
        "torch_threads": settings.get("torch_threads"),
        "autocast_dtype": amp.get("dtype"),
        "tf32_matmul": settings.get("tf32_matmul"),
        "tf32_cudnn": settings.get("tf32_cudnn"),
        "tf32_override": settings.get("tf32_override"),
        # TF32 reaches the model (trainbench.measure.tf32_reach): True, False, None undecided
        "tf32_reach": tf32_reaches(settings),
        "float32_matmul_precision": settings.get("float32_matmul_precision"),
        "grad_scaler": amp.get("scaler"),
        "all_on_device": verification.get("all_on_device"),
        "autocast_active": verification.get("autocast_active"),
        "cpu_fallback_ops": ";".join(verification.get("cpu_fallback_ops") or []),
        "placement_parameters": joined(verification.get("parameters")),
        "placement_buffers": joined(verification.get("buffers")),
        "placement_optimizer_state": joined(verification.get("optimizer_state")),
        "placement_batch": joined(
            [f"{k}={v}" for k, v in sorted((verification.get("batch") or {}).items())]
        ),
        "autocast_requested": verification.get("autocast_requested"),
        "autocast_output_dtype": verification.get("autocast_output_dtype"),
    }


def _numerics_facts(numerics: Mapping | None) -> dict:
    """The numerical canary (trainbench.measure.canary): status (pass, fail, error; None
    when the record has no canary), the failed ops, the largest relative error over
    the ops and the largest error/tolerance ratio (infinite for a non-finite output),
    the first failed op's error and tolerance, and the message of an error."""
    if not numerics:
        return {}
    ops = numerics.get("ops") or {}
    errors, ratios = [], []
    for op in ops.values():
        error = _op_error(op)
        if error is not None:
            errors.append(error)
            if op.get("tolerance"):
                ratios.append(error / op["tolerance"])
    failed = list(numerics.get("failed_ops") or [])
    first = ops.get(failed[0], {}) if failed else {}
    return {
        "numerics_status": numerics.get("status"),
        "numerics_failed_ops": ";".join(failed) or None,
        "numerics_max_rel_error": max(errors) if errors else None,
        "numerics_max_error_ratio": max(ratios) if ratios else None,
        "numerics_first_failed_error": _op_error(first) if first else None,
        "numerics_first_failed_tolerance": first.get("tolerance"),
        "numerics_message": numerics.get("message"),
    }


def _op_error(op: Mapping) -> float | None:
    """An op's relative error; infinity where its output was not finite."""
    if op.get("finite") is False:
        return float("inf")
    return op.get("max_rel_error")


def _wall_facts(wall: Mapping) -> dict:
    """The record's ``wall_time`` (trainbench.measure.wall_time): the final attempt's duration,
    its measurement and the rest, the phase it was interrupted in, seconds per phase
    (absent: a phase not reached before a failure; records older than the breakdown
    have none)."""
    keys = ("attempt_seconds", "measurement_seconds", "outside_measurement_seconds",
            "measurement_share", "interrupted")  # fmt: skip
    facts = {f"wall_{k}": wall.get(k) for k in keys}
    return facts | {f"wall_{p}_seconds": v for p, v in (wall.get("phases") or {}).items()}


def _breakdown_facts(breakdown: Mapping | None) -> dict:
    """The diagnostic pass's medians (trainbench.measure.step_breakdown); absent: none ran."""
    b = breakdown or {}
    keys = {"bd_steps": "steps", "bd_seconds": "seconds", "bd_data_wait_s": "data_wait_s",
            "bd_host_issue_s": "host_issue_s", "bd_step_s": "step_s", "bd_device_s": "device_s",
            "bd_kernel_s": "kernel_s", "bd_cpu_s": "cpu_s", "bd_threads": "torch_threads",
            "bd_error": "error"}  # fmt: skip
    return {column: b.get(key) for column, key in keys.items()}


def _eval_parity_facts(parity: Mapping | None) -> dict:
    """The evaluation comparison (trainbench.measure.eval_parity); absent: none ran."""
    p = parity or {}
    keys = {"eval_parity_status": "status", "eval_parity_precision": "precision",
            "eval_parity_error": "device_error", "eval_parity_floor": "floor",
            "eval_parity_envelope": "envelope", "eval_parity_error_ratio": "ratio",
            "eval_parity_decided_by": "decided_by", "eval_parity_output": "worst_output",
            "eval_parity_metric_difference": "metric_difference",
            "eval_parity_reference": "reference", "eval_parity_seconds": "seconds",
            "eval_parity_floor_seconds": "floor_seconds"}  # fmt: skip
    facts = {column: p.get(key) for column, key in keys.items()}
    facts["eval_parity_precision_reason"] = "; ".join(p.get("precision_reasons") or []) or None
    problems = [*(p.get("mismatched") or []), *([p["error"]] if p.get("error") else [])]
    facts["eval_parity_message"] = "; ".join(problems)[:500] or None
    return facts


def _start_facts(attempts: list) -> dict:
    """How the final attempt's child started (trainbench.launch.fork_server): ``fork_server``
    or ``spawn``; the server (host:pid:start time, one per run and environment) and its
    own start-up seconds (the imports its children did not pay)."""
    start = (attempts[-1].get("start") if attempts else None) or {}
    server = start.get("server") or {}
    key = f"{server.get('pid')}:{server.get('started_unix')}" if server else None
    return {
        "start_method": start.get("method"),
        "start_server": key,
        "start_server_startup_seconds": server.get("startup_s"),
    }


def _task_facts(result: Result) -> dict:
    task, settings, memory = result.task, result.settings, result.memory
    return {
        "primary_metric": task.primary_metric,
        "higher_is_better": task.higher_is_better,
        "final_metric": task.final,
        "best_metric": task.best,
        "best_epoch": task.best_epoch,
        "final_loss": task.final_loss,
        "micro_f1": task.micro_f1,
        "macro_f1": task.macro_f1,
        "memory_initial_bytes": memory.device.initial_bytes,
        "memory_peak_bytes": memory.device.peak_bytes,
        "memory_method": memory.device.method,
        "memory_limit_bytes": memory.limit_bytes,
        "model_name": result.model.name,
        "parameters": result.model.parameters,
        "gradient_accumulation": settings.gradient_accumulation,
        "effective_batch_size": settings.effective_batch_size,
        "epochs": settings.epochs,
        "learning_rate": settings.optimizer_options.lr,
        "max_length": settings.max_length,
        "optimizer": settings.optimizer,
        "mining_seconds": result.mining.seconds,
    }


def viewed(record: Mapping | RecordView) -> RecordView:
    """The typed view of a record, or the view itself (build_tables views each once)."""
    return record if isinstance(record, RecordView) else view_record(record)


def run_row(record: Mapping | RecordView, source: str) -> dict:
    """The ``runs`` row of one record (every status)."""
    r = viewed(record)
    result, env = r.result, r.environment
    row = {
        "workload": r.cell.workload,
        "device": r.cell.device,
        "device_label": r.device_label or r.cell.device,
        "backend": r.backend,
        "batch_size": r.cell.batch_size,
        "rep": r.cell.rep,
        "status": r.status,
        "error_class": r.error.class_,
        "error_message": r.error.message,
        "reason": r.reason,
        "attempts": len(r.attempts),
        "failed_attempts": sum(a.get("status") == "failed" for a in r.attempts),
        **(_speed_facts(result) if result.is_training else {}),
        **(_energy_facts(result.energy) if result.is_training else {}),
        **_host_facts(result.host),
        **_machine_state_facts(env),
        **_task_facts(result),
        **_verification_facts(result.verification, r.settings_in_force),
        **_numerics_facts(r.numerics),
        "host": env.host,
        "cpu_model": env.cpu_model,
        "device_name": env.device.name,
        "slurm_job_id": env.slurm_job_id,
        "torch_version": env.torch_version,
        "git_commit": env.git_commit,
        "code": env.code_label,
        "config_hash": env.config_hash,
        "run_seed": env.run_seed,
        "torch": env.torch_version,
        "measurement_code": env.behaviour,
        "started_unix": (r.attempts[0].get("started_unix") if r.attempts else None),
        **_wall_facts(r.wall_time),
        **_start_facts(r.attempts),
        **(_breakdown_facts(result.step_breakdown) if result.is_training else {}),
        **(_eval_parity_facts(result.eval_parity) if result.is_training else {}),
        "record": source,
    }
    return {column: row.get(column) for column in RUN_COLUMNS}


def joined(values) -> str | None:
    return ";".join(map(str, values)) if values else None
