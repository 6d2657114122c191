"""The bundled workloads' default quality targets, by a stated rule, from a CPU run's
quality curves (docs/statistics.md §4, "The target").

    .venv/bin/python benchmarks/default_targets.py results/tables/quality.csv \
        --out benchmarks/results/default-targets-cpu-<date>.md

Rule, per workload over every CPU cell (each device column and batch size) and repeat:
the **start** is the median of the first evaluation's metric; the **plateau** is the
lowest final metric of any repeat (the quality every repeat of the default run converges
to at least); the target is 90% of the way from start to plateau, rounded toward the
start to two significant digits (so that a CPU whose rounding differs a little still
reaches it). It is then checked against the same curves: reached by every repeat, and
in the median repeat no earlier than the 3rd evaluation. MLPerf Training sets its
targets near the reference's converged quality in the same spirit.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

from trainbench.common.atomic_files import atomic_write_text  # noqa: E402
from trainbench.config.targets import PRIMARY_METRICS  # noqa: E402

FRACTION = 0.9
EARLIEST_EVALUATION = 3  # 1-based: the median repeat reaches the target no sooner


def round_toward(value: float, start: float, digits: int = 2) -> float:
    """``value`` to ``digits`` significant digits, rounded toward ``start``."""
    if value == 0:
        return 0.0
    scale = 10 ** (digits - 1 - math.floor(math.log10(abs(value))))
    if value >= start:  # the tolerance keeps 0.82 from flooring to 0.81
        return math.floor(value * scale + 1e-9) / scale
    return math.ceil(value * scale - 1e-9) / scale


def curves(quality: pd.DataFrame, workload: str) -> pd.DataFrame:
    """The CPU curves of ``workload``'s primary metric: one row per evaluation."""
    column = f"eval_{PRIMARY_METRICS[workload]}"
    rows = quality[(quality["workload"] == workload) & quality["device"].str.startswith("cpu")]
    return rows[["device", "batch_size", "rep", "point", column]].rename(columns={column: "metric"})


def choose(rows: pd.DataFrame) -> dict:
    """The rule's target for one workload's curves, and its check."""
    runs = rows.sort_values("point").groupby(["device", "batch_size", "rep"])["metric"]
    start = float(runs.first().median())
    plateau = float(runs.last().min())
    target = round_toward(start + FRACTION * (plateau - start), start)
    reached_at = runs.apply(lambda m: next((i + 1 for i, v in enumerate(m) if v >= target), 0))
    cells = reached_at.groupby(level=["device", "batch_size"])
    medians = cells.median()
    return {
        "start": start,
        "plateau": plateau,
        "target": target,
        "evaluations": int(runs.size().median()),
        "every_repeat_reaches": bool((reached_at > 0).all()),
        "median_evaluation": {f"{d} bs {b}": float(m) for (d, b), m in medians.items()},
        "holds": bool((reached_at > 0).all() and (medians >= EARLIEST_EVALUATION).all()),
    }


def markdown(choices: dict[str, dict], source: str) -> str:
    lines = [
        "| workload | metric | start (median first evaluation) | plateau (lowest final) | "
        "target | evaluations per run | every repeat reaches it | median repeat reaches it at "
        "evaluation | rule holds |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, c in choices.items():
        at = "; ".join(f"{cell}: {m:g}" for cell, m in c["median_evaluation"].items())
        lines.append(
            f"| {name} | {PRIMARY_METRICS[name]} | {c['start']:.3g} | {c['plateau']:.3g} | "
            f"{c['target']:g} | {c['evaluations']} | {'yes' if c['every_repeat_reaches'] else 'no'}"
            f" | {at} | {'yes' if c['holds'] else 'no'} |"
        )
    return (
        f"Targets by the rule of benchmarks/default_targets.py (90% of the way from the "
        f"median first evaluation to the lowest final one, rounded toward the start to two "
        f"significant digits), from `{source}`.\n\n" + "\n".join(lines) + "\n"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("quality", help="a run's results/tables/quality.csv")
    parser.add_argument("--out", help="write the table (Markdown, with provenance) here")
    args = parser.parse_args(argv)
    quality = pd.read_csv(args.quality)
    choices = {
        name: choose(curves(quality, name))
        for name in PRIMARY_METRICS
        if not curves(quality, name).empty
    }
    text = markdown(choices, args.quality)
    print(text)
    if args.out:
        atomic_write_text(Path(args.out), provenance_block(Path(args.quality)) + "\n" + text)
    return 0 if all(c["holds"] for c in choices.values()) else 1


def provenance_block(quality: Path) -> str:
    """The run's commit, code, machine and dates, from its runs.csv beside quality.csv."""
    runs = pd.read_csv(quality.with_name("runs.csv"))
    runs = runs[runs["status"] == "ok"]
    facts = {
        "records": len(runs),
        "commit": ", ".join(sorted(set(runs["git_commit"].dropna().astype(str)))),
        "source SHA-256": ", ".join(sorted(set(runs["code"].dropna().astype(str)))),
        "machine": ", ".join(sorted(set(runs["cpu_model"].dropna().astype(str)))),
        "made": pd.Timestamp.now(tz="UTC").strftime("%Y-%m-%d %H:%M UTC"),
    }
    return "\n".join(f"- {key}: {value}" for key, value in facts.items()) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
