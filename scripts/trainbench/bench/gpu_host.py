"""The GPU-host sweep's results file: verdicts reached and withheld in each workflow run,
their agreement between two runs, how far each cell's repeats spread, how close in time
and how alike a comparison's two sides were measured, the injected
disturbances, and the other CPU time and throughput measured during cells, by round of
repeats.

Two layers of verdicts are kept apart. The **speed verdict** of a comparison
(``tables/speedup.csv``: faster, slower, no clear difference; or withheld: disturbed,
insufficient data...) is what the tool's own activity can withhold or skew. The
report's **overall verdict** (``tables/verdicts.csv``: working, not working,
insufficient data, disturbed, not faster) adds the verification checks and parity; it
is listed per comparison beside the speed verdict, with the check that decided it.

Everything is read from what the runs published (``tables/speedup.csv``,
``tables/verdicts.csv``, ``tables/runs.csv``) and from ``benchmarks/disturbance.py``'s
JSON; nothing is typed in.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import pandas as pd
from trainbench.bench.gpu_host_noise import pairs, window_halves

REACHED = ("faster", "slower", "no clear difference")


def comparisons(results: Path) -> pd.DataFrame:
    """The speedup table's comparisons (every row but the baseline's)."""
    speed = pd.read_csv(results / "tables" / "speedup.csv")
    return speed[speed["verdict"] != "baseline"].reset_index(drop=True)


def _span(values: pd.Series) -> list[float] | None:
    v = pd.to_numeric(values, errors="coerce").dropna()
    return [round(float(v.min()), 3), round(float(v.max()), 3)] if len(v) else None


CELL = ["workload", "device", "batch_size"]


def rounds(results: Path) -> list[dict]:
    """Per round of repeats and backend: the other CPU time measured during ok cells,
    on the whole machine (cores) and on the cell's own CPUs (share); the busiest other
    process by name (its cores over each cell's timed span, from the records); each
    cell's throughput over its own first round's (median over the cells); and how many
    cells were disturbed."""
    runs = pd.read_csv(results / "tables" / "runs.csv")
    ok = runs[runs["status"] == "ok"].copy()
    first = ok[ok["rep"] == 0].set_index(CELL)["samples_per_s"]
    ok["vs_first"] = ok["samples_per_s"] / first.reindex(pd.MultiIndex.from_frame(ok[CELL])).values
    out = []
    for (rep, backend), g in ok.groupby(["rep", "backend"]):
        name, cores = _busiest_other(results, g)
        out.append(
            {
                "round": int(rep),
                "backend": backend,
                "cells": len(g),
                "other_cpu_cores_machine": _span(g["other_cpu_cores"]),
                "others_share_of_cell_cpus": _span(g.get("cell_cpu_others_share", pd.Series())),
                "busiest_other_process": name,
                "busiest_other_process_cores": _span(pd.Series(cores)),
                "throughput_vs_round_0": round(float(g["vs_first"].median()), 3),
                "disturbed": int(g["disturbed"].fillna(False).astype(bool).sum()),
            }
        )
    return out


def _busiest_other(results: Path, cells: pd.DataFrame) -> tuple[str | None, list[float]]:
    """The other process (by name) with the most CPU time over these cells' timed
    spans (the records' ``result.host.busiest_others``), and its cores in each cell."""
    per_cell: list[dict[str, float]] = []
    for c in cells.itertuples():
        path = results / "runs" / c.workload / c.device / f"bs{c.batch_size}" / f"rep{c.rep}"
        host = (json.loads((path / "metrics.json").read_text()).get("result") or {}).get("host")
        span = (host or {}).get("span_seconds") or 0
        cores: dict[str, float] = {}
        for other in (host or {}).get("busiest_others") or []:
            cores[other["name"]] = cores.get(other["name"], 0) + other["cpu_seconds"] / span
        per_cell.append(cores if span else {})
    totals = pd.DataFrame(per_cell).sum()
    if totals.empty:
        return None, []
    name = str(totals.idxmax())
    return name, [cell.get(name, 0.0) for cell in per_cell]


def overall(results: Path) -> list[dict]:
    """The report's overall verdict of each comparison (every device but the baseline),
    with the first check that decided it (empty where it is working)."""
    table = pd.read_csv(results / "tables" / "verdicts.csv", keep_default_na=False)
    table = table[table["status"] != "baseline"]
    return [
        {
            "workload": r.workload,
            "device": r.device,
            "status": r.status,
            "decided_by": r.first_failing,
        }
        for r in table.itertuples()
    ]


def run_summary(results: Path) -> dict:
    rows = comparisons(results)
    reached = rows["verdict"].isin(REACHED)
    withheld = [
        {
            "workload": r.workload,
            "device": r.device,
            "batch_size": int(r.batch_size),
            "reason": f"{r.verdict}: {r.reason}",
        }
        for r in rows[~reached].itertuples()
    ]
    return {
        "results": str(results),
        "comparisons": len(rows),
        "reached": int(reached.sum()),
        "withheld": withheld,
        "verdicts": [
            {
                "workload": r.workload,
                "device": r.device,
                "batch_size": int(r.batch_size),
                "verdict": r.verdict,
                "speedup": r.speedup,
                "interval": [r.speedup_low, r.speedup_high],
            }
            for r in rows.itertuples()
        ],
        "rounds": rounds(results),
        "repeat_spread": repeat_spread(results),
        "pairs": pairs(results),
        "window_halves": window_halves(results),
        "overall": overall(results),
    }


def repeat_spread(results: Path) -> list[dict]:
    """Per backend, how far a cell's ok repeats spread (highest ÷ lowest training
    throughput − 1): the median over the cells and the largest, with its cell. With 3
    repeats, a speedup median moves between runs by about this much."""
    runs = pd.read_csv(results / "tables" / "runs.csv")
    ok = runs[runs["status"] == "ok"]
    by_cell = ok.groupby(["backend", *CELL])["samples_per_s"].agg(["max", "min", "count"])
    by_cell = by_cell[by_cell["count"] >= 2]
    by_cell["spread"] = by_cell["max"] / by_cell["min"] - 1
    out = []
    for backend, g in by_cell.groupby(level="backend"):
        worst = g["spread"].idxmax()
        out.append(
            {
                "backend": backend,
                "cells": len(g),
                "median": round(float(g["spread"].median()), 4),
                "max": round(float(g["spread"].max()), 4),
                "max_at": [worst[1], worst[2], int(worst[3])],
            }
        )
    return out


def agreement(first: Mapping, second: Mapping) -> dict:
    """Same verdicts, and the largest difference of two medians as a fraction of the
    smaller (max ÷ min − 1), over the comparisons both runs have."""
    key = ("workload", "device", "batch_size")
    a = {tuple(v[k] for k in key): v for v in first["verdicts"]}
    b = {tuple(v[k] for k in key): v for v in second["verdicts"]}
    both = sorted(set(a) & set(b))
    differing = [list(k) for k in both if a[k]["verdict"] != b[k]["verdict"]]
    gaps = []
    for k in both:
        x, y = a[k]["speedup"], b[k]["speedup"]
        if x and y and x > 0 and y > 0:
            gaps.append((max(x, y) / min(x, y) - 1, list(k)))
    worst = max(gaps) if gaps else (None, None)
    apart = [list(k) for k in both if not _overlap(a[k].get("interval"), b[k].get("interval"))]
    return {
        "compared": len(both),
        "only_in_one": [list(k) for k in sorted(set(a) ^ set(b))],
        "same_verdicts": not differing and set(a) == set(b),
        "differing_verdicts": differing,
        "max_median_difference": None if worst[0] is None else round(worst[0], 4),
        "max_median_difference_at": worst[1],
        # each comparison's speedup interval in one run meets the other run's
        "intervals_overlap": not apart,
        "intervals_apart": apart,
    }


def observed_agreement(folders: Sequence[Path], tolerance: float = 0.15) -> dict:
    """Every pair of the pooled runs judged as the declared pair is: how many pairs had
    every speedup median within ``tolerance`` of the other's, the same verdicts, and
    every comparison's intervals overlapping (the bootstrap's estimate, checked against
    the runs themselves)."""
    runs = [run_summary(f) for f in folders]
    pairs_ = [
        agreement(runs[i], runs[j]) for i in range(len(runs)) for j in range(i + 1, len(runs))
    ]
    gaps = [p["max_median_difference"] for p in pairs_]
    return {
        "tolerance": tolerance,
        "pairs": len(pairs_),
        "within_tolerance": sum(g is not None and g <= tolerance for g in gaps),
        "same_verdicts": sum(p["same_verdicts"] for p in pairs_),
        "intervals_overlap": sum(p["intervals_overlap"] for p in pairs_),
    }


def _overlap(first: Sequence[float] | None, second: Sequence[float] | None) -> bool:
    """Two [low, high] intervals share a point; a missing or NaN end meets nothing."""
    ends = [float(v) for v in (*(first or ()), *(second or ())) if v is not None]
    if len(ends) != 4 or any(math.isnan(v) for v in ends):
        return False
    lo1, hi1, lo2, hi2 = ends
    return lo1 <= hi2 and lo2 <= hi1


def other_pairs(runs: Sequence[Mapping]) -> list[dict]:
    """The agreement of every pair of runs but the first two (the declared pair), each
    with its runs' numbers counted from 1."""
    return [
        {"runs": [i + 1, j + 1], **agreement(runs[i], runs[j])}
        for i in range(len(runs))
        for j in range(i + 1, len(runs))
        if (i, j) != (0, 1)
    ]


def injected(disturbances: Sequence[Mapping]) -> list[dict]:
    """One entry per disturbance kind, device and machine (the quiet condition
    included), the cells of every results file of that machine added up."""
    out: dict[tuple, dict] = {}
    for disturbance in disturbances:
        for condition, devices in disturbance["summary"].items():
            for device, e in devices.items():
                key = (condition, device, disturbance.get("machine"))
                entry = out.setdefault(
                    key,
                    {
                        "kind": condition,
                        "device": device,
                        "machine": key[2],
                        "cells": 0,
                        "flagged": 0,
                    },
                )
                entry["cells"] += e["cells"]
                entry["flagged"] += e.get("flagged", 0)
    return list(out.values())


def _run_lines(runs: Sequence[Mapping]) -> list[str]:
    """Per run: the verdicts reached and withheld, then the repeats' spread and pairs."""
    lines = []
    for i, run in enumerate(runs, 1):
        withheld = "; ".join(
            f"{w['workload']} {w['device']} bs {w['batch_size']} ({w['reason']})"
            for w in run["withheld"]
        )
        lines.append(
            f"- run {i} (`{run['results']}`): {run['reached']} of {run['comparisons']} "
            f"comparisons reached a speed verdict; withheld: {withheld or 'none'}"
        )
    for i, run in enumerate(runs, 1):
        lines += [
            f"- run {i}, spread of a cell's repeats on {s['backend']} (highest ÷ lowest "
            f"throughput − 1, {s['cells']} cells): median {s['median']:.1%}, largest "
            f"{s['max']:.1%} ({_cells([s['max_at']])})"
            for s in run.get("repeat_spread", [])
        ]
        lines += [
            f"- run {i}, the two halves of a cell's own window on {h['device']} (highest ÷ "
            f"lowest throughput − 1, {h['cells']} cells): median {h['median']:.1%}, 90th "
            f"percentile {h['p90']:.1%}"
            for h in run.get("window_halves", [])
        ]
        if run.get("pairs"):
            p = run["pairs"]
            lines.append(
                f"- run {i}, a comparison's two sides in one round ({p['pairs']} pairs): "
                f"started {p['median_gap_seconds']:g} s apart (median); correlation of "
                f"their deviations from their cells' means {p['deviation_correlation']:.2f}"
            )
    return lines


def markdown(out: Mapping) -> str:
    lines = [f"# GPU-host sweep: {out['made_at']}", "", out["how"], ""]
    lines += _run_lines(out["runs"])
    if out["agreement"] is None:
        lines.append("- agreement: one run only, nothing to compare")
    else:
        lines.append(_agreement_line("agreement of runs 1 and 2", out["agreement"]))
    lines += [
        _agreement_line(f"agreement of runs {p['runs'][0]} and {p['runs'][1]}", p)
        for p in out.get("agreement_other_pairs") or []
    ]
    for chance, seen in zip(
        out.get("agreement_chance") or [], out.get("observed_agreement") or [], strict=True
    ):
        lines += _pool_lines(chance, seen)
    runs = out["runs"]
    lines += ["", "| workload | device | bs | " + " | ".join(f"run {i}" for i in range(1, len(runs) + 1))
              + " |", "|---|---|---|" + "---|" * len(runs)]  # fmt: skip
    by_run = [
        {(v["workload"], v["device"], v["batch_size"]): v for v in r["verdicts"]} for r in runs
    ]
    for key in by_run[0]:
        cells = [_verdict(b[key]) if key in b else "–" for b in by_run]
        lines.append(f"| {key[0]} | {key[1]} | {key[2]} | " + " | ".join(cells) + " |")
    lines += ["", "The report's overall verdicts (speed, verification checks and parity):", "",
              "| run | workload | device | overall verdict | decided by |", "|---|---|---|---|---|"]  # fmt: skip
    for i, run in enumerate(out["runs"], 1):
        lines += [f"| {i} | {o['workload']} | {o['device']} | {o['status']} | "
                  f"{_short(o['decided_by'])} |" for o in run.get("overall", [])]  # fmt: skip
    referenced = [(i, r["overall_with_references"]) for i, r in enumerate(out["runs"], 1)
                  if r.get("overall_with_references")]  # fmt: skip
    if referenced:
        lines += ["", "The same records with float64 references made afterwards (the run "
                  "made none), their overall verdicts:", "",
                  "| run | references in | workload | device | overall verdict | decided by |",
                  "|---|---|---|---|---|---|"]  # fmt: skip
        for i, ref in referenced:
            lines += [f"| {i} | `{ref['results']}` | {o['workload']} | {o['device']} | "
                      f"{o['status']} | {_short(o['decided_by'])} |"
                      for o in ref["verdicts"]]  # fmt: skip
    lines += ["", "| injected | device | machine | cells | flagged |", "|---|---|---|---|---|"]
    lines += [f"| {e['kind']} | {e['device']} | {e.get('machine') or ''} | {e['cells']} | "
              f"{e['flagged']} |" for e in out["injected"]]  # fmt: skip
    lines += ["", "Other CPU time during cells, by round of repeats:", "",
              "| run | round | backend | cells | other cores (machine) | others' share of the "
              "cell's CPUs | busiest other process: cores | throughput ÷ round 0's (median) "
              "| disturbed |", "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for i, run in enumerate(out["runs"], 1):
        for r in run["rounds"]:
            busiest = r.get("busiest_other_process")
            lines.append(
                f"| {i} | {r['round']} | {r['backend']} | {r['cells']} | "
                f"{_range(r['other_cpu_cores_machine'])} | "
                f"{_range(r['others_share_of_cell_cpus'], percent=True)} | "
                f"{f'{busiest}: ' + _range(r['busiest_other_process_cores']) if busiest else '–'}"
                f" | {_ratio(r.get('throughput_vs_round_0'))} | {r['disturbed']} |"
            )
    return "\n".join(lines) + "\n"


def _pool_lines(chance: Mapping, seen: Mapping) -> list[str]:
    """One pool's expected agreement, its pairs' observed agreement, and its runs'
    pairing in time and cost of a round."""
    odds = ", ".join(f"{p:.0%} at {n}" for n, p in chance["chance_by_repeats"].items())
    pooled = ", ".join(f"`{f}`" for f in chance["pooled_from"])
    lines = [
        f"- agreement expected from the repeats of {pooled} (two runs, every speedup median "
        f"within {chance['tolerance']:.0%}; {chance['draws']} bootstrap draws of rounds, a "
        f"round's two sides drawn together): {odds} repeats",
        f"- the same runs' {seen['pairs']} pair{'' if seen['pairs'] == 1 else 's'}, each "
        f"judged as runs 1 and 2 are: every "
        f"speedup median within {seen['tolerance']:.0%} in {seen['within_tolerance']}, the "
        f"same verdicts in {seen['same_verdicts']}, every comparison's intervals overlapping "
        f"in {seen['intervals_overlap']}",
    ]
    lines += [
        f"- pooled `{folder}`: a round's two sides started {p['median_gap_seconds']:g} s "
        f"apart (median), correlation of their deviations {p['deviation_correlation']:.2f}"
        for folder, p in chance.get("pooled_pairs", {}).items()
        if p
    ]
    cost = [s for s in (chance.get("round_cell_seconds") or {}).values() if s is not None]
    if cost:
        lines.append(
            f"- a round of repeats (every cell once, wall_attempt_seconds added up; a run's "
            f"references and aggregation apart): {min(cost):g}–{max(cost):g} s in these runs"
        )
    return lines


def _agreement_line(what: str, ag: Mapping) -> str:
    same = "yes" if ag["same_verdicts"] else f"no ({_cells(ag['differing_verdicts'])})"
    line = f"- {what}: the same speed verdicts in both: {same}"
    if (gap := ag["max_median_difference"]) is not None:
        line += (f"; largest difference of two speedup medians {gap:.2%} "
                 f"({_cells([ag['max_median_difference_at']])})")  # fmt: skip
    if "intervals_overlap" in ag:
        apart = _cells(ag["intervals_apart"])
        line += f"; every comparison's intervals overlap: {'yes' if ag['intervals_overlap'] else f'no ({apart})'}"
    return line


def _cells(keys: Sequence[Sequence]) -> str:
    return "; ".join(f"{w} {d} bs {b}" for w, d, b in keys)


def _short(text: str, limit: int = 160) -> str:
    """The first clause of a verdict's reason, for a table cell (the JSON keeps it all)."""
    head = str(text or "").split("; ")[0].split(". ")[0].replace("|", "/")
    return head if len(head) <= limit else head[: limit - 1] + "…"


def _verdict(v: Mapping) -> str:
    if not v.get("speedup"):
        return v.get("verdict", "")
    low, high = v["interval"]
    return f"{v['verdict']} {v['speedup']:.3g}× ({low:.3g}–{high:.3g})"


def _range(span: Sequence[float] | None, percent: bool = False) -> str:
    if not span:
        return "–"
    fmt = (lambda x: f"{x:.1%}") if percent else (lambda x: f"{x:.2f}")
    return f"{fmt(span[0])}–{fmt(span[1])}"


def _ratio(value: float | None) -> str:
    return "–" if value is None or pd.isna(value) else f"{value:.2f}"
