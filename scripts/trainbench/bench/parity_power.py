"""Does the parity rule catch a device whose math is silently wrong, and how often
does it fail a right one? (``benchmarks/parity_power.py``.)

For every training workload of a config (default ``config.yaml``), with its workload
settings unchanged (epochs, data, model, batch sizes), on this machine's CPU:

* **baseline**: device ``cpu-t1`` (one thread), base seed :data:`BASELINE_SEED` (0),
  :data:`REPEATS` repeats (run seeds 0, 1, 2);
* **device column**: ``cpu-t2`` (two threads; ``--device-threads 1`` runs it as
  ``cpu-t1`` too), base seed :data:`DEVICE_SEED` (100), the same number of repeats,
  once clean and once per error size with the test fault ``silent_numeric_error``
  (:mod:`trainbench.numeric_fault`) of that size. The thread count changes numbers
  at most by the order of floating-point sums (image_cnn's convolutions: the same
  seed gives other final values at 1 and 2 threads; other workloads the same bits),
  far less than a seed does; on a busy 2-core machine two-thread cells run several
  times slower, and two one-thread cells side by side (``--workers 2``) twice as fast.

The device column uses other seeds than the baseline, so that a clean pair differs
by seed-to-seed variation — more than a real device with the baseline's seeds would
(its runs differ from the CPU's by rounding, amplified by training): the false-alarm
rate measured here is for the harder case. With the same seeds and thread count the
two columns would be bit-identical, which the rule reports as ``identical``. Every run
is a real cell through the launcher (a fresh child process, the canary first), as
``snakemake`` runs it.

Then the parity rule (:func:`trainbench.stats.parity.parity_table`, with the config's
``report.parity_margins``) is applied to

* each faulted column against the baseline: **detected** when the outcome is
  ``fail``; ``pass`` is a miss (the wrong device shown equivalent), ``insufficient
  data`` an inconclusive interval;
* the clean column against the baseline (seed 0 vs seed 100): a ``fail`` is a false
  alarm;
* every split of the 2 × :data:`REPEATS` clean runs into two groups of
  :data:`REPEATS` (10 splits for 3 repeats): the false-alarm rate over splits (the
  splits share runs: an indication, not independent trials).

Results: ``benchmarks/results/parity-power-<date>.json`` (every run's final metric,
loss and canary status, every comparison with its rule text; rewritten after each
run, so an interrupted benchmark keeps what it ran and ``--resume`` continues it) and
the Markdown table beside it.
"""

from __future__ import annotations

import copy
import datetime as dt
import hashlib
import itertools
import math
import multiprocessing
import os
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from .. import config as tbconfig
from .. import workloads
from ..numeric_fault import FAULT
from ..records import atomic_write_json
from ..stats.parity import FAIL, PASS, Margins, margins_for, parity_table
from ..tables import compact

SIZES = (0.01, 0.03, 0.1, 0.3)
REPEATS = 3
BASELINE_DEVICE, DEVICE = "cpu-t1", "cpu-t2"
BASELINE_SEED, DEVICE_SEED = 0, 100
ROLES = ("baseline", "clean", "fault")
RUN_FIELDS = ("status", "final_metric", "final_loss", "primary_metric", "numerics_status",
              "numerics_failed_ops", "error_class", "error_message")  # fmt: skip


@dataclass(frozen=True, order=True)
class Job:
    """One run: the baseline, the clean device column, or the faulted one at ``size``."""

    workload: str
    batch_size: int
    role: str
    size: float = 0.0
    rep: int = 0

    def device(self, column: str = DEVICE) -> str:
        """The cell's device id: the baseline's, or ``column`` (the device column's)."""
        return BASELINE_DEVICE if self.role == "baseline" else column

    @property
    def seed(self) -> int:
        return BASELINE_SEED if self.role == "baseline" else DEVICE_SEED

    @property
    def name(self) -> str:
        what = f"fault{compact(self.size)}" if self.role == "fault" else self.role
        return f"{self.workload}-bs{self.batch_size}-{what}-rep{self.rep}"


# ----------------------------------------------------------------------------- plan


