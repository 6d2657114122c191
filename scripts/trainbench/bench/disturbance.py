"""Is disturbance caught, and only disturbance? Cells run quiet and beside injected load.

Each cell runs through the launcher (a fresh child, as in a workflow) under one
condition at a time:

* ``quiet``: nothing started beside it;
* ``hog_cell_cpus``: one busy loop pinned to each CPU the cell will be pinned to
  (:func:`trainbench.measure.placement.chosen_cpus`; every CPU for a cell that uses them
  all);
* ``hog_all_cpus``: one busy loop pinned to each CPU the cell may use;
* ``gpu_neighbour`` (CUDA cells): another process multiplying matrices on the same GPU.

The loads are other users' programs: started in a session of their own (not the cell's
descendants), running before the cell starts, stopped after it. A cell is ``flagged``
when its record says ``disturbed``. The results say, per condition and device, how many
cells ran and how many were flagged, with each record's reason and its measured shares.
"""

from __future__ import annotations

import contextlib
import copy
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from trainbench import config as tbconfig
from trainbench.measure.placement import allowed_cpus, chosen_cpus

QUIET, HOG_CELL, HOG_ALL, GPU_NEIGHBOUR = "quiet", "hog_cell_cpus", "hog_all_cpus", "gpu_neighbour"
CONDITIONS = (QUIET, HOG_CELL, HOG_ALL, GPU_NEIGHBOUR)

_BUSY = "import os, sys; os.sched_setaffinity(0, {int(sys.argv[1])}); exec('while True: pass')"
# A second process on the GPU: bf16 matmuls in a loop, "ready" once its kernels run.
_GPU_LOAD = (
    "import sys, torch; a = torch.randn(4096, 4096, device='cuda', dtype=torch.bfloat16); "
    "b = a @ a; torch.cuda.synchronize(); print('ready', flush=True)\n"
    "while True:\n    b = a @ a"
)


def _start(argv: Sequence[str]) -> subprocess.Popen:
    return subprocess.Popen(
        list(argv), start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )


def start_load(condition: str, spec: dict) -> list[subprocess.Popen]:
    """The condition's load for the cell of ``spec``, running when this returns."""
    allowed = allowed_cpus()
    if condition == HOG_CELL:
        cpus = chosen_cpus(spec, allowed) or allowed
    elif condition == HOG_ALL:
        cpus = allowed
    elif condition == GPU_NEIGHBOUR:
        process = _start([sys.executable, "-c", _GPU_LOAD])
        line = process.stdout.readline().decode().strip() if process.stdout else ""
        if line != "ready":
            stop_load([process])
            raise RuntimeError(f"the GPU load did not start (it printed {line!r})")
        return [process]
    else:
        return []
    loads = [_start([sys.executable, "-c", _BUSY, str(cpu)]) for cpu in cpus]
    time.sleep(0.5)  # running, and spread over their CPUs
    return loads


def stop_load(loads: Sequence[subprocess.Popen]) -> None:
    for process in loads:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def bench_config(config: dict, devices: Sequence[str]) -> tuple[dict, list[str]]:
    """The config as the benchmark runs it (one attempt a cell, no progress bar) and
    the device ids of ``devices``: ``cpu`` (every CPU) becomes ``cpu-t<CPUs>``."""
    config = copy.deepcopy(config)
    ids = [f"cpu-t{len(allowed_cpus())}" if d == "cpu" else d for d in devices]
    threads = sorted({int(d.split("-t")[1]) for d in ids if d.startswith("cpu-t")})
    config["devices"] = list(dict.fromkeys(d.split("-")[0] for d in ids))
    config.setdefault("device_settings", {}).setdefault("cpu", {})["threads"] = threads or None
    config.setdefault("launcher", {}).update(progress="never", max_attempts=1)
    return tbconfig.validate_config(config), list(dict.fromkeys(ids))


def run_one(config: dict, workload: str, device: str, batch: int, rep: int, condition: str,
            data_path: str | None, root: str) -> dict:  # fmt: skip
    """One cell under one condition (in a worker process: the launcher handles signals)."""
    from trainbench.launch.launcher import run_cell

    cell = tbconfig.Cell(workload, device, batch, rep)
    spec = tbconfig.cell_spec(config, cell, data_path=data_path)
    folder = Path(root) / condition / device / f"rep{rep}"
    loads = start_load(condition, spec)
    try:
        record = run_cell(spec, folder / "metrics.json", folder / "cell.log")
    finally:
        stop_load(loads)
    return row(record, condition, device, rep)


