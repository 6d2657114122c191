"""Cell text and table layouts of the reports (:mod:`trainbench.analysis.report`).

A published-table row's values as cell text (missing values, flags, intervals with the
kind their row states, percentages), formatted with :mod:`trainbench.analysis.tables`; each
report table's columns (header, alignment, cell text) and the Markdown pipe table
they render to. Nothing here computes a statistic: rows are formatted, never reduced.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from trainbench.analysis import tables
from trainbench.analysis.tables import MISSING, bytes_text, compact, interval_text, ratio_text, sig

Row = dict[str, Any]


# ----------------------------------------------------------------------------- values


def plain_value(x: Any) -> Any:
    """None for a missing value, a plain Python value otherwise."""
    if tables.is_missing(x):
        return None
    return x.item() if hasattr(x, "item") and not isinstance(x, (str, bytes)) else x


def as_flag(x: Any) -> bool | None:
    """A table value as a flag ("true", "1", "yes" or truthy); None for a missing value."""
    x = plain_value(x)
    if x is None:
        return None
    return x.strip().lower() in ("true", "1", "1.0", "yes") if isinstance(x, str) else bool(x)


def text_of(x: Any) -> str:
    """Any value as cell text (integral floats from CSV round trips as integers)."""
    x = plain_value(x)
    if isinstance(x, str):
        return x
    if isinstance(x, float) and x.is_integer() and abs(x) < 1e15:
        x = int(x)
    return tables.cell_text(x)


def field_text(r: Row, key: str) -> str:
    """The cell text of a row's ``key`` (missing: absent or empty)."""
    return text_of(r.get(key))


def _pct(x: Any) -> str:
    return MISSING if plain_value(x) is None else f"{compact(float(x) * 100, 2)}%"


def _yes(x: Any) -> str:
    flag = as_flag(x)
    return MISSING if flag is None else ("yes" if flag else "no")


def list_text(x: Any) -> str:
    """A ";"-joined table value for reading."""
    return ", ".join(part.strip() for part in text_of(x).split(";"))


def _iv(low: Any, high: Any, kind: Any = None, unit: str = "") -> str:
    """ "1.2–1.4x (range of 3 runs)": an interval and the kind its row states."""
    text = interval_text(plain_value(low), plain_value(high))
    if text == MISSING:
        return text
    return f"{text}{unit} ({text_of(kind)})" if plain_value(kind) is not None else f"{text}{unit}"


def counted_text(pairs: Iterable[tuple[Any, str]]) -> str:
    """ "2 disturbed, 1 short window": each (count, word) with a nonzero count."""
    return ", ".join(f"{int(n)} {word}" for n, word in pairs if plain_value(n))


# ----------------------------------------------------------------------------- tables

Column = tuple[str, str, Callable[[Row], str]]  # header, "l" or "r", cell text


@dataclass(frozen=True)
class Table:
    """A report table's cell texts, ready for :func:`markdown` (false when it has no rows)."""

    header: tuple[str, ...]
    align: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]

    def __bool__(self) -> bool:
        return bool(self.rows)


def escape_cell(text: str) -> str:
    """Text safe inside a Markdown table cell or list line: pipes escaped, newlines spaces."""
    return text.replace("|", "\\|").replace("\n", " ")


def table(rows: Sequence[Row], columns: Sequence[Column]) -> Table:
    """The cell texts of ``rows`` under ``columns``."""
    return Table(
        tuple(c[0] for c in columns),
        tuple(c[1] for c in columns),
        tuple(tuple(escape_cell(c[2](r)) for c in columns) for r in rows),
    )


def markdown(t: Table) -> str:
    """A Markdown pipe table, one row a line, cells unpadded."""
    lines = ["| " + " | ".join(t.header) + " |"]
    lines.append("|" + "|".join("---:" if a == "r" else "---" for a in t.align) + "|")
    lines += ["| " + " | ".join(row) + " |" for row in t.rows]
    return "\n".join(lines)


# Column formats: cell text and alignment.
FORMATS: dict[str, tuple[Callable[[Any], str], str]] = {
    "t": (text_of, "l"), "i": (text_of, "r"), "n": (sig, "r"), "x": (ratio_text, "r"), "%": (_pct, "r"),
    "b": (bytes_text, "r"), "n4": (lambda x: sig(x, 4), "r"), "y": (_yes, "l"), "l": (list_text, "l"),
}  # fmt: skip


def cols(*specs: tuple) -> list[Column]:
    """Columns from (header, key or row function, format of :data:`FORMATS`); a key that
    counts things (:func:`.tables.is_count_column`) is shown exactly, whatever the format."""
    out = []
    for header, key, *fmt in specs:
        fn, align = FORMATS[fmt[0] if fmt else "t"]
        if isinstance(key, str) and tables.is_count_column(key):
            fn, align = (lambda x: tables.count_text(plain_value(x))), "r"
        out.append((header, align, key if callable(key) else lambda r, k=key, f=fn: f(r.get(k))))
    return out