def bench_config(config: dict) -> dict:
    """The config the benchmark runs: the given config's training workloads with their
    settings, on the CPU at 1 and 2 threads, faults allowed, one attempt per cell."""
    config = copy.deepcopy(config)
    config["devices"] = ["cpu"]
    config.setdefault("device_settings", {}).setdefault("cpu", {})["threads"] = [1, 2]
    launcher = config.setdefault("launcher", {})
    launcher.update(progress="never", max_attempts=1, allow_fault_injection=True)
    launcher["allow_more_threads_than_cores"] = True
    config["fault_injection"] = []
    kept = {}
    for name, settings in config.get("workloads", {}).items():
        if workloads.info(name, settings).kind != "training" or settings.get("enabled") is False:
            continue
        for key in ("cpu_threads", "devices", "compile"):
            settings.pop(key, None)
        kept[name] = settings
    config["workloads"] = kept
    return tbconfig.validate_config(config)


def plan(
    config: dict,
    sizes: Sequence[float] = SIZES,
    repeats: int = REPEATS,
    only: Iterable[str] = (),
) -> list[Job]:
    """Every run, workload by workload: baseline, clean, then each size. ``only``:
    ``workload`` or ``workload:batch_size`` entries (default every one)."""
    wanted = list(only)
    jobs = []
    for name, settings in config["workloads"].items():
        for bs in settings.get("batch_sizes") or []:
            if wanted and name not in wanted and f"{name}:{bs}" not in wanted:
                continue
            for rep in range(repeats):
                jobs.append(Job(name, bs, "baseline", 0.0, rep))
                jobs.append(Job(name, bs, "clean", 0.0, rep))
                jobs += [Job(name, bs, "fault", float(s), rep) for s in sizes]
    return jobs


def job_spec(config: dict, job: Job, data_path: str | None, column: str = DEVICE) -> dict:
    """The cell spec of ``job``: the config's seed replaced by the job's base seed, and
    the fault entry of its size on the device column (device id ``column``)."""
    config = copy.deepcopy(config)
    config["seed"] = job.seed
    if job.role == "fault":
        config["fault_injection"] = [
            {"workload": job.workload, "device": column, "fault": FAULT, "size": job.size}
        ]
    cell = tbconfig.Cell(job.workload, job.device(column), job.batch_size, job.rep)
    return tbconfig.cell_spec(config, cell, data_path=data_path)


# ----------------------------------------------------------------------------- runs


def prepare_data(config: dict, jobs: Sequence[Job], root: Path) -> dict[str, str | None]:
    """Each workload's data artifact, built once with the config's seed (both columns
    read the same data, as in a real run); None for workloads without one."""
    paths: dict[str, str | None] = {}
    for name in dict.fromkeys(j.workload for j in jobs):
        if not workloads.info(name, config["workloads"][name]).prepares_data:
            paths[name] = None
            continue
        out = root / "data" / name
        if not (out / "meta.json").exists():
            workloads.get(name).prepare_data(config["workloads"][name], out, config["seed"])
        paths[name] = str(out)
    return paths


def run_job(
    config: dict, job: Job, data_path: str | None, root: Path, column: str = DEVICE
) -> dict:
    """Run ``job`` through the launcher (a fresh child process); its row for the results."""
    import time

    from ..aggregate import run_row
    from ..launcher import run_cell

    folder = root / "runs" / job.name
    started = time.perf_counter()
    record = run_cell(
        job_spec(config, job, data_path, column), folder / "metrics.json", folder / "cell.log"
    )
    row = run_row(record, str(folder / "metrics.json"))
    out = {**asdict(job), "device": job.device(column), "seed": job.seed}
    out.update({k: _plain(row.get(k)) for k in RUN_FIELDS})
    out["seconds"] = time.perf_counter() - started
    return out


def _plain(value):
    """A JSON-ready scalar (NaN -> None)."""
    if isinstance(value, (float, np.floating)):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, np.integer):
        return int(value)
    return value


