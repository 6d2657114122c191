"""Tables -> Markdown report, through Jinja2 templates in ``templates/``.

Verdict sentences are computed from the tables; nothing is typed in. The
report carries no timestamp, so the same records give the same bytes.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Mapping
from pathlib import Path

import jinja2
import pandas as pd

from . import analysis
from .records import atomic_write_text
from .workloads import WORKLOADS

TEMPLATES = Path(__file__).parent / "templates"


def fmt_num(value, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if isinstance(value, int) or (
        isinstance(value, float) and value.is_integer() and abs(value) < 1e15
    ):
        return f"{int(value):,}"
    value = float(value)
    magnitude = math.floor(math.log10(abs(value)))
    decimals = max(0, digits - 1 - magnitude)
    return f"{value:,.{decimals}f}"


def fmt_bytes(value) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    value = float(value)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.2f} {unit}"
        value /= 1024
    return str(value)


def fmt_speedup(value) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return f"{value:.2f}x"


@functools.lru_cache(maxsize=8)
def _environment(loader_dir: Path) -> jinja2.Environment:
    """One Jinja environment per template folder, so each template is compiled once
    per process (it caches compiled templates, reloading a template that changed)."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(loader_dir)),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters.update(num=fmt_num, bytes=fmt_bytes, speedup=fmt_speedup)
    return env


def clean(value):
    """CSV round trips turn ints into floats and None into NaN; undo both for display."""
    if value is None:
        return None
    if isinstance(value, float):
        if math.isnan(value):
            return None
        if value.is_integer():
            return int(value)
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):  # numpy scalars
        return clean(value.item())
    return value


def _records_of(frame: pd.DataFrame) -> list[dict]:
    if frame.empty:
        return []
    return [
        {k: clean(v) for k, v in row.items()} for row in frame.astype(object).to_dict("records")
    ]


def _clean_dict(values: dict) -> dict:
    return {k: (v if isinstance(v, dict) else clean(v)) for k, v in values.items()}


def _for_workload(frame: pd.DataFrame, workload: str) -> pd.DataFrame:
    """Rows of one workload, without the columns only other workloads fill."""
    if frame.empty:
        return frame
    return frame[frame["workload"] == workload].dropna(axis=1, how="all")


def training_verdicts(summary: pd.DataFrame, baselines: Mapping[str, str | None]) -> list[str]:
    """One sentence per non-baseline device and workload, computed from the summary."""
    lines = []
    if summary.empty or "speedup" not in summary:
        return lines
    for (workload, device), group in summary.groupby(["workload", "device"]):
        baseline = baselines.get(workload)
        if baseline is None or device == baseline or group["speedup"].isna().all():
            continue
        best = group.loc[group["speedup"].idxmax()]
        worst = group.loc[group["speedup"].idxmin()]
        word = "faster" if best["speedup"] >= 1 else "slower"
        lines.append(
            f"`{workload}` on `{device}`: at best {best['speedup']:.2f}x the `{baseline}` training "
            f"throughput (batch size {int(best['batch_size'])}, {word}); at worst "
            f"{worst['speedup']:.2f}x (batch size {int(worst['batch_size'])}). Medians of "
            f"{int(group['repeats'].min())}–{int(group['repeats'].max())} repeats."
        )
    return lines


def matmul_crossover(summary: pd.DataFrame, baseline: str | None) -> list[str]:
    """Where each device overtakes the baseline in the matmul sweep (from the medians)."""
    lines = []
    if summary.empty or baseline is None or "speedup" not in summary:
        return lines
    for (device, batch), group in summary.groupby(["device", "batch_size"]):
        if device == baseline:
            continue
        group = group.sort_values("n")
        faster = group[group["speedup"] > 1]
        if faster.empty:
            lines.append(
                f"`{device}` never beats `{baseline}` within n ≤ {int(group['n'].max())} (batch {int(batch)})."
            )
        else:
            n0 = int(faster["n"].iloc[0])
            lines.append(f"`{device}` first beats `{baseline}` at n = {n0} (batch {int(batch)}).")
    return lines


# The published tables each report shows, with the columns a reader needs.
REPORT_TABLE_COLUMNS = {
    "speedup": ["workload", "batch_size", "device", "n", "median", "ci_low", "ci_high", "speedup",
                "speedup_ci_low", "speedup_ci_high", "verdict"],
    "eval_speed": ["workload", "batch_size", "device", "n", "median", "speedup", "speedup_ci_low",
                   "speedup_ci_high", "verdict"],
    "stability": ["workload", "device", "cells", "attempts", "ok_cells", "failed_cells", "unavailable_cells",
                  "failed_by_class", "epoch_time_cv", "slowest_to_fastest", "unstable", "note"],
    "parity": ["workload", "device", "batch_size", "parity", "rule"],
    "memory": ["workload", "device", "batch_size", "memory_initial_bytes", "memory_peak_bytes", "memory_method"],
    "crossover": ["kind", "workload", "device", "batch_size", "crossover", "finding"],
    "collapse": ["workload", "device", "batch_size", "evidence"],
}  # fmt: skip