def _speed_flags(r: Row) -> str:
    runs = (("disturbed_runs", "disturbed"), ("short_window_runs", "short window"),
            ("no_steady_state_runs", "no steady state"))  # fmt: skip
    text = counted_text((r.get(k), w) for k, w in runs)
    return ", ".join(filter(None, [text, "bimodal" if as_flag(r.get("bimodal")) else ""]))


def _ratio_iv(r: Row) -> str:
    return _iv(r.get("speedup_low"), r.get("speedup_high"), r.get("speedup_interval"), "x")


WORKLOAD = cols(("workload", "workload"))
KEYS = cols(("device", "device"), ("batch size", "batch_size", "i"))


def speed_columns(unit: str) -> list[Column]:
    """A speed table's columns (``unit``: what its median counts per second)."""
    return KEYS + cols(
        ("runs", "n", "i"), (f"{unit} (median)", "median", "n"),
        ("interval", lambda r: _iv(r.get("low"), r.get("high"), r.get("interval")), "i"),
        ("speedup", "speedup", "x"), ("speedup interval", _ratio_iv, "i"),
        ("verdict", "verdict"), ("quality", _speed_flags), ("reason", "reason"),
        ("windows cover", _windows),
    )  # fmt: skip


def _seconds_iv(r: Row) -> str:
    return _iv(r.get("low"), r.get("high"), r.get("interval"), " s")


TIME_TO_TARGET = KEYS + cols(
    ("repeats", "repeats", "i"), ("reached", "reached", "i"),
    ("training s to target (median)", "median_s", "n"), ("interval", _seconds_iv, "i"),
    ("wall s", "wall_median_s", "n"), ("samples", "samples_median", "n"),
    ("steps", "steps_median", "i"),
    ("energy J", "joules_median", "n"),
    ("times sooner", "speedup", "x"), ("interval ", _ratio_iv, "i"),
    ("verdict", "verdict"), ("reason", "reason"),
)  # fmt: skip
BEST_SETTING = cols(
    ("device", "device"), ("backend", "backend"), ("best batch size", "batch_size", "i"),
    ("of", "candidates", "i"), ("repeats", "repeats", "i"), ("reached", "reached", "i"),
    ("training s to target (median)", "median_s", "n"), ("interval", _seconds_iv, "i"),
    ("wall s", "wall_median_s", "n"), ("baseline", "baseline_device"),
    ("baseline batch size", "baseline_batch_size", "i"), ("times sooner", "speedup", "x"),
    ("interval ", _ratio_iv, "i"), ("verdict", "verdict"), ("reason", "reason"),
)  # fmt: skip


def target_text(r: Row | None) -> str:
    """ "accuracy ≥ 0.6, evaluated epochs 1" from a time_to_target row ("" without one)."""
    if r is None or plain_value(r.get("metric")) is None or plain_value(r.get("target")) is None:
        return ""
    unit, _, n = text_of(r.get("eval_every")).partition(" ")
    every = unit.removesuffix("s") if n == "1" else f"{n} {unit}"
    cadence = f"{n} times per epoch" if unit == "per_epoch" else f"every {every}"
    return (f"`{text_of(r.get('metric'))}` {text_of(r.get('direction'))} "
            f"{sig(r.get('target'))}, evaluated {cadence}")  # fmt: skip


def _windows(r: Row) -> str:
    """The schedule phase both sides' windows cover (empty: every step the same work)."""
    value = r.get("window_phase")
    return value if isinstance(value, str) else ""


# Each side's label from the diagnostic pass (step_breakdown), beside a speedup.
BOUNDS = cols(("bound", "bound"), ("baseline bound", "baseline_bound"))
STEP_BREAKDOWN = KEYS + cols(
    ("repeats", "repeats", "i"), ("step ms (median)", lambda r: _ms(r.get("steady_step_s")), "i"),
    ("data wait", lambda r: _share(r, "data_wait_share"), "i"),
    ("host issue", lambda r: _share(r, "host_issue_share"), "i"),
    ("device busy", lambda r: _share(r, "device_busy"), "i"),
    ("events' span", "device_span", "%"), ("bound", "bound"), ("reason", "reason"),
)  # fmt: skip


def _ms(value) -> str:
    try:
        return f"{1000 * float(value):.3g}"
    except (TypeError, ValueError):
        return "—"


def _share(r: Row, name: str) -> str:
    """A median share with its range over repeats, as percentages."""
    try:
        mid, low, high = (float(r.get(k)) for k in (name, f"{name}_low", f"{name}_high"))
    except (TypeError, ValueError):
        return "—"
    if mid != mid:  # NaN: cannot be split here (the CPU's host issue)
        return "—"
    return f"{100 * mid:.0f}% ({100 * low:.0f}–{100 * high:.0f})"


