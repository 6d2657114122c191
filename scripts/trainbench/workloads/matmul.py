"""Seed report 004's small-op test, done properly: an n x n matmul sweep per device.

Timed with torch.utils.benchmark (blocked_autorange) through a timer that syncs
the device before reading the clock, so queued GPU work is never mistaken for
finished work on any torch version; num_threads is the process's thread count
(the Timer would otherwise default to 1 thread on the CPU).
"""

from __future__ import annotations

import time

import torch
import torch.utils.benchmark as benchmark
from trainbench.measure.context import RunContext
from trainbench.measure.trackers import TimedRegion
from trainbench.measure.trackers.host import host_activity


def run(ctx: RunContext) -> dict:
    settings = ctx.workload_settings
    dtype = getattr(torch, settings["dtype"])
    batch = ctx.batch_size
    device, dev = ctx.torch_device, ctx.device
    ctx.inject_fault()

    def synced_clock() -> float:
        dev.synchronize()
        return time.perf_counter()

    dev.reset_peak_memory()
    memory_initial = dev.current_memory_bytes()
    host = host_activity(ctx.spec, dev, torch.get_num_threads())
    rows = []
    generator = ctx.generator(0)
    for n in settings["sizes"]:
        shape = (batch, n, n) if batch > 1 else (n, n)
        a = torch.randn(shape, generator=generator).to(device=device, dtype=dtype)
        b = torch.randn(shape, generator=generator).to(device=device, dtype=dtype)
        op = torch.bmm if batch > 1 else torch.mm
        dev.synchronize()
        t0 = time.perf_counter()
        for _ in range(int(settings["warmup_calls"])):
            op(a, b)
        dev.synchronize()
        warmup_s = time.perf_counter() - t0
        timer = benchmark.Timer(
            stmt="op(a, b)",
            globals={"op": op, "a": a, "b": b},
            num_threads=torch.get_num_threads(),
            timer=synced_clock,
            label="matmul",
            sub_label=f"n={n}",
        )
        with TimedRegion(dev, [host], "train"):
            measurement = timer.blocked_autorange(min_run_time=float(settings["min_run_time_s"]))
        dev.sample_memory()
        median = float(measurement.median)
        flops = 2.0 * batch * n**3
        rows.append(
            {
                "n": int(n),
                "median_s": median,
                "iqr_s": float(measurement.iqr),
                "mean_s": float(measurement.mean),
                "runs": len(measurement.times),
                "number_per_run": int(measurement.number_per_run),
                "gflops": flops / median / 1e9,
                "warmup_s": warmup_s,
                # torch.utils.benchmark's own warning: IQR above 10% of the median
                "noisy": not measurement.meets_confidence(0.1),
            }
        )
        del a, b
    memory = dev.memory_reading(memory_initial)
    return {
        "kind": "microbenchmark",
        "settings": {
            "dtype": settings["dtype"],
            "batch": batch,
            "sizes": list(settings["sizes"]),
            "min_run_time_s": settings["min_run_time_s"],
            "torch_threads": torch.get_num_threads(),
        },
        "sizes": rows,
        "timing_method": (
            "torch.utils.benchmark.Timer.blocked_autorange with a timer that synchronizes the "
            "device before each clock read; median and IQR over blocks"
        ),
        "memory": {"device": memory.as_dict(), "limit_bytes": dev.memory_limit_bytes()},
        "host": host.summary(),
        "task": None,
    }