def published_tables(paths, workload: str | None = None) -> dict[str, str]:
    """Markdown of the analysis tables (optionally one workload's rows)."""
    from . import stats

    out = {}
    for path in paths or []:
        name = Path(path).stem
        if name not in REPORT_TABLE_COLUMNS:
            continue
        frame = analysis.read_table(path)
        if workload is not None and not frame.empty and "workload" in frame:
            frame = frame[frame["workload"] == workload].drop(columns=["workload"])
        columns = [c for c in REPORT_TABLE_COLUMNS[name] if c in frame.columns]
        out[name] = stats.to_markdown(frame[columns]) if not frame.empty else ""
    return out


def figure_links(paths, output: str) -> dict[str, str]:
    """Relative links from the report to each figure, so the Markdown renders on GitHub."""
    return {Path(p).stem: os.path.relpath(p, Path(output).parent) for p in paths or []}


def render_report(inputs: Mapping[str, str], output: str, baseline: str | None = None) -> str:
    runs = analysis.read_table(inputs["runs"])
    matmul = analysis.read_table(inputs["matmul"])
    environments = analysis.read_table(inputs["environments"])
    base = analysis.baseline_device(runs, baseline) if not runs.empty else None
    # Each workload against its own CPU baseline unless the config names one.
    throughput = analysis.throughput_summary(runs, baseline) if not runs.empty else pd.DataFrame()
    mm = analysis.matmul_summary(matmul, base)
    attention = analysis.cells_needing_attention(runs) if not runs.empty else pd.DataFrame()

    workloads = []
    for name in sorted(runs["workload"].unique()) if not runs.empty else []:
        wl_runs = runs[runs["workload"] == name]
        info = WORKLOADS.get(name)
        workloads.append(
            {
                "name": name,
                "kind": info.kind if info else "training",
                "seed": info.seed if info else "?",
                "counts": wl_runs["status"].value_counts().to_dict(),
                "baseline": analysis.baseline_device(wl_runs, baseline),
                "throughput": _records_of(throughput[throughput["workload"] == name])
                if not throughput.empty
                else [],
                "memory_methods": sorted(set(wl_runs["memory_method"].dropna())),
            }
        )

    reports = {}
    for path in inputs.get("workload_reports") or []:
        reports[Path(path).stem] = os.path.relpath(path, Path(output).parent)
    for wl in workloads:
        wl["report"] = reports.get(wl["name"])

    template_path = Path(inputs.get("template") or TEMPLATES / "report.md.j2")
    env = _environment(template_path.parent)
    text = env.get_template(template_path.name).render(
        baseline=base,
        n_records=len(runs),
        status_counts=runs["status"].value_counts().to_dict() if not runs.empty else {},
        workloads=workloads,
        verdicts=training_verdicts(throughput, {wl["name"]: wl["baseline"] for wl in workloads}),
        matmul=_records_of(mm),
        matmul_devices=sorted(mm["device"].unique()) if not mm.empty else [],
        crossover=matmul_crossover(mm, base),
        attention=_records_of(attention),
        environments=_records_of(environments),
        commits=sorted(set(runs["git_commit"].dropna())) if not runs.empty else [],
        skipped=_records_of(analysis.read_table(inputs["skipped"]))
        if inputs.get("skipped")
        else [],
        tables=published_tables(inputs.get("analysis")),
        table_links={
            Path(p).stem: os.path.relpath(Path(p).with_suffix(".md"), Path(output).parent)
            for p in inputs.get("analysis") or []
        },
        figures=figure_links(inputs.get("figures"), output),
    )
    atomic_write_text(output, text)
    return text


# ----------------------------------------------------------------------------- workload reports

CHECK_WORDS = {
    "placement": "model, batch tensors and optimizer state on the device",
    "autocast": "autocast active as requested",
    "fallback": "no CPU fallback",
}


def _all_true(series: pd.Series) -> bool:
    values = series.dropna()
    return bool(len(values)) and bool(
        values.astype(str).str.lower().isin(["true", "1", "1.0"]).all()
    )