def row(record: dict, condition: str, device: str, rep: int) -> dict:
    """What the results keep of one record."""
    host = (record.get("result") or {}).get("host") or {}
    placement = (record.get("settings_in_force") or {}).get("cpu_placement") or {}
    neighbours = host.get("gpu_neighbours") or {}
    return {
        "condition": condition,
        "device": device,
        "rep": rep,
        "status": record.get("status"),
        "error": record.get("error_message") or record.get("reason"),
        "flagged": bool(host.get("disturbed")),
        "reason": host.get("disturbed_reason"),
        "cell_cpus": host.get("cell_cpus"),
        "pinned": placement.get("pinned"),
        "cell_cpu_others_share": host.get("cell_cpu_others_share"),
        "other_cpu_cores": host.get("other_cpu_cores"),
        "kinds_on_cell_cpus": host.get("kinds_on_cell_cpus"),
        "busiest_others": (host.get("busiest_others") or [])[:3],
        "gpu_neighbours": neighbours.get("others"),
        "gpu_neighbours_available": neighbours.get("available"),
        "samples_per_s": ((record.get("result") or {}).get("timed") or {}).get("samples_per_s"),
    }


def line(r: dict) -> str:
    """One cell's printed line (:func:`rows_from_log` reads it back)."""
    share = r["cell_cpu_others_share"]
    return (
        f"{r['condition']:14} {r['device']:7} rep {r['rep']} {r['status']:6} "
        f"flagged={r['flagged']!s:5} share={'-' if share is None else f'{share:.1%}'} "
        f"{r['reason'] or r['error'] or ''}"
    )


_LINE = re.compile(
    r"^(?P<condition>\w+) +(?P<device>\S+) +rep (?P<rep>\d+) (?P<status>\S+) +"
    r"flagged=(?P<flagged>True|False) +share=(?P<share>-|[0-9.]+%) ?(?P<said>.*)$"
)


def rows_from_log(text: str) -> list[dict]:
    """The cells of a run's printed lines (:func:`line`; other lines are skipped): what
    a line carries (the share to its printed 0.1%), the other fields absent."""
    rows = []
    for match in map(_LINE.match, text.splitlines()):
        if match is None:
            continue
        share, said = match["share"], match["said"].strip() or None
        ok = match["status"] == "ok"
        rows.append(
            {
                "condition": match["condition"],
                "device": match["device"],
                "rep": int(match["rep"]),
                "status": match["status"],
                "error": None if ok else said,
                "flagged": match["flagged"] == "True",
                "reason": said if ok else None,
                "cell_cpu_others_share": None if share == "-" else float(share[:-1]) / 100,
                "other_cpu_cores": None,
            }
        )
    return rows


def summarize(rows: Sequence[dict]) -> dict:
    """Per condition and device: cells (ok records) and how many were flagged."""
    out: dict[str, dict[str, dict]] = {}
    for r in rows:
        if r["status"] != "ok":
            continue
        entry = out.setdefault(r["condition"], {}).setdefault(r["device"], {"cells": 0})
        entry["cells"] += 1
        entry["flagged"] = entry.get("flagged", 0) + int(r["flagged"])
    return out


def machine_words() -> str:
    """The CPU, its logical CPUs and the GPUs, in words."""
    from trainbench.launch.environment import gpu_models
    from trainbench.measure.cpu_features import cpu_model_name

    gpus = gpu_models() or []
    return f"{cpu_model_name()}, {os.cpu_count()} logical CPUs" + (
        f", {', '.join(gpus)}" if gpus else ", no GPU"
    )


def markdown(results: dict) -> str:
    lines = [
        f"# Disturbance injected: {results['made_at']}",
        "",
        f"Command: `{results['command']}`. Code: `{results['code']}`. "
        f"Machine: {results['machine']}.",
        "",
    ]
    if results.get("complete") is False:
        lines += ["Not complete: the run stopped before its last cell; these are the cells "
                  "it finished.", ""]  # fmt: skip
    if results.get("rows_from"):
        lines += [f"Rows from {results['rows_from']}.", ""]
    lines += [
        "| condition | device | cells | flagged |",
        "|---|---|---|---|",
    ]
    for condition, devices in results["summary"].items():
        for device, entry in devices.items():
            lines.append(f"| {condition} | {device} | {entry['cells']} | {entry['flagged']} |")
    lines += ["", "| condition | device | rep | flagged | others' share of the cell's cores | "
              "other cores (machine) | reason |", "|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in results["rows"]:
        share = r["cell_cpu_others_share"]
        cores = r["other_cpu_cores"]
        lines.append(
            f"| {r['condition']} | {r['device']} | {r['rep']} | {r['flagged']} | "
            f"{'' if share is None else f'{share:.1%}'} | "
            f"{'' if cores is None else f'{cores:.2f}'} | {r['reason'] or r['error'] or ''} |"
        )
    return "\n".join(lines) + "\n"