STABILITY = cols(
    ("device", "device"), ("status", "status"), ("cells", "cells", "i"), ("ok", "ok_cells", "i"),
    ("failed", "failed_cells", "i"), ("unavailable", "unavailable_cells", "i"),
    ("attempts", "attempts", "i"), ("failed attempts", "failed_attempts", "i"),
    ("failures by class", "failed_by_class"), ("within-run CV", "within_run_cv", "%"),
    ("between-run CV", "between_run_cv", "%"), ("epoch-time CV", "epoch_time_cv", "%"),
    ("slowest to fastest", "slowest_to_fastest", "x"), ("note", "note"),
)  # fmt: skip


def _parity_ci(prefix: str, percent: bool = False) -> Callable[[Row], str]:
    """ "[−0.012, +0.018]": a parity row's interval of the paired differences."""

    def text(r: Row) -> str:
        low, high = plain_value(r.get(f"{prefix}_low")), plain_value(r.get(f"{prefix}_high"))
        if low is None or high is None:
            return MISSING
        scale, unit = (100, "%") if percent else (1, "")
        return f"[{float(low) * scale:+.3g}{unit}, {float(high) * scale:+.3g}{unit}]"

    return text


PARITY = KEYS + cols(
    ("precision", "precision"), ("pairs", "pairs", "i"),
    ("steps vs float64", "reference_steps", "i"), ("steps compared", "compared_steps", "i"),
    ("drift / envelope", lambda r: _iv(r.get("drift_low"), r.get("drift_high"), r.get("interval"), "x")),
    ("device error", "device_error", "n"), ("baseline error", "baseline_error", "n"),
    ("drift ok", "drift_within", "y"), ("metric", "primary_metric"),
    ("final (mean)", "final_metric", "n"), ("baseline (mean)", "baseline_metric", "n"),
    ("paired difference", _parity_ci("metric")), ("gross margin", "metric_margin", "n"),
    ("final loss", "final_loss", "n"), ("loss paired difference", _parity_ci("loss", True)),
    ("loss gross margin", "loss_margin", "%"), ("eval vs float64", "eval_parity"),
    ("eval precision", "eval_precision"), ("eval error (relative RMSE)", "eval_error", "n"),
    ("eval float32 floor", "eval_floor", "n"), ("eval envelope", "eval_envelope", "n"),
    ("eval error / envelope", "eval_error_ratio", "n"), ("eval decided by", "eval_decided_by"),
    ("eval metric difference", "eval_metric_diff", "n"), ("parity", "parity"), ("rule", "rule"),
)  # fmt: skip
REPEATS = KEYS + cols(
    ("baseline", "baseline"), ("repeats", "repeats", "i"), ("records", "records", "i"),
    ("min", "min_repeats", "i"), ("max", "max_repeats", "i"),
    ("target half-width", "target_halfwidth", "%"), ("half-width", "halfwidth", "%"),
    ("converged", "converged", "y"), ("note", "note"),
)  # fmt: skip
MEMORY = KEYS + cols(
    ("runs", "n", "i"), ("initial", "memory_initial_bytes", "b"),
    ("peak", "memory_peak_bytes", "b"), ("limit", "memory_limit_bytes", "b"),
    ("peak share of limit", "peak_fraction_of_limit", "%"), ("how measured", "memory_method"),
)  # fmt: skip
CROSSOVER = cols(
    ("kind", "kind"), ("workload", "workload"), ("device", "device"),
    ("batch size", "batch_size", "i"), ("from", "crossover", "i"), ("finding", "finding"),
)  # fmt: skip
COLLAPSE = WORKLOAD + KEYS + cols(("evidence", "evidence"))
MATMUL = cols(
    ("n", "n", "i"), ("device", "device"), ("matmul batch", "batch_size", "i"),
    ("runs", "repeats", "i"), ("GFLOP/s (median)", "gflops", "n"),
    ("interval", lambda r: _iv(r.get("gflops_low"), r.get("gflops_high"), r.get("interval")), "i"),
    ("speedup", "speedup", "x"), ("speedup interval", _ratio_iv, "i"), ("verdict", "verdict"),
    ("quality", lambda r: counted_text(((r.get("noisy_runs"), "noisy"),
                                    (r.get("disturbed_runs"), "disturbed")))),
    ("reason", "reason"),
)  # fmt: skip
NUMERICS = cols(
    ("device", "device"), ("runs", "runs", "i"), ("canary passed", "numerics_pass", "y"),
    ("detail", "numerics_detail"),
)  # fmt: skip
WARNINGS = cols(
    ("kind", "kind"), ("workload", "workload"), ("device", "device"),
    ("batch size", "batch_size", "i"), ("rep", "rep", "i"), ("detail", "detail"),
)  # fmt: skip
ATTENTION = cols(
    ("workload", "workload", "l"), ("device", "device"), ("status", "status"),
    ("class", "error_class"), ("cells", "cells", "i"), ("batch sizes", "batch_sizes"),
    ("detail", "detail"),
)  # fmt: skip
CELL_TIME = cols(
    ("device", "device"), ("cells", "cells", "i"), ("cell s (median)", "median_cell_seconds", "n"),
    ("measurement share", "median_measurement_share", "%"),
    ("outside s (median)", "median_outside_seconds", "n"), ("outside s (max)", "max_outside_seconds", "n"),
    ("start + imports s", "median_process_start_and_imports_seconds", "n"),
    ("device init s", "median_device_initialisation_seconds", "n"),
    ("data + model s", "median_data_and_model_setup_seconds", "n"),
    ("diagnostic s", "median_step_breakdown_seconds", "n"),
    ("bookkeeping s", "median_training_bookkeeping_seconds", "n"),
    ("analysis s", "median_analysis_seconds", "n"), ("writing s", "median_writing_seconds", "n"),
    ("exit s", "median_exit_seconds", "n"), ("unattributed s (max)", "max_unattributed_seconds", "n"),
    ("forked", "forked_cells", "i"), ("server start-up s (once)", "server_startup_seconds", "n"),
)  # fmt: skip
ENVIRONMENT = cols(
    ("host", "host"), ("device", "device"), ("device name", "device_name"), ("CPU", "cpu_model"),
    ("cores", "logical_cores", "i"), ("OS", "os"), ("Python", "python"), ("torch", "torch"),
    ("other packages", "packages"), ("code", "code"),
    ("Slurm jobs", "slurm_job_ids"),
)  # fmt: skip
LABELS = KEYS + cols(
    ("label", "label"), ("runs", "n", "i"), ("precision", "precision", "n"),
    ("recall", "recall", "n"), ("F1", "f1", "n"), ("accuracy", "accuracy", "n"),
    ("F1 − baseline", "f1_minus_baseline", "n"), ("support", "support", "i"),
)  # fmt: skip