def run_jobs(
    config: dict,
    jobs: Sequence[Job],
    root: Path,
    workers: int = 1,
    done: Callable[[dict], None] = lambda row: None,
    column: str = DEVICE,
) -> list[dict]:
    """Every job, ``workers`` at a time (each in a worker process of its own: the
    launcher handles signals, which only a main thread may); ``done`` gets each row
    in this process as it finishes."""
    data = prepare_data(config, jobs, root)
    rows = []
    if workers <= 1:
        for job in jobs:
            rows.append(run_job(config, job, data[job.workload], root, column))
            done(rows[-1])
        return rows
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
        futures = [pool.submit(run_job, config, j, data[j.workload], root, column) for j in jobs]
        for future in as_completed(futures):
            rows.append(future.result())
            done(rows[-1])
    return rows


# ----------------------------------------------------------------------------- the rule


def _runs_frame(baseline: Sequence[dict], device: Sequence[dict]) -> pd.DataFrame:
    """A runs table of two groups: ``baseline`` as cpu-t1, ``device`` as cpu-t2, reps
    numbered within each group."""
    rows = []
    for name, group in ((BASELINE_DEVICE, baseline), (DEVICE, device)):
        for rep, run in enumerate(group):
            rows.append({**{k: run.get(k) for k in RUN_FIELDS}, "workload": run["workload"],
                         "batch_size": run["batch_size"], "device": name, "rep": rep})  # fmt: skip
    return pd.DataFrame(rows)


def judge(baseline: Sequence[dict], device: Sequence[dict], margins: Margins | None) -> dict:
    """The parity row of ``device`` runs against ``baseline`` runs (one workload and
    batch size), as a plain dict."""
    table = parity_table(_runs_frame(baseline, device), BASELINE_DEVICE, margins)
    if table.empty:
        return {"parity": "no ok runs", "rule": "no ok run with a result on the device side"}
    row = table.iloc[0].to_dict()
    keep = ("parity", "rule", "n", "baseline_n", "final_metric", "baseline_metric", "metric_diff",
            "metric_low", "metric_high", "final_loss", "baseline_loss", "loss_diff", "loss_low",
            "loss_high", "metric_margin", "loss_margin")  # fmt: skip
    return {k: _plain(None if pd.isna(row[k]) else row[k]) for k in keep}


def split_false_alarms(
    clean: Sequence[dict], margins: Margins | None, group: int = REPEATS
) -> dict:
    """The rule over every split of the ``clean`` runs into two groups of ``group``
    (each unordered split once): counts of each outcome."""
    runs = [r for r in clean if r["status"] == "ok"][: 2 * group]
    counts: dict[str, int] = {}
    if len(runs) < 2 * group:
        return {"splits": 0, "outcomes": counts}
    seen = set()
    for first in itertools.combinations(range(len(runs)), group):
        rest = tuple(i for i in range(len(runs)) if i not in first)
        if (rest, first) in seen:
            continue
        seen.add((first, rest))
        outcome = judge([runs[i] for i in first], [runs[i] for i in rest], margins)["parity"]
        counts[outcome] = counts.get(outcome, 0) + 1
    return {"splits": sum(counts.values()), "outcomes": counts}


def _spread(runs: Sequence[dict], key: str) -> float | None:
    values = [r[key] for r in runs if r["status"] == "ok" and r.get(key) is not None]
    return float(np.std(values, ddof=1)) if len(values) >= 2 else None


def compare(runs: Sequence[dict], margins: Margins | None) -> list[dict]:
    """Per workload × batch size: the clean pair, the split false alarms, each fault
    size's outcome and canary, and the seed-to-seed spread of the clean runs."""
    out = []
    keys = dict.fromkeys((r["workload"], r["batch_size"]) for r in runs)
    for workload, bs in keys:
        mine = [r for r in runs if (r["workload"], r["batch_size"]) == (workload, bs)]
        base = [r for r in mine if r["role"] == "baseline"]
        clean = [r for r in mine if r["role"] == "clean"]
        entry = {
            "workload": workload, "batch_size": bs, "margins": margins_for(margins, workload),
            "clean_pair": judge(base, clean, margins),
            "clean_splits": split_false_alarms(base + clean, margins, max(len(base), 1)),
            "seed_std_metric": _spread(base + clean, "final_metric"),
            "seed_std_loss_rel": _relative_spread(base + clean),
            "faults": [],
        }  # fmt: skip
        for size in sorted({r["size"] for r in mine if r["role"] == "fault"}):
            faulted = [r for r in mine if r["role"] == "fault" and r["size"] == size]
            found = judge(base, faulted, margins)
            canary = [r.get("numerics_status") for r in faulted]
            entry["faults"].append({
                "size": size, **found, "detected": found["parity"] == FAIL,
                "canary": _tally(canary), "runs": len(faulted),
                "ok_runs": sum(r["status"] == "ok" for r in faulted),
            })  # fmt: skip
        out.append(entry)
    return out


