"""Redraw results folders without running a cell: the tables, figures (PNG and paper)
and reports of one or more results folders' records, made again with this checkout's
analysis code into a run of their own, ``results/<name>/``.

The run is records-only (``aggregate.records_only``: no data set is built, no cell
runs) and its records are the folders' (``aggregate.include_results``); its own folder
holds none. Its settings are one small config file, ``results/<name>/redraw.yaml``
(written atomically, and only when it changes), layered over config.yaml and any
config files given, then Snakemake runs the default target with it. Workloads of
those configs that have no record in the folders are switched off in it
(``enabled: false``), so no report is made for a workload nothing measured.
Running it twice redraws nothing the second time; drawn again, every figure has the
same bytes (trainbench.analysis.figures.style).

    python scripts/redraw.py --name redraw results/old-run path/to/mac/results
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

import yaml
from trainbench.common.atomic_files import atomic_write_text
from trainbench.config.names import SAFE_NAME_WORDS, is_safe_name, safe_suggestion

CONFIG_NAME = "redraw.yaml"
RECORD_GLOB = "runs/*/*/bs*/rep*/metrics.json"
COMPARE_CHOICES = ("folder", "software", "none")  # aggregate.compare.by
# What --force draws again (the tables stay: they are the records' facts).
FORCED_RULES = ("figures", "paper_figures", "report")


class RedrawError(ValueError):
    """A bad argument: the message names it and the fix."""


def records_of(folder: str | os.PathLike) -> list[Path]:
    """The records (metrics.json) of a results folder, as rule aggregate finds them."""
    return sorted(Path(folder).glob(RECORD_GLOB))


def recorded_workloads(folders: Iterable[str | os.PathLike]) -> set[str]:
    """The workloads that have at least one record in the folders."""
    return {path.parts[-5] for folder in folders for path in records_of(folder)}


def _shown(folder: str | os.PathLike, root: Path) -> str:
    """A folder as the config names it: relative to the workflow's folder when inside."""
    path = Path(folder).resolve()
    try:
        return str(path.relative_to(root.resolve()))
    except ValueError:
        return str(path)


def folder_problems(name: str, folders: Sequence[str], root: Path) -> list[str]:
    """Each bad argument, one sentence naming it and the fix (empty: all good)."""
    if not is_safe_name(name):
        return [f"NAME {name!r} is not {SAFE_NAME_WORDS}. Fix: e.g. NAME={safe_suggestion(name)}."]
    if not folders:
        return ['FOLDERS is empty. Fix: name results folders, e.g. FOLDERS="results/old-run".']
    own = (root / "results" / name).resolve()
    problems = []
    for folder in folders:
        path = Path(folder) if Path(folder).is_absolute() else root / folder
        if not path.is_dir():
            problems.append(
                f"FOLDERS: {folder!r} is not a folder. Fix: name a results folder written by "
                "trainbench (it holds runs/)."
            )
        elif path.resolve() == own:
            problems.append(
                f"FOLDERS: {folder!r} is results/{name}, the folder NAME={name} writes to. "
                f"Fix: choose another NAME (e.g. NAME={name}-redraw); the folders are read, "
                "never written."
            )
        elif not records_of(path):
            problems.append(
                f"FOLDERS: {folder!r} has no records ({RECORD_GLOB}). Fix: name a results "
                "folder whose cells ran, or leave it out."
            )
    return problems


def configured_workloads(config_files: Iterable[str | os.PathLike]) -> list[str]:
    """The workload names the config files set (config.yaml and each file given)."""
    names: list[str] = []
    for path in config_files:
        data = yaml.safe_load(Path(path).read_text()) or {}
        for workload in data.get("workloads") or {}:
            if workload not in names:
                names.append(workload)
    return names


