"""The Markdown of the per-step overhead results (benchmarks/step_overhead.py)."""

from __future__ import annotations

# Functions listed per case: the largest harness-only host times.
TOP = 12


def _case_lines(case: dict) -> list[str]:
    profile = case["profile"]
    ms = case["step_ms_unprofiled"]
    lines = [
        f"## {case['workload']} bs {case['batch_size']} on {case['device']} ({case['date']})",
        "",
        f"- step time without the profiler: harness {ms['harness']:.3f} ms, bare loop "
        f"{ms['bare']:.3f} ms (one block of each; the interleaved throughput benchmark "
        "compares them properly)",
        f"- host time per step under cProfile: harness "
        f"{profile['host_us_per_step_under_profiler']['harness']:.1f} µs, bare loop "
        f"{profile['host_us_per_step_under_profiler']['bare']:.1f} µs "
        f"({profile['steps_profiled']} steps each, H B B H)",
        f"- functions only the harness's steps call: **{profile['harness_only_us_per_step']:.1f} "
        "µs per step** under cProfile (its own per-call cost included)",
        f"- the per-step additions timed alone (no profiler): "
        f"**{case['operations_us_per_step']:.2f} µs per step**",
        "",
        "| per-step addition, timed alone | µs per step |",
        "|---|---|",
    ]
    for row in case["operations"]:
        value = f"{row['us_per_step']:.2f}" if row["applies"] else "not on this device"
        lines.append(f"| {row['operation']} | {value} |")
    lines += ["", "| function only the harness's steps call (cProfile) | calls per step | "
              "own µs per step |", "|---|---|---|"]  # fmt: skip
    lines += _function_rows(profile["harness_only_functions"])
    lines += ["", "Their counterparts in the bare loop (functions only it calls):", "",
              "| function only the bare loop's steps call | calls per step | own µs per step |",
              "|---|---|---|", *_function_rows(profile.get("bare_only_functions", []))]  # fmt: skip
    edges = profile.get("harness_per_region_functions", [])
    if edges:
        lines += ["", "Inside the harness's regions, less often than every other step (per "
                  "region; per step only to compare): " + ", ".join(
                      f"`{r['function']}` {r['own_us_per_step']:.2f} µs" for r in edges[:6])]  # fmt: skip
    return lines + [""]


def _function_rows(rows: list[dict]) -> list[str]:
    return [
        f"| `{row['function']}` | {row['calls_per_step']:.2f} | {row['own_us_per_step']:.2f} |"
        for row in rows[:TOP]
    ]


def render_markdown(results: dict) -> str:
    machine = results["machine"]
    lines = [
        f"# Per-step overhead of the harness on {results['device']}",
        "",
        f"- host CPU: {machine['cpu_model']} ({machine['logical_cores']} logical cores, "
        f"{machine['torch_threads']} torch threads)"
        + (f"; GPU: {machine['gpu']}" if machine.get("gpu") else ""),
        f"- python {machine['python']}, torch {machine['torch']}",
        "",
        "Made by `python benchmarks/step_overhead.py SUITE WORKLOAD BATCH_SIZE`; every number "
        "is read from the JSON beside this file. What each column means: "
        "scripts/trainbench/bench/step_overhead.py.",
        "",
    ]
    for case in results["cases"]:
        lines += _case_lines(case)
    return "\n".join(lines)
