"""The reports' parts beside the same-batch verdicts: the samples-to-target check (a
column of the time-to-target table and a line where it flags) and the section across
batch sizes (``across_batch_sizes`` and the ``best_setting`` comparisons whose best
settings differ in batch size). Rows are selected and formatted, never reduced
(:mod:`trainbench.analysis.report_tables`, :mod:`trainbench.analysis.beside_verdicts`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from trainbench.analysis.beside_verdicts import (
    across_lines,
    best_across_lines,
    samples_check_lines,
)
from trainbench.analysis.report_tables import (
    KEYS,
    Column,
    Row,
    cols,
    escape_cell,
    plain_value,
    table,
    text_of,
)
from trainbench.analysis.tables import MISSING, interval_text

SAMPLES_CHECK = cols(("samples check", "samples_check"))


def _interval(prefix: str, kind: str, unit: str = ""):
    """ "7.6–8.37x (range of 3 vs 3 runs)" from a row's ``<prefix>low``/``high`` and kind."""

    def text(r: Row) -> str:
        span = interval_text(
            plain_value(r.get(f"{prefix}low")), plain_value(r.get(f"{prefix}high"))
        )
        if span == MISSING or plain_value(r.get(kind)) is None:
            return span
        return f"{span}{unit} ({text_of(r.get(kind))})"

    return text


ACROSS: list[Column] = KEYS + cols(
    ("baseline", "baseline"), ("baseline batch size", "baseline_batch_size", "i"),
    ("same-batch sizes", "same_batch_sizes"), ("runs", "n", "i"),
    ("samples/s (median)", "median", "n"), ("interval", _interval("", "interval"), "i"),
    ("baseline runs", "baseline_n", "i"), ("baseline samples/s", "baseline_median", "n"),
    ("interval ", _interval("baseline_", "baseline_interval"), "i"),
    ("ratio", "speedup", "x"), ("ratio interval", _interval("speedup_", "speedup_interval", "x"), "i"),
    ("verdict", "verdict"), ("reason", "reason"), ("windows cover", "window_phase"),
)  # fmt: skip


def beside_context(t: Mapping[str, list[Row]], first: Sequence[Column]) -> dict:
    """The template's ``samples_checks`` (lines), ``across`` (table, ``first`` columns
    leading) and ``across_lines``."""
    lines = across_lines(t["across_batch_sizes"]) + best_across_lines(t["best_setting"])
    return {
        "samples_checks": [escape_cell(line) for line in samples_check_lines(t["time_to_target"])],
        "across": table(t["across_batch_sizes"], [*first, *ACROSS]),
        "across_lines": [escape_cell(line) for line in lines],
    }