def _energy_flags(r: Row) -> str:
    runs = (("disturbed_runs", "disturbed"), ("short_window_runs", "short window"))
    return counted_text((r.get(k), w) for k, w in runs)


ENERGY = KEYS + cols(
    ("runs", "n", "i"), ("J/sample (median)", "joules_per_sample", "n"),
    ("interval", lambda r: _iv(r.get("jps_low"), r.get("jps_high"), r.get("interval")), "i"),
    ("samples/J", "samples_per_joule", "n"), ("energy ratio", "energy_ratio", "x"),
    ("ratio interval", lambda r: _iv(r.get("energy_ratio_low"), r.get("energy_ratio_high"),
                                     r.get("energy_ratio_interval"), "x"), "i"),
    ("verdict", "verdict"), ("domains", "domains"), ("mean W", "mean_watts", "n"),
    ("idle W", "idle_watts", "n"), ("quality", _energy_flags), ("reason", "reason"),
)  # fmt: skip


TASK = KEYS + cols(
    ("runs", "n", "i"), ("metric", "primary_metric"), ("best (median)", "best_metric", "n"),
    ("interval", lambda r: _iv(r.get("best_low"), r.get("best_high"), r.get("interval")), "t"),
    ("final", "final_metric", "n"), ("micro-F1", "micro_f1", "n"), ("macro-F1", "macro_f1", "n"),
    ("best epoch", "best_epoch", "n"),
)  # fmt: skip


def epoch_columns(rows: Sequence[Row]) -> list[Column]:
    """The per-epoch table with the eval metric columns the rows carry (at most six);
    "*" marks an epoch that is not full in every repeat, "(cold)" the cold eval pass."""
    skip = ("eval_seconds", "eval_cold")
    metrics = [k for k in (rows[0] if rows else {}) if k.startswith("eval_") and k not in skip]
    return KEYS + cols(
        ("epoch", lambda r: field_text(r, "epoch") + ("" if as_flag(r.get("full_epoch")) else " *"), "i"),
        ("runs", "n", "i"), ("train loss (median)", "train_loss", "n4"),
        ("min–max", lambda r: interval_text(r.get("train_loss_min"), r.get("train_loss_max"),
                                            FORMATS["n4"][0]), "i"),
        *((m[5:], m, "n") for m in metrics[:6]),
        ("time (timed, s)", "timed_seconds", "n"), ("samples/s", "samples_per_s", "n"),
        ("eval s", lambda r: sig(r.get("eval_seconds"))
                             + (" (cold)" if as_flag(r.get("eval_cold")) else ""), "i"),
    )  # fmt: skip
