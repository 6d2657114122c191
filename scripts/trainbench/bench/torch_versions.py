"""The torch-versions comparison's results file: two torch releases installed on one
machine, each running benchmarks/suites/torch-versions.yaml into its own results folder,
merged by ``make redraw ... COMPARE=software`` (benchmarks/torch_versions.py has the
commands). Everything here is copied from the merged run's published tables (comparison,
software, duplicates, environments), never computed again: the statistics layer made
every number once."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import tarfile
from collections.abc import Mapping, Sequence
from pathlib import Path

COMPARISON_FIELDS = (
    "workload", "machine_device", "batch_size", "side", "baseline_side", "repeats",
    "baseline_repeats", "median", "baseline_median", "ratio", "low", "high", "interval",
    "verdict", "ttt_metric", "ttt_direction", "ttt_target", "ttt_reached", "ttt_repeats",
    "ttt_baseline_reached", "ttt_baseline_repeats", "ttt_ratio", "ttt_low", "ttt_high",
    "ttt_interval", "ttt_verdict", "line",
)  # fmt: skip


def _rows(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def _number(text: str) -> float | int | str | None:
    if text in ("", None):
        return None
    for kind in (int, float):
        with contextlib.suppress(ValueError):
            return kind(text)
    return text


def summary(merged: Path, twice: Path | None = None) -> dict:
    """The comparison of ``merged`` (a records-only run over the two versions' folders)
    and, with ``twice`` (the same records merged with one folder included twice), how
    many duplicates were dropped."""
    tables = merged / "tables"
    comparison = [
        {k: _number(row.get(k, "")) if k not in ("line", "side", "baseline_side") else row.get(k)
         for k in COMPARISON_FIELDS}
        for row in _rows(tables / "comparison.csv")
    ]  # fmt: skip
    environments = _rows(tables / "environments.csv")
    machines = sorted(
        {f"{e['cpu_model']}, {e['logical_cores']} logical CPUs" for e in environments}
    )
    out = {
        "machine": "; ".join(machines),
        "software": [
            {"device": e["device"], "torch": e["torch"], "python": e["python"], "code": e["code"]}
            for e in environments
        ],
        "software_differences": _rows(tables / "software.csv"),
        "comparison": comparison,
        "verdicts": {row["line"]: row["verdict"] for row in _rows(tables / "comparison.csv")},
    }
    if twice is not None:
        kinds = [row["kind"] for row in _rows(twice / "tables" / "duplicates.csv")]
        runs = _rows(twice / "tables" / "runs.csv")
        out["included_twice"] = {
            "folder": str(twice),
            "duplicates_dropped": kinds.count("duplicate"),
            "conflicts": kinds.count("conflict"),
            "records_in_tables": len(runs),
            "same_comparison": [r["line"] for r in _rows(twice / "tables" / "comparison.csv")]
            == [r["line"] for r in _rows(tables / "comparison.csv")],
        }
    return out


def markdown(result: Mapping, how: str) -> str:
    """The results file's Markdown: how it was made, the ⇄ lines, the table."""
    lines = [
        "# Two torch versions on one machine, compared on purpose",
        "",
        f"Made {result['made_at']} on {result['machine']}, code `{result['code']}`.",
        "",
        how.strip(),
        "",
        "## Software",
        "",
        "| device | torch | python | code |",
        "|---|---|---|---|",
        *(
            f"| {s['device']} | {s['torch']} | {s['python']} | {s['code']} |"
            for s in result["software"]
        ),
        "",
        "What differed, and whether it split the records (`tables/software.csv`):",
        "",
        *(
            f"- {d['field']}: {d['values']}: split {d['split']} ({d['reason']})"
            for d in result["software_differences"]
        ),  # fmt: skip
        "",
        "## Comparison (`tables/comparison.csv`)",
        "",
        *(f"- {row['line']}" for row in result["comparison"]),
        "",
    ]
    twice = result.get("included_twice")
    if twice:
        lines += [
            "## A folder included twice",
            "",
            f"The same records merged with the 2.5.1 folder and a copy of it "
            f"(`{twice['folder']}`): {twice['duplicates_dropped']} duplicate records dropped, "
            f"{twice['conflicts']} conflicts, {twice['records_in_tables']} records in the "
            "tables; the comparison lines are "
            + ("the same." if twice["same_comparison"] else "**not** the same."),
            "",
        ]
    return "\n".join(lines)


def pack_records(folders: Sequence[Path], out: Path) -> None:
    """The records (and float64 references) of ``folders`` as a reproducible .tgz:
    sorted names, no owner or time, so the archive is the same bytes for the same files."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz", format=tarfile.PAX_FORMAT) as tar:
        for folder in folders:
            files = sorted(
                p for pattern in ("runs/**/metrics.json", "references/**/reference.json")
                for p in folder.glob(pattern)
            )  # fmt: skip
            for path in files:
                info = tarfile.TarInfo(str(Path(folder.name) / path.relative_to(folder)))
                data = path.read_bytes()
                info.size, info.mtime, info.mode = len(data), 0, 0o644
                tar.addfile(info, io.BytesIO(data))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(buffer.getvalue())


def write(result: Mapping, how: str, json_path: Path, md_path: Path) -> None:
    from trainbench.common.atomic_files import atomic_write_text

    atomic_write_text(json_path, json.dumps(result, indent=1, ensure_ascii=False) + "\n")
    atomic_write_text(md_path, markdown(result, how))
