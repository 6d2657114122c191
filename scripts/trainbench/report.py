"""Tables -> Markdown report, through Jinja2 templates in ``templates/``.

Verdict sentences are computed from the tables; nothing is typed in. The
report carries no timestamp, so the same records give the same bytes.
"""

from __future__ import annotations

import math
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
    value = float(value)
    if value == 0:
        return "0"
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


def _environment(loader_dir: Path) -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(loader_dir)),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters.update(num=fmt_num, bytes=fmt_bytes, speedup=fmt_speedup)
    return env


def _records_of(frame: pd.DataFrame) -> list[dict]:
    return [] if frame.empty else frame.astype(object).where(frame.notna(), None).to_dict("records")


def training_verdicts(summary: pd.DataFrame, baseline: str | None) -> list[str]:
    """One sentence per accelerator and workload, computed from the summary."""
    lines = []
    if summary.empty or baseline is None or "speedup" not in summary:
        return lines
    for (workload, device), group in summary.groupby(["workload", "device"]):
        if device == baseline or group["speedup"].isna().all():
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


def render_report(inputs: Mapping[str, str], output: str, baseline: str | None = None) -> str:
    runs = analysis.read_table(inputs["runs"])
    matmul = analysis.read_table(inputs["matmul"])
    environments = analysis.read_table(inputs["environments"])
    base = analysis.baseline_device(runs, baseline) if not runs.empty else None
    throughput = analysis.throughput_summary(runs, base) if not runs.empty else pd.DataFrame()
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
                "throughput": _records_of(throughput[throughput["workload"] == name])
                if not throughput.empty
                else [],
                "memory_methods": sorted(set(wl_runs["memory_method"].dropna())),
            }
        )

    template_path = Path(inputs["template"]) if "template" in inputs else TEMPLATES / "report.md.j2"
    env = _environment(template_path.parent)
    text = env.get_template(template_path.name).render(
        baseline=base,
        n_records=len(runs),
        status_counts=runs["status"].value_counts().to_dict() if not runs.empty else {},
        workloads=workloads,
        verdicts=training_verdicts(throughput, base),
        matmul=_records_of(mm),
        matmul_devices=sorted(mm["device"].unique()) if not mm.empty else [],
        crossover=matmul_crossover(mm, base),
        attention=_records_of(attention),
        environments=_records_of(environments),
        commits=sorted(set(runs["git_commit"].dropna())) if not runs.empty else [],
    )
    atomic_write_text(output, text)
    return text
