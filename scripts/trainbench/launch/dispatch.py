"""Run a cell's workload in the child: a microbenchmark's own ``run``, the training
loop over the parts a training workload's entry builds, or its float64 reference."""

from __future__ import annotations

import importlib
from typing import Any

from trainbench.config.registry import info, load_entry


def run_workload(ctx: Any) -> dict:
    """Run the cell's workload: a microbenchmark's own ``run``, or the training loop
    over the parts the workload's entry builds. Marks where the workload's import,
    its data and model set-up and the loop begin and end (:mod:`trainbench.measure.wall_time`)."""
    from trainbench.measure import wall_time

    wall_time.mark("workload_start")
    from trainbench.measure.context import DeviceUnavailable
    from trainbench.measure.parts_contract import build_failed, check_full_batch, check_parts
    from trainbench.measure.training import run_training

    name, settings = ctx.spec["cell"]["workload"], ctx.workload_settings
    found = info(name, settings)
    if found.kind != "training":
        module = importlib.import_module(found.module)
        wall_time.mark("entry_loaded")
        wall_time.mark("parts_built")  # a microbenchmark sets up inside its run
        with wall_time.span("loop"):
            return module.run(ctx)
    build = load_entry(found.entry, settings.get("python_path") or ["."])
    wall_time.mark("entry_loaded")
    try:
        parts = build(ctx)
    except DeviceUnavailable:  # the workload says the device cannot run it: unavailable
        raise
    except Exception as exc:  # class build_failed (or oom, ...: its message is kept)
        raise build_failed(exc, ctx) from exc
    check_parts(parts, ctx)  # an own model's contract, named in a bad_input record
    check_full_batch(parts, ctx)
    wall_time.mark("parts_built")
    # The loop marks its own analysis (TrainingLoop.run: steady state, windows, summaries).
    with wall_time.span("loop"):
        if ctx.spec.get("reference"):
            from trainbench.measure.reference_run import run_reference

            return run_reference(parts, ctx)
        return run_training(parts, ctx)
