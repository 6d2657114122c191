"""Is a host's speed a property of the time or of the process? One fixed training step
timed in one long process and in many short ones, with a fixed single-thread probe.

A sweep's repeats of one cell can differ by 20% while the steps inside each repeat agree
within a few per cent (benchmarks/results/gpu-host-2026-11-29c.md). Two causes predict
different cures:

* **the time**: the host's speed drifts over seconds to minutes (turbo budget, heat,
  neighbours of a VM). Then one long process shows the drift between its own intervals,
  and cells measured close together in time move together;
* **the process**: something fixed at a process's start (thread placement, memory
  placement, a library's choices) sets its level. Then one long process is flat, and
  short processes scatter more than a long one's intervals.

Each child process builds a small convolutional net (the sweep's conv_net at width 64,
batch 128, 3x32x32), warms it up, then reports its steps per second per interval
(device synchronised at each interval's edges) together with the machine's steal time
per interval (/proc/stat) and a fixed single-thread probe timed before and after (the
best of 5 runs of a pure-Python loop: the core's speed as the interpreter sees it,
untouched by the thread pools).
"""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import psutil

PROBE_LOOPS = 500_000
WARMUP_SECONDS = 1.0


def probe_seconds(runs: int = 5) -> float:
    """The best of ``runs`` timings of a fixed pure-Python loop, in seconds."""
    best = float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        total = 0
        for i in range(PROBE_LOOPS):
            total += i * i % 7
        best = min(best, time.perf_counter() - start)
    return best


def _steal_seconds() -> float:
    return float(getattr(psutil.cpu_times(), "steal", 0.0) or 0.0)


