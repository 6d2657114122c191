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
        *_sync_lines(case),
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


def _sync_lines(case: dict) -> list[str]:
    """The synchronizations per step and the case's verdict (cases measured before they
    were counted have neither: said so)."""
    if "syncs_per_step" not in case:
        return ["- synchronizations per step: not counted (measured before the count existed)"]
    syncs, verdict = case["syncs_per_step"], case["verdict"]
    edges = {side: count["per_block_edges"] for side, count in case["syncs"].items()}
    outcome = "**passed**" if verdict["passed"] else "**FAILED**: " + "; ".join(verdict["reasons"])
    return [
        f"- device synchronizations per step: harness **{syncs['harness']:g}**, bare loop "
        f"**{syncs['bare']:g}** (at a block's edges: harness {edges['harness']:g}, bare loop "
        f"{edges['bare']:g}); counted by {case['syncs_counted_by']}",
        f"- verdict: synchronizations added per step {verdict['syncs_added_per_step']:g}; "
        f"per-step additions {verdict['additions_share_of_bare_step']:.3%} of the bare step "
        f"(limit {verdict['additions_limit']:.0%}): {outcome}",
    ]


def _function_rows(rows: list[dict]) -> list[str]:
    return [
        f"| `{row['function']}` | {row['calls_per_step']:.2f} | {row['own_us_per_step']:.2f} |"
        for row in rows[:TOP]
    ]


def _summary_lines(cases: list[dict]) -> list[str]:
    """One row per case: synchronizations per step on each side and the verdict."""
    counted = [c for c in cases if "syncs_per_step" in c]
    if not counted:
        return []
    lines = [
        "| case | syncs per step: harness | bare loop | per-step additions, share of the "
        "bare step | verdict |",
        "|---|---|---|---|---|",
    ]
    for case in counted:
        syncs, verdict = case["syncs_per_step"], case["verdict"]
        lines.append(
            f"| {case['workload']} bs {case['batch_size']} | {syncs['harness']:g} | "
            f"{syncs['bare']:g} | {verdict['additions_share_of_bare_step']:.3%} | "
            + ("passed" if verdict["passed"] else "**failed**")
            + " |"
        )
    held = all(c["verdict"]["passed"] for c in counted)
    lines += [
        "",
        (
            "The harness adds no synchronization per step, and its per-step additions stay "
            f"within {counted[0]['verdict']['additions_limit']:.0%} of the bare step, in "
            "every case above."
            if held
            else "**At least one case failed**: see its section."
        ),
        "",
    ]
    return lines


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
        *_summary_lines(results["cases"]),
    ]
    for case in results["cases"]:
        lines += _case_lines(case)
    return "\n".join(lines)
