"""Lines beside the same-batch verdicts, for the console and the reports: the
samples-to-target check where it flags (``time_to_target``'s samples columns,
:mod:`trainbench.analysis.stats.convergence`) and the comparisons across batch sizes
(``across_batch_sizes``, :mod:`trainbench.analysis.stats.across_batch`; ``best_setting``
where the two best settings differ in batch size); and the time-to-target lines
(``best_setting``'s summaries, :mod:`trainbench.analysis.stats.best_setting`).

Rows are selected and their sentences, written by the statistics layer, prefixed; nothing
is computed. Standard library only: the console's logger plugin runs in every Snakemake
process and reads the tables with :mod:`csv` (values as text), the reports with pandas.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

# The flagging values of samples_check (trainbench.analysis.stats.convergence.FLAGGED).
FLAGGED = ("more samples", "fewer samples")
SAMPLES_SYMBOL = "🔎"
ACROSS_SYMBOL = "⇄"
TARGET_SYMBOL = "⏱"

Row = Mapping[str, Any]


def _size(value: Any) -> int | None:
    """A batch size from a table cell ("64", "64.0", 64; None where missing)."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return int(number) if number == number and number.is_integer() else None


def samples_check_lines(rows: Iterable[Row]) -> list[str]:
    """ "🔎 image_cnn at bs 32: cuda needs 2x the baseline's median samples (…)" for each
    ``time_to_target`` row whose samples check flags."""
    return [
        f"{SAMPLES_SYMBOL} {r['workload']} at bs {_size(r.get('batch_size'))}: {r['samples_note']}"
        for r in rows
        if r.get("samples_check") in FLAGGED and r.get("samples_note")
    ]


def across_lines(rows: Iterable[Row]) -> list[str]:
    """ "⇄ two_tower: across batch sizes, cuda at bs 512 trains 8x the samples/s of cpu at
    bs 64 (…): faster; not a same-batch verdict", one per ``across_batch_sizes`` row."""
    return [f"{ACROSS_SYMBOL} {r['workload']}: {r['summary']}" for r in rows if r.get("summary")]


def target_lines(rows: Iterable[Row], quote: str = "") -> list[str]:
    """ "⏱ image_cnn: cpu reaches accuracy ≥ 0.64 in 2.31 s of training (…)", one per
    ``best_setting`` row with a summary (each device at its best setting, the baseline's
    included). A row without a device speaks for its workloads itself ("No time to
    target for text_a, mlp_c: …") and is printed without a workload. ``quote``: around
    the workload's name ("`" in Markdown)."""
    lines = []
    for r in rows:
        if not r.get("summary"):
            continue
        who = f"{quote}{r['workload']}{quote}: " if r.get("device") else ""
        lines.append(f"{TARGET_SYMBOL} {who}{r['summary']}")
    return lines


def best_across_lines(rows: Iterable[Row]) -> list[str]:
    """Each ``best_setting`` comparison whose two best settings differ in batch size,
    labelled as a comparison across batch sizes."""
    lines = []
    for r in rows:
        mine, theirs = _size(r.get("batch_size")), _size(r.get("baseline_batch_size"))
        if r.get("verdict") == "baseline" or not r.get("summary") or None in (mine, theirs):
            continue
        if mine != theirs:
            lines.append(
                f"{ACROSS_SYMBOL} {r['workload']}: across batch sizes, time to target: "
                f"{r['summary']}"
            )
    return lines
