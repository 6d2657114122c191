"""The Markdown summary of the parity-power benchmark's results
(:mod:`trainbench.bench.parity_analysis` computes everything it shows)."""

from __future__ import annotations

from collections.abc import Mapping

from trainbench.analysis.stats.parity import FAIL, IDENTICAL, PASS
from trainbench.analysis.tables import compact
from trainbench.bench.eval_power import markdown as eval_power_markdown
from trainbench.bench.parity_analysis import ordered_columns


def _num(x, percent: bool = False) -> str:
    if x is None:
        return "–"
    sign, unit = "+" if x >= 0 else "−", "%" if percent else ""
    return f"{sign}{compact(abs(100 * x if percent else x))}{unit}"


def _drift(found: Mapping) -> str:
    if found.get("drift_median") is None:
        return "–"
    steps = found.get("compared_steps")
    over = f", {steps} steps" if steps is not None else ""
    return (f"{compact(found['drift_median'])} [{compact(found['drift_low'])}, "
            f"{compact(found['drift_high'])}]{over}")  # fmt: skip


def _subsets(entry: Mapping) -> str:
    s = entry["subsets"]
    parts = [f"{n} {k}" for k, n in sorted(s["outcomes"].items())]
    return f"{', '.join(parts)} (of {s['subsets']})" if s["subsets"] else "–"


def _row(c: Mapping) -> str:
    a, f3 = c["all"], c["first3"]
    cells = [
        c["workload"], str(c["batch_size"]), c["column"], f"**{a['parity']}**" if
        a["parity"] == FAIL else a["parity"], f3["parity"], _subsets(c), _drift(a),
        a.get("precision") or "–", a["decided_by"], _num(a.get("metric_diff")),
        _num(a.get("loss_diff"), True), c.get("same_final", "–"), c["canary"],
        compact(c["seconds_per_run"]) if c["seconds_per_run"] else "–",
    ]  # fmt: skip
    return "| " + " | ".join(cells) + " |"


def _count(found: Mapping) -> str:
    return (f"{found['all']}/{found['cells']} at R, {found['first3']}/{found['cells']} at 3 "
            f"(seeds 0–2), {found['subsets']}/{found['subsets_total']} of the 3-of-R "
            "subsets")  # fmt: skip


def _summary_lines(total: Mapping) -> list[str]:
    lines = [f"- **False alarms, clean column**: {_count(total['clean_false_alarms'])}; "
             f"bit-identical: {_count(total['clean_identical'])}."]  # fmt: skip
    for name, found in total["benign_passes"].items():
        alarms = total["benign_false_alarms"][name]
        lines.append(f"- **{name} passes**: {_count(found)}; fails: {_count(alarms)}.")
    for name, found in total["detected"].items():
        lines.append(f"- **{name} detected** (fail): {_count(found)}.")
    extremes = total.get("pair_drift") or {}
    if extremes:
        lines.append(
            "- **Per-pair drift ratios** (device error / envelope, ≤ 1 within; over every "
            "pair of every cell, the rule's ranges over the 3-run subsets): "
            + "; ".join(
                f"{name} {compact(e['min'])} ({e['min_cell']}) to {compact(e['max'])} "
                f"({e['max_cell']})"
                for name, e in extremes.items()
            )  # fmt: skip
            + "."
        )
    return lines


SHORT = {
    FAIL: "**fail**",
    PASS: "pass",
    IDENTICAL: "identical",
    "insufficient data": "insufficient",
}


def _overview_lines(results: Mapping) -> list[str]:
    """One row per workload × batch size, one cell per column: the outcome at R
    repeats / at 3 (seeds 0–2), then the fails among the 3-of-R subsets."""
    comparisons = results["comparisons"]
    names = list(dict.fromkeys(c["column"] for c in comparisons))
    keys = list(dict.fromkeys((c["workload"], c["batch_size"]) for c in comparisons))
    found = {(c["workload"], c["batch_size"], c["column"]): c for c in comparisons}
    rows = []
    for workload, bs in keys:
        cells = []
        for name in names:
            c = found.get((workload, bs, name))
            if c is None:
                cells.append("not run")
                continue
            s = c["subsets"]
            fails = f" ({s['outcomes'].get(FAIL, 0)}/{s['subsets']} fail)" if s["subsets"] else ""
            cells.append(f"{SHORT.get(c['all']['parity'], c['all']['parity'])} / "
                         f"{SHORT.get(c['first3']['parity'], c['first3']['parity'])}{fails}")  # fmt: skip
        rows.append(f"| {workload} | {bs} | " + " | ".join(cells) + " |")
    r = results["repeats"]
    return [
        "## Overview",
        "",
        f"Each cell: the outcome at {r} repeats / at 3 (run seeds 0–2), then how many of the "
        f"3-of-{r} subsets fail.",
        "",
        "| workload | batch | " + " | ".join(names) + " |",
        "|---|---|" + "---|" * len(names),
        *rows,
        "",
    ]


def _judged(results: Mapping) -> str:
    judged = results.get("judged") or {}
    if not judged.get("commit"):
        return ""
    return f", as at commit `{str(judged['commit'])[:10]}` ({judged.get('at', '?')}),"