def device_checks(ok_runs: pd.DataFrame) -> dict:
    """Verification facts of a device's ok runs, each a (passed, detail) pair."""
    n = len(ok_runs)
    requested = ok_runs["autocast_requested"].astype(str).str.lower().isin(["true", "1", "1.0"])
    active = ok_runs["autocast_active"].astype(str).str.lower().isin(["true", "1", "1.0"])
    fallback = ok_runs["cpu_fallback_ops"].fillna("").astype(str)
    placed = ok_runs["all_on_device"].astype(str).str.lower().isin(["true", "1", "1.0"])
    return {
        "placement": (bool(placed.all()), f"{int(placed.sum())}/{n} runs"),
        "autocast": (
            bool((requested == active).all()),
            f"requested in {int(requested.sum())}/{n} runs, active in {int(active.sum())}/{n}",
        ),
        "fallback": (
            bool((fallback == "").all()),
            ", ".join(sorted({op for ops in fallback for op in ops.split(";") if op}))
            or "none seen",
        ),
    }


def device_verdicts(
    runs: pd.DataFrame, throughput: pd.DataFrame, baseline: str | None
) -> list[dict]:
    """One computed verdict per device of a workload."""
    verdicts = []
    for device, group in runs.groupby("device", sort=True):
        ok = group[group["status"] == "ok"]
        failed = group[group["status"] == "failed"]
        unavailable = group[group["status"] == "unavailable"]
        entry = {"device": device, "symbol": "", "text": ""}
        if ok.empty and not unavailable.empty and failed.empty:
            reason = (
                unavailable["reason"].dropna().iloc[0]
                if unavailable["reason"].notna().any()
                else "?"
            )
            entry.update(symbol="⚪", text=f"not measured on this machine: unavailable ({reason}).")
            verdicts.append(entry)
            continue
        parts = []
        if not failed.empty:
            classes = ", ".join(
                f"{c} ×{k}" for c, k in failed["error_class"].value_counts().items()
            )
            parts.append(f"{len(failed)} of {len(group)} cells failed ({classes})")
        checks = device_checks(ok) if not ok.empty else {}
        failed_checks = [CHECK_WORDS[k] for k, (passed, _) in checks.items() if not passed]
        speed = (
            throughput[throughput["device"] == device] if not throughput.empty else pd.DataFrame()
        )
        speedup = (
            speed["speedup"].median() if not speed.empty and "speedup" in speed else float("nan")
        )
        if device == baseline:
            symbol = "❌" if not failed.empty else "✅"
            parts.insert(0, f"the baseline: {len(ok)} ok run(s)")
        elif ok.empty:
            symbol = "❌"
        elif failed_checks:
            symbol = "⚠️"
            parts.append("verification failed: " + "; ".join(failed_checks))
        elif math.isnan(speedup):
            symbol = "⚠️"
            parts.append(
                "every verification check passed, but no baseline to compare the speed with"
            )
        elif speedup > 1 and failed.empty:
            symbol = "✅"
            parts.insert(
                0,
                f"working: every verification check passed in all {len(ok)} ok runs and "
                f"training runs at {speedup:.2f}x the `{baseline}` throughput (median over batch sizes)",
            )
        else:
            symbol = "⚠️"
            parts.append(
                f"every verification check passed; training runs at {speedup:.2f}x the `{baseline}` throughput"
            )
        entry.update(symbol=symbol, text="; ".join(parts) + ".")
        verdicts.append(entry)
    return verdicts


