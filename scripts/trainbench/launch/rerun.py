"""Which cells to run again: the failed ones (optionally of one device, workload or
error class), read from the records themselves; unavailable ones too when asked,
or when the torch build that found them unavailable is no longer the one installed.
Records of cells the config no longer has are skipped and listed, never rerun."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

from trainbench.common.records import RecordError, read_record
from trainbench.config.device_ids import backend_of
from trainbench.config.files import ConfigRefused


@dataclass
class Selection:
    rerun: list[Path] = field(default_factory=list)
    outside_matrix: list[Path] = field(default_factory=list)
    reasons: dict[str, str] = field(default_factory=dict)


def installed_torch() -> str | None:
    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return None


def _wanted(record: dict, path: Path, error_class, include_unavailable, torch) -> str | None:
    """Why this record's cell should run again, or None."""
    status = record["status"]
    if status == "failed":
        if error_class and (record.get("error") or {}).get("class") != error_class:
            return None
        return f"failed ({(record.get('error') or {}).get('class')})"
    if status == "unavailable":
        found_with = (record.get("environment") or {}).get("torch_version")
        if include_unavailable:
            return "unavailable (--include-unavailable)"
        if found_with and torch and found_with != torch:
            return f"unavailable with torch {found_with}; torch {torch} is installed now"
    return None


def select_records(
    results_dir: str | Path = "results",
    device: str | None = None,
    workload: str | None = None,
    error_class: str | None = None,
    include_unavailable: bool = False,
    matrix: set[str] | None = None,
) -> Selection:
    """The metrics.json files to rerun. A file that is not a valid record counts as
    failed (it must be rebuilt). ``matrix``: the relpaths (workload/device/bsN/repN)
    of the current config's cells; records outside it are listed apart."""
    runs = Path(results_dir) / "runs"
    torch = installed_torch()
    chosen = Selection()
    for path in sorted(runs.glob("*/*/bs*/rep*/metrics.json")):
        wl, dev = path.parts[-5], path.parts[-4]
        if (device and dev != device and backend_of(dev) != device) or (
            workload and wl != workload
        ):
            continue
        try:
            reason = _wanted(read_record(path), path, error_class, include_unavailable, torch)
        except RecordError as error:
            reason = f"not a valid record: {error}"
        if reason is None:
            continue
        relpath = "/".join(path.parts[-5:-1])
        if matrix is not None and relpath not in matrix:
            chosen.outside_matrix.append(path)
            continue
        chosen.rerun.append(path)
        chosen.reasons[str(path)] = reason
    return chosen


def read_config(configfiles: list[str]) -> dict | None:
    """The config the workflow would use: config.yaml, then each --configfile over
    it, as Snakemake merges them (None when config.yaml is missing: no workflow
    here). Raises ConfigRefused, as the workflow would refuse it."""
    from trainbench.config import read_merged_config

    if not Path(configfiles[0]).exists():
        return None
    return read_merged_config(configfiles)[0]


def matrix_cells(config: dict | None) -> set[str] | None:
    """Every cell (and every repeat it may get) of ``config``."""
    from trainbench import config as tbconfig

    if config is None:
        return None
    return {cell.relpath for cell in tbconfig.expand_matrix(config, reps="max")}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Print the records of cells to run again, for `snakemake --forcerun`.",
        epilog="snakemake --cores 1 results/report.md --forcerun $(python scripts/failed_runs.py --device mps)",
    )
    parser.add_argument(
        "--results", help="results folder (default: results/, or results/<run_name>/ of the config)"
    )
    parser.add_argument("--device", help="only this device (mps, cuda, cpu, cpu-t4, ...)")
    parser.add_argument("--workload", help="only this workload")
    parser.add_argument("--error-class", help="only this failure class (oom, signal, ...)")
    parser.add_argument(
        "--include-unavailable",
        action="store_true",
        help="also cells recorded as unavailable (e.g. after installing a torch with MPS/CUDA); "
        "they are included anyway when the torch that found them unavailable is not installed now",
    )
    parser.add_argument(
        "--configfile",
        nargs="*",
        default=[],
        help="the config files of the run (config.yaml is read first); records of cells "
        "they no longer have are skipped and listed",
    )
    parser.add_argument("--json", action="store_true", help="print a JSON list instead of paths")
    args = parser.parse_args(argv)
    try:
        config = read_config(["config.yaml", *args.configfile])
    except ConfigRefused as refused:
        print(refused, file=sys.stderr)
        return 2
    matrix = matrix_cells(config)
    run_name = (config or {}).get("run_name")
    results = args.results or (f"results/{run_name}" if run_name else "results")
    chosen = select_records(
        results,
        args.device,
        args.workload,
        args.error_class,
        args.include_unavailable,
        matrix,
    )
    paths = [str(p) for p in chosen.rerun]
    print(json.dumps(paths) if args.json else " ".join(paths))
    for path in chosen.outside_matrix:
        print(f"skipped (not a cell of the config any more): {path}", file=sys.stderr)
    for path in paths:
        print(f"rerun: {path}: {chosen.reasons[path]}", file=sys.stderr)
    if not paths:
        print("no failed cells", file=sys.stderr)
    return 0
