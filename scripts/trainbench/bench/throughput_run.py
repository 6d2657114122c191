"""Is the harness as fast as a careful hand-written loop, and faster than the
Hugging Face Trainer? One process, one device, the same model, data and batch size.

Harness against bare loop (and the bare loop against itself, the A/A floor): the
two interleaved in short blocks inside one process (:mod:`.interleaved`), every round a
palindrome of blocks. Other variants (the HF Trainer, compiled or re-configured
variants) run whole, in rounds of separate runs whose order rotates so that no variant
always runs first or last, each paired with a whole harness run of the same round
(method ``runs``):

- ``harness``: the workload's own cell through :func:`trainbench.measure.training.run_training`.
  ``harness:compile`` and ``harness:compile-<mode>`` run the torch.compile columns.
- ``bare``: the same parts in a bare best-practice loop; ``bare:compile-<mode>``
  wraps the model in ``torch.compile`` first.
- ``hf_trainer`` (text_multilabel only): ``transformers.Trainer`` on the same model
  and data.

(The runners are in :mod:`.throughput_loops`, the suite file in
:mod:`.throughput_suite`, the summary and targets in :mod:`.throughput_summary`, the
Markdown in :mod:`.throughput_report`.)

In the runs method every variant times the same number of steps after the same number
of warm-up steps; throughput = timed samples / synchronized wall seconds.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from trainbench import workloads
from trainbench.bench.interleaved import METHOD as INTERLEAVED
from trainbench.bench.interleaved import InterleavedPlan, measure_interleaved
from trainbench.bench.machine import machine_facts, pin_process
from trainbench.bench.throughput_loops import measure_bare, measure_harness, measure_hf_trainer
from trainbench.bench.throughput_suite import Variant, cell_spec, trainbench_config
from trainbench.bench.throughput_summary import summarize
from trainbench.common.records import atomic_write_json


def run_suite(
    suite: dict,
    out_json: str | Path,
    only: list[str] | None = None,
    log: Callable[[str], None] = print,
) -> dict:
    """Measure every case of ``suite``; rewrite ``out_json`` after each measurement
    (atomically), so an interrupted run keeps what it measured."""
    backend = suite["device"]
    affinity = pin_process(suite.get("cpu_affinity"))
    results = {
        "suite": suite["name"],
        "description": suite.get("description", ""),
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "device": backend,
        "machine": machine_facts(backend),
        "rounds": suite["rounds"],
        "run_rounds": suite["run_rounds"],
        "block_seconds": suite["block_seconds"],
        "cpu_affinity": affinity,
        "measurements": [],
    }
    chosen = selected_cases(only)
    with tempfile.TemporaryDirectory(prefix="trainbench-bench-") as scratch:
        for workload, case in suite["cases"].items():
            if chosen is not None and workload not in chosen:
                continue
            config = trainbench_config(suite, workload)
            data = str(Path(scratch) / workload)
            module = workloads.get(workload)
            module.prepare_data(config["workloads"][workload], data, config["seed"])
            whole = _whole_run_variants(case["variants"])
            if whole:
                results["measurements"].append(_process_warmup(config, workload, case, data, log))
            for batch_size in case["batch_sizes"]:
                if chosen is not None and chosen[workload] and batch_size not in chosen[workload]:
                    continue
                for row in _measure_case(suite, case, config, workload, batch_size, data):
                    log(_row_line(row))
                    results["measurements"].append(row)
                    results["summary"] = summarize(results["measurements"])
                    atomic_write_json(out_json, results)
    return results


def selected_cases(only: list[str] | None) -> dict[str, set[int]] | None:
    """``--only`` as {workload: batch sizes} (an empty set: all of the workload's);
    None: every case. An entry is ``WORKLOAD`` or ``WORKLOAD:BATCH_SIZE``."""
    if not only:
        return None
    chosen: dict[str, set[int]] = {}
    for entry in only:
        workload, _, batch = entry.partition(":")
        sizes = chosen.setdefault(workload, set())
        if batch:
            sizes.add(int(batch))
    return chosen


def _whole_run_variants(variants: list[Variant]) -> list[Variant]:
    """The variants measured in whole runs: all but the plain harness and bare loop
    (interleaved), with the harness as their pair."""
    others = [v for v in variants if v not in (Variant("harness"), Variant("bare"))]
    return [Variant("harness"), *others] if others else []


def _measure_case(
    suite: dict, case: dict, config: dict, workload: str, batch_size: int, data: str
) -> Iterator[dict]:
    """One batch size: the interleaved harness/bare/A-A blocks, then the whole runs."""
    variants = case["variants"]
    if Variant("harness") in variants and Variant("bare") in variants:
        plan = InterleavedPlan(
            rounds=int(case.get("rounds", suite["rounds"])),
            block_seconds=float(case.get("block_seconds", suite["block_seconds"])),
        )
        spec = cell_spec(config, workload, Variant("harness"), batch_size, data)
        try:
            yield from measure_interleaved(spec, plan)
        except Exception as exc:  # a case that fails is a result
            yield {"workload": workload, "batch_size": batch_size, "variant": "harness",
                   "round": 0, "status": "failed", "method": INTERLEAVED,
                   "error": _error_text(exc)}  # fmt: skip
    whole = _whole_run_variants(variants)
    if whole:
        rounds = int(case.get("run_rounds", suite["run_rounds"]))
        yield from _measure_batch_size(config, workload, whole, batch_size, data, rounds)


def _error_text(exc: Exception) -> str:
    return f"{type(exc).__name__}: {str(exc)[:2000]}"


def _process_warmup(
    config: dict, workload: str, case: dict, data: str, log: Callable[[str], None]
) -> dict:
    """The process's first run on a device pays one-time costs (CUDA context, cuBLAS
    handles, allocator growth, lazy imports): run one harness cell, keep it apart
    (round -1)."""
    t0 = time.perf_counter()
    first = case["batch_sizes"][0]
    try:
        warm = measure_harness(cell_spec(config, workload, Variant("harness"), first, data))
        status, note = "process_warmup", f"{warm['samples_per_s']:.1f} samples/s"
    except Exception as exc:  # recorded; the rounds record their own failures
        warm = {"error": _error_text(exc)}
        status, note = "failed", warm["error"][:300]
    row = {
        "workload": workload,
        "batch_size": first,
        "variant": "harness",
        "round": -1,
        "status": status,
        "seconds_total": time.perf_counter() - t0,
        **warm,
    }
    log(f"{workload}: process warm-up run (not used): {note}")
    return row


def _measure_batch_size(
    config: dict, workload: str, variants: list[Variant], batch_size: int, data: str, rounds: int
) -> Iterator[dict]:
    """Every round of every variant at one batch size: one results row each, yielded
    as soon as it is measured."""
    shape: dict = {}
    for round_index in range(rounds):
        # Rotate the order each round: no variant always goes first.
        shift = round_index % len(variants)
        for variant in variants[shift:] + variants[:shift]:
            spec = cell_spec(config, workload, variant, batch_size, data)
            t0 = time.perf_counter()
            try:
                measured = _measure_variant(variant, spec, shape)
                status = "ok"
            except Exception as exc:  # a variant that fails is a result
                measured = {"error": _error_text(exc)}
                status = "failed"
            yield {
                "workload": workload,
                "batch_size": batch_size,
                "variant": variant.name,
                "round": round_index,
                "status": status,
                "method": "runs",
                "seconds_total": time.perf_counter() - t0,
                # Other processes on the machine disturb host-bound steps:
                # the 1-minute load average after the run says if any ran.
                "load_average_1min": os.getloadavg()[0],
                **measured,
            }


def _row_line(row: dict) -> str:
    """The log line of one measured row."""
    return f"{row['workload']} bs{row['batch_size']} {row['variant']} round {row['round']}: " + (
        row["error"][:300] if row["status"] == "failed" else f"{row['samples_per_s']:.1f} samples/s"
    )


def _measure_variant(variant: Variant, spec: dict, shape: dict) -> dict:
    """The harness runs first in its shape (warm-up and timed steps); the others copy it."""
    if variant.runner == "harness":
        measured = measure_harness(spec)
        shape.setdefault("warmup", measured["warmup_steps"])
        shape.setdefault("timed", measured["steps"])
        return measured
    if not shape:
        shape.update(harness_shape(spec))
    if variant.runner == "bare":
        return measure_bare(spec, shape["warmup"], shape["timed"], variant.compile)
    return measure_hf_trainer(spec, shape["warmup"], shape["timed"])


def harness_shape(spec: dict) -> dict:
    """Warm-up and timed steps the harness runs for this spec (without running it)."""
    settings = spec["workload_settings"]
    ctx_free_len = _train_batches(spec)
    per_epoch = min(ctx_free_len, int(settings.get("max_steps_per_epoch") or ctx_free_len))
    total = per_epoch * int(settings["epochs"])
    warmup = int(settings["warmup_steps"])
    return {"warmup": warmup, "timed": total - warmup}


def _train_batches(spec: dict) -> int:
    meta = json.loads((Path(spec["data_path"]) / "meta.json").read_text())
    n_train = int(meta.get("n_train") or 0)
    return n_train // int(spec["cell"]["batch_size"])