def child(device: str, threads: int, seconds: float, interval: float, pin: str) -> dict:
    """One process's intervals: steps per second and steal time per interval."""
    import torch
    from torch import nn

    if pin == "main" and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {0})
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    dev = torch.device(device)
    width = 64
    model = nn.Sequential(
        nn.Conv2d(3, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU(),
        nn.Conv2d(width, width, 3, padding=1, stride=2), nn.BatchNorm2d(width), nn.ReLU(),
        nn.Conv2d(width, 2 * width, 3, padding=1, stride=2), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(2 * width, 2),
    ).to(dev)  # fmt: skip
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.randn(128, 3, 32, 32, device=dev)
    y = torch.randint(0, 2, (128,), device=dev)

    def sync() -> None:
        if dev.type == "cuda":
            torch.cuda.synchronize()

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()

    probe_before = probe_seconds()
    end = time.perf_counter() + WARMUP_SECONDS
    while time.perf_counter() < end:
        step()
    sync()
    rates, steals = [], []
    stop = time.perf_counter() + seconds
    while time.perf_counter() < stop:
        steal0, t0, n = _steal_seconds(), time.perf_counter(), 0
        while time.perf_counter() - t0 < interval:
            step()
            n += 1
            if dev.type == "cuda" and n % 20 == 0:
                sync()
        sync()
        elapsed = time.perf_counter() - t0
        rates.append(n / elapsed)
        steals.append((_steal_seconds() - steal0) / elapsed)
    return {
        "device": device,
        "threads": threads,
        "pin": pin,
        "steps_per_s": rates,
        "steal_cores": steals,
        "probe_before_s": probe_before,
        "probe_after_s": probe_seconds(),
        "cpus_allowed": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
    }


def run_child(device: str, threads: int, seconds: float, interval: float, pin: str,
              env: dict | None = None) -> dict:  # fmt: skip
    """Run :func:`child` in a fresh Python process and return its result."""
    code = (
        "import json,sys; from trainbench.bench.host_stability import child; "
        f"print(json.dumps(child({device!r}, {threads}, {seconds}, {interval}, {pin!r})))"
    )
    scripts = str(Path(__file__).resolve().parents[2])
    full_env = {**os.environ, "PYTHONPATH": scripts, **(env or {})}
    started = time.time()
    out = subprocess.run([sys.executable, "-c", code], env=full_env, check=True,
                         capture_output=True, text=True).stdout  # fmt: skip
    result = json.loads(out.strip().splitlines()[-1])
    result["started_unix"] = started
    result["env"] = env or {}
    return result


def summary(rows: list[dict]) -> dict:
    """Spread of a group's process medians against the spread inside one process."""
    medians = [statistics.median(r["steps_per_s"]) for r in rows]
    inside = [max(r["steps_per_s"]) / min(r["steps_per_s"]) - 1 for r in rows]
    probes = [r["probe_before_s"] for r in rows]
    return {
        "processes": len(rows),
        "median_steps_per_s": medians,
        "between_process_spread": max(medians) / min(medians) - 1,
        "inside_process_spread_median": statistics.median(inside),
        "probe_spread": max(probes) / min(probes) - 1,
        "steal_cores_max": max(max(r["steal_cores"]) for r in rows),
    }


WINDOW_PAIRS = 8


def window_plan(cuda: bool) -> list[tuple[str, str, int, float, str, int, dict]]:
    """Does a longer window leave less of the host's wandering speed in a cell? One
    process of a 1-s window, then one of a 5-s window (criterion's measurement time),
    :data:`WINDOW_PAIRS` times over, alternating so that both see the same minutes;
    each process's throughput is its whole window's (one interval: ``seconds``)."""
    device = "cuda" if cuda else "cpu"
    return [
        (f"{device}-window-{seconds:g}s", device, 1, seconds, "none", 1, {})
        for _ in range(WINDOW_PAIRS)
        for seconds in (1.0, 5.0)
    ]


def plan(cuda: bool, cores: int) -> list[tuple[str, str, int, float, str, int, dict]]:
    """(group, device, threads, seconds, pin, processes, env) in the order run."""
    omp = {"OMP_PROC_BIND": "close", "OMP_PLACES": "cores"}
    rows = [
        ("cpu-all-short-a", "cpu", cores, 5.0, "none", 5, {}),
        ("cpu-all-long", "cpu", cores, 30.0, "none", 1, {}),
        ("cpu-all-bound", "cpu", cores, 5.0, "none", 5, omp),
        ("cpu-all-short-b", "cpu", cores, 5.0, "none", 5, {}),
        ("cpu-half-short", "cpu", max(1, cores // 2), 5.0, "none", 4, {}),
    ]
    if cuda:
        rows += [
            ("cuda-short", "cuda", 1, 5.0, "none", 5, {}),
            ("cuda-long", "cuda", 1, 30.0, "none", 1, {}),
            ("cuda-pinned-short", "cuda", 1, 5.0, "main", 5, {}),
        ]
    return rows


def window_comparison(result: dict) -> list[dict]:
    """Per group of :func:`window_plan`: its processes, the spread of their throughputs
    (highest ÷ lowest − 1), their standard deviation in log terms (≈ the relative
    spread of one window), and when each started, in seconds after the first process."""
    groups = {g: v["rows"] for g, v in result["groups"].items() if "-window-" in g}
    if not groups:
        return []
    first = min(r["started_unix"] for rows in groups.values() for r in rows)
    out = []
    for group, rows in groups.items():
        rates = [statistics.fmean(r["steps_per_s"]) for r in rows]
        logs = [math.log(x) for x in rates]
        out.append(
            {
                "group": group,
                "processes": len(rows),
                "steps_per_s": [round(x, 1) for x in rates],
                "spread": round(max(rates) / min(rates) - 1, 4),
                "log_sd": round(statistics.stdev(logs), 4) if len(logs) > 1 else None,
                "started_after_s": [round(r["started_unix"] - first) for r in rows],
            }
        )
    return out


def window_markdown(result: dict, how: str) -> str:
    """The --windows results file: the groups' spreads, from :func:`window_comparison`."""
    lines = [
        f"# Window length on a GPU host: {result['made_at']}",
        "",
        how,
        "",
        f"Command: `{result['command']}`; code: {result['code']}.",
        "",
        "| group | processes | steps/s per process | highest ÷ lowest − 1 | SD of log steps/s "
        "| started (s after the first) |",
        "|---|---|---|---|---|---|",
    ]
    for g in window_comparison(result):
        lines.append(
            f"| {g['group']} | {g['processes']} | {', '.join(f'{x:g}' for x in g['steps_per_s'])} "
            f"| {g['spread']:.1%} | {g['log_sd']:.1%} | {', '.join(map(str, g['started_after_s']))} |"
        )
    return "\n".join(lines) + "\n"