def render_workload_report(
    workload: str, inputs: Mapping[str, str], output: str, baseline: str | None = None
) -> str:
    runs_all = analysis.read_table(inputs["runs"])
    runs = runs_all[runs_all["workload"] == workload] if not runs_all.empty else runs_all
    epochs = _for_workload(analysis.read_table(inputs["epochs"]), workload)
    per_label = _for_workload(analysis.read_table(inputs["per_label_runs"]), workload)
    environments = analysis.read_table(inputs["environments"])
    base = analysis.baseline_device(runs, baseline) if not runs.empty else None
    throughput = analysis.throughput_summary(runs, base) if not runs.empty else pd.DataFrame()
    ok = runs[runs["status"] == "ok"] if not runs.empty else runs

    checklists = []
    for device, group in ok.groupby("device", sort=True):
        first = group.iloc[0]
        checks = device_checks(group)
        checklists.append(
            _clean_dict(
                {
                    "device": device,
                    "label": ", ".join(sorted(set(group["device_label"]))),
                    "runs": len(group),
                    "parameters": first["placement_parameters"],
                    "batch": first["placement_batch"],
                    "optimizer_state": first["placement_optimizer_state"],
                    "checks": {
                        k: {"passed": v[0], "detail": v[1], "words": CHECK_WORDS[k]}
                        for k, v in checks.items()
                    },
                    "memory_initial": group["memory_initial_bytes"].median(),
                    "memory_peak": group["memory_peak_bytes"].median(),
                    "memory_method": first["memory_method"],
                    "autocast_dtype": first["autocast_dtype"],
                    "autocast_output_dtype": first["autocast_output_dtype"],
                    "device_name": first["device_name"],
                    "torch": first["torch_version"],
                    "threads": group["torch_threads"].iloc[0],
                }
            )
        )

    epoch_table, epoch_metric_columns = [], []
    if not epochs.empty:
        metric_cols = [
            c
            for c in epochs.columns
            if c.startswith("eval_")
            and c not in ("eval_seconds", "eval_samples_per_s", "eval_samples")
        ]
        epoch_metric_columns = [c for c in metric_cols if c != "eval_loss"][:6]
        grouped = epochs.groupby(["device", "batch_size", "epoch"])
        epoch_table = _records_of(
            grouped.agg(
                repeats=("rep", "count"),
                train_loss=("train_loss", "median"),
                timed_seconds=("timed_seconds", "median"),
                samples_per_s=("samples_per_s", "median"),
                eval_seconds=("eval_seconds", "median"),
                **{c: (c, "median") for c in metric_cols},
            ).reset_index()
        )
    label_table = []
    if not per_label.empty:
        grouped = per_label.groupby(["device", "batch_size", "label"], sort=False)
        labels = grouped.agg(
            repeats=("rep", "count"),
            precision=("precision", "median"),
            recall=("recall", "median"),
            f1=("f1", "median"),
            accuracy=("accuracy", "median"),
            support=("support", "median"),
        ).reset_index()
        if base is not None:
            ref = labels[labels["device"] == base][["batch_size", "label", "f1"]].rename(
                columns={"f1": "_base_f1"}
            )
            labels = labels.merge(ref, on=["batch_size", "label"], how="left")
            labels["f1_vs_baseline"] = labels["f1"] - labels["_base_f1"]
            labels = labels.drop(columns=["_base_f1"])
        label_table = _records_of(labels)

    configuration = []
    if not ok.empty:
        for device, group in ok.groupby("device", sort=True):
            first = group.iloc[0]
            configuration.append(
                _clean_dict(
                    {
                        "device": device,
                        "model": first["model_name"],
                        "parameters": first["parameters"],
                        "batch_sizes": ", ".join(map(str, sorted(set(group["batch_size"])))),
                        "accumulation": first["gradient_accumulation"],
                        "effective": ", ".join(
                            map(
                                str, sorted(set(group["effective_batch_size"].dropna().astype(int)))
                            )
                        ),
                        "lr": first["learning_rate"],
                        "optimizer": first["optimizer"],
                        "epochs": first["epochs"],
                        "max_length": first["max_length"],
                        "amp": first["autocast_dtype"] or "off",
                        "scaler": first["grad_scaler"],
                        "threads": first["torch_threads"],
                    }
                )
            )
    env_rows = (
        _records_of(environments[environments["device"].isin(set(runs["device"]))])
        if not environments.empty and not runs.empty
        else []
    )

    template_path = Path(inputs.get("template") or TEMPLATES / "workload_report.md.j2")
    env = _environment(template_path.parent)
    info = WORKLOADS.get(workload)
    text = env.get_template(template_path.name).render(
        workload=workload,
        seed=info.seed if info else "?",
        baseline=base,
        counts=runs["status"].value_counts().to_dict() if not runs.empty else {},
        verdicts=device_verdicts(runs, throughput, base) if not runs.empty else [],
        throughput=_records_of(throughput),
        checklists=checklists,
        epochs=epoch_table,
        epoch_metrics=epoch_metric_columns,
        labels=label_table,
        aggregates=_records_of(
            ok.groupby(["device", "batch_size"])
            .agg(
                repeats=("rep", "count"),
                best_metric=("best_metric", "median"),
                micro_f1=("micro_f1", "median"),
                macro_f1=("macro_f1", "median"),
                best_epoch=("best_epoch", "median"),
            )
            .reset_index()
        )
        if not ok.empty
        else [],
        primary_metric=ok["primary_metric"].iloc[0] if not ok.empty else None,
        configuration=configuration,
        attention=_records_of(analysis.cells_needing_attention(runs)) if not runs.empty else [],
        environments=env_rows,
        tables=published_tables(inputs.get("analysis"), workload),
        figures=figure_links(inputs.get("figures"), output),
    )
    atomic_write_text(output, text)
    return text