def _header(results: Mapping) -> list[str]:
    facts, machine = results["config"], results.get("machine", {})
    runs = results["invocations"]
    wall = sum(i.get("wall_seconds") or 0 for i in runs)
    lines = [
        f"# Parity detection power ({runs[0]['started'][:10]})",
        "",
        "The parity rule (`scripts/trainbench/analysis/stats/parity.py`: each repeat's per-step "
        "losses against the float64 reference of the same run seed, over the steps before "
        "the baseline diverges from it, within m × (u_p/u_fp32) × the baseline's own "
        "float32 error; a gross check of the final metric and loss against g × the 90% "
        "upper bound of the baseline's seed SD)"
        f"{_judged(results)} applied to columns of {results['repeats']} repeats (run seeds 0–"
        f"{results['repeats'] - 1}) against a one-thread float32 baseline of the same seeds. "
        f"Config `{facts['path']}` (sha256 {facts['sha256'][:12]}), every workload setting "
        f"as configured; {machine.get('cpu_model', 'CPU')} ({machine.get('logical_cores', '?')}"
        f" logical cores), torch {machine.get('torch', '?')}; float64 references of the first "
        f"{facts['parity_reference']['steps']} steps; parity settings "
        f"{facts['parity'] or 'default'}.",
        "",
        f"Wall time {compact(wall / 60)} min over {len(runs)} invocation(s):",
        *[
            f"- `{i['command']}` at commit `{i['commit']}`, {i['started']} – "
            f"{i.get('finished') or 'interrupted'} ({compact((i.get('wall_seconds') or 0) / 60)} "
            "min)"
            for i in runs
        ],  # fmt: skip
        "",
        "Columns: "
        + "; ".join(f"`{n}` {c['describe']}" for n, c in ordered_columns(results["columns"])),
        "",
        *[f"- {note}" for note in results.get("notes", [])],
        *([""] if results.get("notes") else []),
    ]
    return lines


def render(results: dict) -> str:
    """The Markdown summary of a results JSON."""
    r = results["repeats"]
    lines = [
        *_header(results),
        "## Summary",
        "",
        *_summary_lines(results["summary"]),
        "",
        *_overview_lines(results),
        "## Every column",
        "",
        f"| workload | batch | column | {r}-repeat | 3-repeat | 3-of-{r} subsets | drift ratio "
        f"median [interval] ({r} repeats) | precision | decided by | metric diff | loss diff "
        "| final bits equal | canary | s per run |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        *[_row(c) for c in results["comparisons"]],
        "",
        f"Outcomes by the report's rule: **fail** (detected; for a clean or benign column a "
        f"false alarm), pass, identical (bit-identical to the baseline: proves nothing), "
        f"insufficient data. {r}-repeat: every repeat; 3-repeat: run seeds 0–2 (the default "
        f"`repeats: 3`); 3-of-{r} subsets: the rule on every 3 of the {r} run seeds (they "
        "share runs). Drift ratio: the pairs' device error / envelope, median and interval "
        "(range below 5 pairs, 90% BCa bootstrap interval of the median from 5), and the "
        "steps compared (the median over the pairs of the steps before the baseline "
        "diverges); ≤ 1 is within. Metric diff: mean paired final-metric difference (device − baseline); "
        "loss diff: relative. Final bits equal: pairs whose final metric and loss equal the "
        "baseline's (the rule's *identical* compares the first reference steps' losses only). "
        "Canary: the numerical canary's status in each run.",
        "",
        *_sensitivity_lines(results),
        *eval_power_markdown(results.get("eval_power") or []),
        "## Cost per cell",
        "",
        "| workload | batch | baseline run (s) | float64 reference (s) | runs | run seconds, total |",
        "|---|---|---|---|---|---|",
        *[
            f"| {c['workload']} | {c['batch_size']} | {_secs(c['baseline_seconds'])} | "
            f"{_secs(c['reference_seconds'])} | {c['runs']} | {_secs(c['run_seconds_total'])} |"
            for c in results["cost"]
        ],  # fmt: skip
    ]
    return "\n".join(lines) + "\n"


def _sensitivity_lines(results: Mapping) -> list[str]:
    """How the outcomes move with a shorter drift window (``sensitivity``), if computed."""
    found = results.get("sensitivity") or []
    if not found:
        return []
    configured = results["config"]["parity_reference"]["steps"]
    rows = [(configured, results["summary"])] + [(s["steps"], s["summary"]) for s in found]
    names = [("clean_false_alarms", None)]
    for n in rows[0][1]["benign_passes"]:
        names += [("benign_passes", n), ("benign_false_alarms", n)]
    names += [("detected", n) for n in rows[0][1]["detected"]]

    def cell(total: Mapping, key: str, name: str | None) -> str:
        f = total[key] if name is None else total[key].get(name)
        if not f:
            return "–"
        return f"{f['all']}/{f['cells']}, {f['first3']}/{f['cells']}, {f['subsets']}/{f['subsets_total']}"

    head = " | ".join(f"first {k} steps" + (" (configured)" if k == configured else "")
                      for k, _ in rows)  # fmt: skip
    label = {"clean_false_alarms": "clean: fail", "benign_false_alarms": "{}: fail",
             "benign_passes": "{}: pass",
             "detected": "{}: fail (detected)"}  # fmt: skip
    return [
        "## The drift window: the same rule over fewer steps",
        "",
        "Not the configured rule: the stored losses cut to the first k steps, as if "
        "`report.parity_reference.steps` were k. Cells: fails at "
        f"{results['repeats']} repeats / cells, at 3 (seeds 0–2) / cells, over the 3-of-"
        f"{results['repeats']} subsets.",
        "",
        f"| column | {head} |",
        "|---|" + "---|" * len(rows),
        *[
            f"| {label[key].format(name)} | "
            + " | ".join(cell(t, key, name) for _, t in rows)
            + " |"
            for key, name in names
        ],  # fmt: skip
        "",
    ]


def _secs(x: float | None) -> str:
    return compact(x) if x else "–"
