"""What evaluation calibration costs beyond the evaluation it times, from run records.

For each ok training record with calibration passes: the calibration's wall seconds
(``result.eval.calibration.seconds``), the timed seconds of those passes (the passes of
``result.eval.passes`` with no epoch) and the difference per pass, which is what the
harness spends at each pass's edges (tracker reads, the device synchronizations, the
pass's bookkeeping); and the calibration's share of the cell's attempt. Grouped per
results folder and backend. Nothing is measured here: the records hold every number.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from pathlib import Path

from trainbench.common.records import read_record


def cell_costs(record: Mapping) -> dict | None:
    """One record's calibration cost, or None when it calibrated no pass."""
    if record.get("status") != "ok":
        return None
    evaluation = (record.get("result") or {}).get("eval") or {}
    calibration = evaluation.get("calibration") or {}
    passes = int(calibration.get("passes") or 0)
    if not passes:
        return None
    timed = sum(float(p["seconds"]) for p in evaluation.get("passes") or [] if p["epoch"] is None)
    wall = float(calibration["seconds"])
    attempt = (record.get("wall_time") or {}).get("attempt_seconds")
    return {
        "backend": record.get("backend"),
        "passes": passes,
        "timed_ms_per_pass": timed / passes * 1e3,
        "beyond_ms_per_pass": (wall - timed) / passes * 1e3,
        "calibration_seconds": wall,
        "attempt_seconds": attempt,
        "code": ((record.get("environment") or {}).get("code") or {}).get("label"),
    }


def _span(values: list[float]) -> dict:
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


def folder_costs(folder: Path) -> list[dict]:
    """Per backend of ``folder``'s records (``runs/**/metrics.json``): cells, passes,
    the time beyond the timed passes per pass, and calibration's share of the cells'
    attempts."""
    cells = [c for c in map(cell_costs, _records(folder)) if c is not None]
    out = []
    for backend in sorted({c["backend"] for c in cells}):
        mine = [c for c in cells if c["backend"] == backend]
        attempts = sum(c["attempt_seconds"] or 0.0 for c in mine)
        out.append(
            {
                "folder": str(folder),
                "backend": backend,
                "cells": len(mine),
                "passes": sum(c["passes"] for c in mine),
                "codes": sorted({c["code"] or "?" for c in mine}),
                "timed_ms_per_pass": _span([c["timed_ms_per_pass"] for c in mine]),
                "beyond_ms_per_pass": _span([c["beyond_ms_per_pass"] for c in mine]),
                "calibration_share_of_attempts": (
                    sum(c["calibration_seconds"] for c in mine) / attempts if attempts else None
                ),
            }
        )
    return out


def _records(folder: Path) -> Iterable[dict]:
    for path in sorted(folder.glob("runs/**/metrics.json")):
        yield read_record(path)


def markdown(result: Mapping) -> str:
    lines = [
        f"# Evaluation calibration's cost beyond what it times: {result['made_at']}",
        "",
        f"Command: `{result['command']}`. Every number is read from the records "
        "(`result.eval.calibration`, `result.eval.passes`, `wall_time`).",
        "",
        *([result["how"], ""] if result.get("how") else []),
        "| folder | backend | code | cells | passes | timed ms a pass | beyond ms a pass "
        "(min–max, median) | calibration's share of the attempts |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in result["rows"]:
        timed, beyond = row["timed_ms_per_pass"], row["beyond_ms_per_pass"]
        share = row["calibration_share_of_attempts"]
        lines.append(
            f"| `{row['folder']}` | {row['backend']} | {'; '.join(row['codes'])} | "
            f"{row['cells']} | {row['passes']} | {timed['min']:.3g}–{timed['max']:.3g} | "
            f"{beyond['min']:.3g}–{beyond['max']:.3g} ({beyond['median']:.3g}) | "
            f"{'' if share is None else f'{share:.0%}'} |"
        )
    return "\n".join(lines) + "\n"
