"""Would a config's workloads run on Apple's GPU? ``make mps-ready CONFIG=...``: each
workload's short cell, through the real launcher and cell path, in a fresh process on
the MPS emulator (:mod:`trainbench.measure.mps_emulator`), on any machine.

A short cell is the workload at its smallest MPS batch size, one epoch of at most
:data:`SHORT_STEPS` steps, one evaluation, no window extension and no diagnostic pass:
training, the canary, evaluation parity, the trackers and memory, as a real MPS cell
runs them. The answer per workload is ``ready`` or ``not ready`` with the first rule it
breaks and where (``no float64 on the device, in forward (model.py line 12)``), and
notes that do not stop a run (host waits inside the timed steps). No figure here is an
MPS speed: the emulator computes on the CPU, and nothing of it reaches a report.
"""

from __future__ import annotations

import argparse
import copy
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

from trainbench.common.records import atomic_write_json, read_record
from trainbench.config import (
    Cell,
    batch_sizes_for,
    cell_spec,
    enabled_workloads,
    find_variant,
    validate_config,
)
from trainbench.config.registry import get, info
from trainbench.launch.launcher import run_cell

SHORT_STEPS = 8
OUT = Path("results/mps-ready")


@dataclass
class Readiness:
    workload: str
    ready: bool
    batch_size: int | None
    first_problem: str | None = None
    notes: list[str] = field(default_factory=list)
    checked: list[str] = field(default_factory=list)
    record: str | None = None
    checked_at_all: bool = True  # False: the emulator could not start here

    def line(self) -> str:
        if not self.checked_at_all:
            return f"mps-ready: {self.workload}: not checked: {self.first_problem}"
        head = f"mps-ready: {self.workload}: " + ("ready" if self.ready else "not ready")
        if not self.ready:
            return f"{head}: {self.first_problem}"
        text = f"{head} (bs {self.batch_size}: {', '.join(self.checked)})"
        return text + "".join(f"\n  note: {note}" for note in self.notes)


def short_config(config: dict, workload: str) -> tuple[dict, int]:
    """``config`` cut to one short MPS cell of ``workload`` (and the CPU beside it as
    the baseline, so evaluation parity runs); the batch size it uses."""
    config = copy.deepcopy(config)
    config["devices"] = ["cpu", "mps"]
    config["repeats"] = 1
    config["workloads"] = {workload: config["workloads"][workload]}
    settings = config["workloads"][workload]
    settings.pop("devices", None)
    settings.pop("repeats", None)
    sizes = batch_sizes_for(config, workload, find_variant(config, "mps"))
    batch = min(sizes) if sizes else 1
    if info(workload, settings).kind == "training":
        settings["batch_sizes"] = [batch]
        settings["epochs"] = 1
        settings["max_steps_per_epoch"] = min(
            SHORT_STEPS, settings.get("max_steps_per_epoch") or SHORT_STEPS
        )
        settings["warmup_steps"] = min(int(settings.get("warmup_steps", 1)), 2)
        settings.pop("target", None)
        settings.pop("compile", None)
    timing = config.setdefault("timing", {})
    timing.update(
        eval_every={"epochs": 1},
        extend_short_windows=False,
        max_eval_passes=0,
        step_breakdown={"enabled": False},
    )
    config.pop("fault_injection", None)
    return validate_config(config), batch


def check_workload(config: dict, workload: str, out: Path, options: dict) -> Readiness:
    """Run ``workload``'s short cell on the emulated MPS; its readiness."""
    config, batch = short_config(config, workload)
    folder = out / workload
    folder.mkdir(parents=True, exist_ok=True)
    data_path = None
    if info(workload, config["workloads"][workload]).prepares_data:
        data_path = str(folder / "data")
        get(workload).prepare_data(config["workloads"][workload], data_path, config["seed"])
    spec = cell_spec(config, Cell(workload, "mps", batch, 0), data_path=data_path)
    spec["mps_emulator"] = dict(options)
    spec["launcher"] = {**spec["launcher"], "start_method": "spawn", "max_attempts": 1}
    record_path = folder / "metrics.json"
    run_cell(spec, record_path, folder / "cell.log")
    return judge(workload, batch, read_record(record_path), str(record_path))