def _relative_spread(runs: Sequence[dict]) -> float | None:
    std = _spread(runs, "final_loss")
    losses = [r["final_loss"] for r in runs if r["status"] == "ok" and r.get("final_loss")]
    return std / abs(float(np.mean(losses))) if std is not None and losses else None


def _tally(values: Iterable) -> str:
    counts: dict[str, int] = {}
    for v in values:
        counts[str(v or "none")] = counts.get(str(v or "none"), 0) + 1
    return ", ".join(f"{k} {n}" for k, n in sorted(counts.items()))


def summary(comparisons: Sequence[dict]) -> dict:
    """False alarms over the clean pairs and over the clean splits, detections by size."""
    pairs = [c["clean_pair"]["parity"] for c in comparisons]
    splits = [c["clean_splits"] for c in comparisons]
    n_splits = sum(s["splits"] for s in splits)
    split_fails = sum(s["outcomes"].get(FAIL, 0) for s in splits)
    by_size: dict[str, list] = {}
    for c in comparisons:
        for f in c["faults"]:
            by_size.setdefault(compact(f["size"]), []).append(f["detected"])
    return {
        "clean_pairs": len(pairs),
        "clean_pair_false_alarms": pairs.count(FAIL),
        "clean_pair_passes": pairs.count(PASS),
        "clean_splits": n_splits,
        "clean_split_false_alarms": split_fails,
        "clean_split_passes": sum(s["outcomes"].get(PASS, 0) for s in splits),
        "false_alarm_rate_splits": split_fails / n_splits if n_splits else None,
        "detected_by_size": {k: f"{sum(v)}/{len(v)}" for k, v in by_size.items()},
    }


def config_facts(path: str | Path, config: dict) -> dict:
    """Which config the benchmark ran: its path, the SHA-256 of the file, and the
    training workloads' settings as run."""
    raw = Path(path).read_bytes()
    code = {
        name: hashlib.sha256(Path(workloads.get(name).__file__).read_bytes()).hexdigest()
        for name in config["workloads"]
        if workloads.info(name, config["workloads"][name]).bundled
    }
    return {
        "path": os.path.relpath(path)
        if Path(path).resolve().is_relative_to(Path.cwd())
        else str(path),
        "sha256": hashlib.sha256(raw).hexdigest(),
        "workload_code_sha256": code,
        "workloads": config["workloads"],
        "parity_margins": config["report"]["parity_margins"],
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    }


def load_config(path: str | Path) -> dict:
    """The benchmark's config from a trainbench config file."""
    return bench_config(yaml.safe_load(Path(path).read_text()))


def write_results(path: str | Path, results: dict) -> None:
    atomic_write_json(path, results)


# ----------------------------------------------------------------------------- markdown


def _num(x, percent: bool = False) -> str:
    if x is None:
        return "–"
    sign, unit = "+" if x >= 0 else "−", "%" if percent else ""
    return f"{sign}{compact(abs(100 * x if percent else x))}{unit}"


def _cell(found: dict, clean: bool = False) -> str:
    """ "**detected** (−0.21, loss +35%)", "missed (pass) (…)", "not detected
    (inconclusive) (…)"; for a clean pair "pass", "**false alarm** (fail)", "inconclusive"."""
    words = {FAIL: "**false alarm** (fail)", PASS: "pass"} if clean else {
        FAIL: "**detected**", PASS: "missed (pass)"}  # fmt: skip
    word = words.get(found["parity"], found["parity"])
    if found["parity"] == "insufficient data" and "inconclusive" in (found.get("rule") or ""):
        word = "inconclusive" if clean else "not detected (inconclusive)"
    return f"{word} ({_num(found.get('metric_diff'))}, loss {_num(found.get('loss_diff'), True)})"