def redraw_config(
    name: str,
    folders: Sequence[str],
    root: Path,
    compare: str | None = None,
    workloads: Iterable[str] = (),
) -> dict:
    """The redraw run's config: its name, records-only with the folders' records,
    ``aggregate.compare.by`` when given, and each of ``workloads`` (the configured
    ones) without a record in the folders switched off. Raises :class:`RedrawError`
    for a bad argument."""
    problems = folder_problems(name, folders, root)
    if compare is not None and compare not in COMPARE_CHOICES:
        problems.append(
            f"COMPARE={compare!r} is not one of {', '.join(COMPARE_CHOICES)}. Fix: "
            "COMPARE=folder (each folder against the baseline folder), COMPARE=software or "
            "COMPARE=none, or leave it out."
        )
    if problems:
        raise RedrawError("\n".join(problems))
    paths = [Path(f) if Path(f).is_absolute() else root / f for f in folders]
    shown = list(dict.fromkeys(_shown(p, root) for p in paths))
    aggregate: dict = {"records_only": True, "include_results": shown}
    if compare is not None:
        aggregate["compare"] = {"by": compare}
    config: dict = {"run_name": name, "aggregate": aggregate}
    present = recorded_workloads(paths)
    off = {w: {"enabled": False} for w in workloads if w not in present}
    if off:
        config["workloads"] = off
    return config


def config_text(config: dict) -> str:
    return (
        "# Written by scripts/redraw.py (make redraw): a records-only run of the records of\n"
        "# aggregate.include_results; nothing trains. Made again by each make redraw.\n"
        + yaml.safe_dump(config, sort_keys=False)
    )


def write_config(path: Path, config: dict) -> bool:
    """Write the config file atomically when its text changes; whether it did."""
    text = config_text(config)
    if path.exists() and path.read_text() == text:
        return False
    atomic_write_text(path, text)
    return True


def snakemake_command(
    config_path: str, config_files: Sequence[str], cores: int, extra: Sequence[str] = ()
) -> list[str]:
    """Snakemake's command: the default target (report and paper figures) of the run
    config files given, then the redraw config over them."""
    return [
        sys.executable, "-m", "snakemake", "--cores", str(cores),
        "--configfile", *config_files, config_path, *extra,
    ]  # fmt: skip


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=(
            "Tables, figures (PNG and paper) and reports of results folders made again, "
            "into results/NAME/, without running a cell."
        )
    )
    parser.add_argument("folders", nargs="*", help="results folders whose records to use")
    parser.add_argument("--name", default="redraw", help="the run's name: results/NAME/")
    parser.add_argument(
        "--compare",
        choices=None,
        default=None,
        help="aggregate.compare.by: folder, software or none",
    )
    parser.add_argument(
        "--configfile", action="append", default=[],
        help="a config file of the runs (workloads, targets, baseline) over config.yaml; repeatable",
    )  # fmt: skip
    parser.add_argument("--cores", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--root", default=".", help="the workflow's folder (default: here)")
    parser.add_argument(
        "--force", action="store_true",
        help="draw every figure and report again, though up to date (--forcerun)",
    )  # fmt: skip
    parser.add_argument(
        "--snakemake", default="", help='more Snakemake arguments in one string, e.g. "--dry-run"'
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Check the arguments, write results/NAME/redraw.yaml, run Snakemake."""
    args = parse_args(argv)
    root = Path(args.root)
    config_files = ["config.yaml", *args.configfile]
    missing = [f for f in args.configfile if not (root / f).is_file()]
    try:
        if missing:
            raise RedrawError(f"CONFIG: {missing} not found. Fix: name existing config files.")
        workloads = configured_workloads(root / f for f in config_files)
        config = redraw_config(args.name, args.folders, root, args.compare, workloads)
    except RedrawError as error:
        print(f"redraw: {error}", file=sys.stderr)
        return 2
    config_path = Path("results", args.name, CONFIG_NAME)
    write_config(root / config_path, config)
    extra = shlex.split(args.snakemake)
    if args.force:
        extra += ["--forcerun", *FORCED_RULES]
    command = snakemake_command(str(config_path), config_files[1:], args.cores, extra)
    print("redraw: " + " ".join(command[1:]), flush=True)
    return subprocess.run(command, cwd=root).returncode