def judge(workload: str, batch: int, record: dict, path: str | None = None) -> Readiness:
    """A short cell's record, read as "would it run on MPS": the first thing that
    failed, or ready with what was checked and notes."""
    verdict = Readiness(workload, False, batch, record=path)
    status = record.get("status")
    if status != "ok":
        error = record.get("error") or {}
        message = error.get("message") or record.get("reason") or status
        verdict.first_problem = f"the cell is {status}: {message}"
        if error.get("exception") == "EmulatorUnavailable":
            verdict.checked_at_all, verdict.first_problem = False, message
        return verdict
    result = record.get("result") or {}
    numerics = record.get("numerics") or {}
    if numerics.get("status") not in ("pass", None):
        verdict.first_problem = f"the numerical canary: {numerics.get('status')}: " + str(
            numerics.get("message") or numerics.get("failed_ops")
        )
        return verdict
    checks = result.get("verification") or {}
    if checks and not checks.get("all_on_device", True):
        verdict.first_problem = f"placement: {checks.get('checks')}"
        return verdict
    parity = result.get("eval_parity") or {}
    if parity.get("status") not in (None, "pass"):
        verdict.first_problem = f"evaluation parity: {parity.get('status')}: {parity.get('rule')}"
        return verdict
    verdict.ready = True
    verdict.checked = _checked(record, result, numerics, parity)
    verdict.notes = _notes(record, result)
    return verdict


def _checked(record: dict, result: dict, numerics: dict, parity: dict) -> list[str]:
    steps = sum(len(epoch) for epoch in (result.get("steps") or {}).get("seconds") or [])
    done = [f"{steps} steps trained" if steps else "ran"]
    if numerics:
        done.append("canary passed")
    if parity:
        done.append("evaluation parity passed")
    memory = ((result.get("memory") or {}).get("device")) or {}
    if memory.get("peak_bytes") is not None:
        method = "allocator peak" if "max_memory_allocated" in memory["method"] else "sampled"
        done.append(f"memory peak {memory['peak_bytes']:,} bytes ({method})")
    return done


def _notes(record: dict, result: dict) -> list[str]:
    emulator = (record.get("environment") or {}).get("mps_emulator") or {}
    syncs = emulator.get("syncs") or {}
    notes = []
    if syncs.get("in_timed_steps"):
        where = ", ".join(syncs.get("in_timed_steps_where") or {})
        hint = (
            "; GradScaler reads found_inf before each step of an optimizer that is not "
            "fused: fused=True (Adam, AdamW, SGD; torch >= 2.13 on MPS) removes it"
            if "_optimizer_step" in where
            else ""
        )
        notes.append(
            f"{syncs['in_timed_steps']} host waits inside {syncs['timed_steps_seen']} timed "
            f"steps ({where}): each makes the host wait for the GPU's queue{hint}"
        )
    return notes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="mps_ready.py",
        description="Would each workload of a config run on Apple's GPU (MPS)? A short "
        "cell per workload on the MPS emulator (CPU compute, MPS's rules): ready, or the "
        "first rule broken and where. Exit 0 when every workload is ready, 1 when one is not, "
        "2 when nothing could be checked (no C++ compiler for the emulator). Never a speed.",
    )
    parser.add_argument(
        "paths",
        nargs="+",
        metavar="config",
        help="config.yaml first, then overrides; the workloads checked are "
        "those the overrides name (all enabled ones when there are none)",
    )
    parser.add_argument("--out", default=str(OUT), help="records and readiness.json here")
    parser.add_argument("--workload", action="append", help="only this workload (repeatable)")
    args = parser.parse_args(argv)  # fmt: skip
    from trainbench.config import read_merged_config
    from trainbench.config.files import ConfigRefused, read_config_file

    try:
        config, _ = read_merged_config(args.paths)
    except ConfigRefused as refused:
        print("\n".join(refused.lines), file=sys.stderr)
        return 2
    named = [w for p in args.paths[1:] for w in (read_config_file(p).data.get("workloads") or {})]
    workloads = args.workload or list(dict.fromkeys(named)) or enabled_workloads(config)
    out = Path(args.out)
    verdicts = []
    for workload in workloads:
        verdict = check_workload(config, workload, out, {})
        print(verdict.line(), flush=True)
        verdicts.append(verdict)
    atomic_write_json(out / "readiness.json", {
        "what": "MPS readiness on the MPS emulator (CPU compute, MPS's rules): not a speed",
        "configs": args.paths,
        "workloads": [asdict(v) for v in verdicts],
    })  # fmt: skip
    ready = sum(v.ready for v in verdicts)
    print(f"mps-ready: {ready} of {len(verdicts)} workloads ready ({out / 'readiness.json'})")
    if not all(v.checked_at_all for v in verdicts):
        return 2  # the emulator could not start: nothing was checked
    return 0 if ready == len(verdicts) else 1


__all__ = ["Readiness", "check_workload", "judge", "main", "short_config"]