def _detection_rows(comparisons: Sequence[dict], sizes: list[float]) -> list[str]:
    rows = []
    for c in comparisons:
        by_size = {f["size"]: f for f in c["faults"]}
        pair, splits = c["clean_pair"], c["clean_splits"]
        alarms = f"{splits['outcomes'].get(FAIL, 0)}/{splits['splits']}"
        passes = f"{splits['outcomes'].get(PASS, 0)}/{splits['splits']}"
        cells = [_cell(pair, clean=True), alarms, passes]
        cells += [_cell(by_size[s]) if s in by_size else "" for s in sizes]
        rows.append(
            f"| {c['workload']} | {c['batch_size']} | ±{compact(c['margins']['metric'])} | "
            f"±{compact(100 * c['margins']['loss'])}% | {_num(c['seed_std_metric'])[1:]} | "
            f"{_num(c['seed_std_loss_rel'], True)[1:]} | " + " | ".join(cells) + " |"
        )
    return rows


def render(results: dict) -> str:
    """The Markdown summary of a results JSON."""
    comparisons, total = results["comparisons"], results["summary"]
    sizes = sorted({f["size"] for c in comparisons for f in c["faults"]})
    facts, machine = results["config"], results.get("machine", {})
    column = (results.get("device") or {}).get("device", DEVICE)
    lines = [
        f"# Parity detection power ({facts['date']})",
        "",
        "The parity rule (equivalence test, `trainbench/stats/parity.py`) applied to a "
        f"baseline `{BASELINE_DEVICE}` (base seed {BASELINE_SEED}) and a device column "
        f"`{column}` (base seed {DEVICE_SEED}), {results['repeats']} repeats each, clean and "
        f"with the test fault `{FAULT}` at each error size. Config `{facts['path']}` "
        f"(sha256 {facts['sha256'][:12]}), every workload setting as configured; "
        f"{machine.get('cpu_model', 'CPU')} ({machine.get('logical_cores', '?')} cores), "
        f"torch {machine.get('torch', '?')}.",
        "",
        *[f"- {note}" for note in results.get("notes", [])],
        *([""] if results.get("notes") else []),
        "| workload | batch | metric margin | loss margin | seed σ metric | seed σ loss | "
        "clean pair (seed 0 vs 100) | false alarms, clean splits | passes, clean splits | "
        + " | ".join(f"error {compact(100 * s)}%" for s in sizes)
        + " |",
        "|---|---|---|---|---|---|---|---|---|" + "---|" * len(sizes),
        *_detection_rows(comparisons, sizes),
        "",
        f"**False alarms**: {total['clean_pair_false_alarms']}/{total['clean_pairs']} clean "
        f"pairs, {total['clean_split_false_alarms']}/{total['clean_splits']} clean splits. "
        f"**Detected** (per size, over workload × batch size): "
        + ", ".join(f"{k}: {v}" for k, v in total["detected_by_size"].items())
        + ".",
        "",
        "Cells: the outcome, then (device − baseline mean of the final task metric, "
        "relative difference of the final training loss). *detected* = `fail` (the 90% "
        "interval lies beyond the margin); *missed (pass)* = shown equivalent; *not "
        "detected (inconclusive)* = `insufficient data`. Seed σ: the standard deviation "
        "over the clean runs of both columns (loss: relative to its mean). Clean splits: "
        "every split of the clean runs into two groups of equal size (they share runs).",
        "",
        "## Canary in the faulted runs",
        "",
        "| workload | batch | " + " | ".join(f"error {compact(100 * s)}%" for s in sizes) + " |",
        "|---|---|" + "---|" * len(sizes),
    ]
    for c in comparisons:
        by_size = {f["size"]: f for f in c["faults"]}
        cells = [by_size[s]["canary"] if s in by_size else "" for s in sizes]
        lines.append(f"| {c['workload']} | {c['batch_size']} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------- the benchmark


def analyse(results: dict, margins: Margins | None) -> dict:
    """``results`` with its comparisons and summary (re)computed from its runs."""
    results["comparisons"] = compare(results["runs"], margins)
    results["summary"] = summary(results["comparisons"])
    return results


def run_benchmark(
    config_path: str | Path,
    out_json: str | Path,
    workdir: str | Path,
    sizes: Sequence[float] = SIZES,
    repeats: int = REPEATS,
    only: Iterable[str] = (),
    workers: int = 1,
    resume: bool = False,
    column: str = DEVICE,
    log: Callable[[str], None] = print,
) -> dict:
    """Run every job not yet in ``out_json`` (with ``resume``), rewriting it and its
    Markdown after each run; returns the results."""
    import threading

    from .throughput import machine_facts

    config = load_config(config_path)
    margins = config["report"]["parity_margins"]
    jobs = plan(config, sizes, repeats, only)
    previous = json_load(out_json) if resume and Path(out_json).exists() else {}
    done = {Job(r["workload"], r["batch_size"], r["role"], r["size"], r["rep"]) for r in
            previous.get("runs", [])}  # fmt: skip
    results = {
        "benchmark": "parity_power", "config": config_facts(config_path, config),
        "machine": machine_facts("cpu"), "sizes": list(sizes), "repeats": repeats,
        "baseline": {"device": BASELINE_DEVICE, "seed": BASELINE_SEED},
        "device": {"device": column, "seed": DEVICE_SEED}, "runs": previous.get("runs", []),
    }  # fmt: skip
    lock = threading.Lock()
    todo = [j for j in jobs if j not in done]
    log(f"{len(todo)} runs to go ({len(done)} already in {out_json}); work folder {workdir}")

    def save(row: dict) -> None:
        with lock:
            results["runs"].append(row)
            analyse(results, margins)
            write_results(out_json, results)
            Path(out_json).with_suffix(".md").write_text(render(results))
            log(f"[{len(results['runs']) - len(done)}/{len(todo)}] {Job(**_job_keys(row)).name}: "
                f"{row['status']} metric {row['final_metric']} loss {row['final_loss']} "
                f"canary {row['numerics_status']} ({row['seconds']:.0f} s)")  # fmt: skip

    run_jobs(config, todo, Path(workdir), workers, save, column)
    analyse(results, margins)
    write_results(out_json, results)
    Path(out_json).with_suffix(".md").write_text(render(results))
    return results


def _job_keys(row: dict) -> dict:
    return {k: row[k] for k in ("workload", "batch_size", "role", "size", "rep")}


def json_load(path: str | Path) -> dict:
    import json

    return json.loads(Path(path).read_text())


def rerender(results_json: str | Path, config_path: str | Path | None = None) -> dict:
    """Re-apply the rule to a results JSON's runs (with the margins of ``config_path``
    if given, else those it was run with) and rewrite the JSON and its Markdown."""
    results = json_load(results_json)
    if config_path is not None:
        config = load_config(config_path)
        results["config"]["parity_margins"] = config["report"]["parity_margins"]
    analyse(results, results["config"]["parity_margins"])
    write_results(results_json, results)
    Path(results_json).with_suffix(".md").write_text(render(results))
    return results


def simulate(
    margin: float, delta: float, n: int = REPEATS, trials: int = 20000, seed: int = 0
) -> dict[str, float]:
    """The rule's outcome frequencies under the normal model, in units of the seed σ:
    ``n`` device values from N(delta, 1) against ``n`` baseline values from N(0, 1),
    margin ``margin`` (docs/statistics.md quotes these for n = 3)."""
    from ..stats.parity import INCONCLUSIVE, equivalence

    rng = np.random.default_rng(seed)
    counts = {PASS: 0, FAIL: 0, INCONCLUSIVE: 0}
    for _ in range(trials):
        counts[equivalence(rng.normal(delta, 1, n), rng.normal(0, 1, n), margin).outcome] += 1
    return {k: v / trials for k, v in counts.items()}
