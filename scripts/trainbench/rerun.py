"""Which cells to run again: the failed ones (optionally of one device, workload
or error class), read from the records themselves."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .records import RecordError, read_record


def failed_records(
    results_dir: str | Path = "results",
    device: str | None = None,
    workload: str | None = None,
    error_class: str | None = None,
) -> list[Path]:
    """metrics.json files of failed cells. A file that is not a valid record counts
    as failed too (it must be rebuilt), so a corrupted record is never left behind."""
    runs = Path(results_dir) / "runs"
    chosen = []
    for path in sorted(runs.glob("*/*/bs*/rep*/metrics.json")):
        wl, dev = path.parts[-5], path.parts[-4]
        if (device and dev != device and dev.split("-")[0] != device) or (
            workload and wl != workload
        ):
            continue
        try:
            record = read_record(path)
        except RecordError:
            chosen.append(path)
            continue
        if record["status"] != "failed":
            continue
        if error_class and (record.get("error") or {}).get("class") != error_class:
            continue
        chosen.append(path)
    return chosen


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Print the records of failed cells, for `snakemake --forcerun`.",
        epilog="snakemake --cores 1 results/report.md --forcerun $(python scripts/failed_runs.py --device mps)",
    )
    parser.add_argument("--results", default="results", help="results folder (default: results)")
    parser.add_argument("--device", help="only this device (mps, cuda, cpu, cpu-t4, ...)")
    parser.add_argument("--workload", help="only this workload")
    parser.add_argument("--error-class", help="only this failure class (oom, signal, ...)")
    parser.add_argument("--json", action="store_true", help="print a JSON list instead of paths")
    args = parser.parse_args(argv)
    paths = failed_records(args.results, args.device, args.workload, args.error_class)
    if args.json:
        print(json.dumps([str(p) for p in paths]))
    else:
        print(" ".join(str(p) for p in paths))
    if not paths:
        print("no failed cells", file=sys.stderr)
    return 0
