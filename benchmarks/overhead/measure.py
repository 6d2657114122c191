"""Workflow overhead: what Snakemake, process start-up and imports add to each cell,
and how long the rules after the cells (aggregate, tables, figures, reports) take.

Two measurements, both through the real ``snakemake`` in a copy of the workflow:

- **cells**: a matrix of cells that do almost nothing (one 16x16 matmul; cuda and
  mps cells, unavailable here; one cell failed on purpose by fault injection).
  A tracer (``overhead_tracer.py``, installed as ``sitecustomize``) timestamps
  every process and a few phase boundaries, so each cell's wall time splits into
  Snakemake's gap before the job, the launcher's start and imports, the child's
  spawn and imports, the cell's own work, and the child's exit plus the record.
  Per-cell overhead = cell wall time - the cell's own work.
- **downstream**: 1,000 synthetic records, made from real records (the test
  records in ``tests/data/cpu-records.tgz`` and the cells run above) with
  their device, batch size, repeat and values varied, each training record with
  its per-step losses, and the float64 reference of every repeat parity needs;
  their data sets are built and the records made newer, so the cells and
  references are up to date as after a real run; then
  ``snakemake --cores N results/report.md`` (N: every core, ``--downstream-cores``)
  runs only the rules after them.

Also ``python -X importtime`` of the imports each process pays, and Snakemake's
own start-up (``snakemake --version``). Results go to one
JSON file (``runs.<label>``, so a ``before`` and an ``after`` can sit side by side);
:func:`markdown_section` renders the README section from that JSON only.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from .cells import measure_cells
from .downstream import measure_downstream
from .facts import machine_facts, tree_facts
from .render import GOALS, command_line, markdown_section, update_readme
from .startup import measure_imports, measure_snakemake_start
from .synthetic import load_templates
from .workflow import REPO, export_tree

TEMPLATE_ARCHIVES = "tests/data/*records.tgz"


def default_output(date: str) -> Path:
    """benchmarks/results/workflow-overhead-<N>core-<date>.json"""
    return REPO / "benchmarks" / "results" / f"workflow-overhead-{os.cpu_count()}core-{date}.json"


def build_parser() -> argparse.ArgumentParser:
    """The command line of benchmarks/workflow_overhead.py."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--label", default="after", help="runs.<label> in the JSON (before/after)")
    parser.add_argument(
        "--rev", help="measure this commit's workflow (git archive) instead of the working tree"
    )
    parser.add_argument("--tree", type=Path, help="measure the workflow in this folder")
    parser.add_argument("--note", help="what this label's code is (kept in the JSON)")
    parser.add_argument("--cell-repeats", type=int, default=5, help="repeats of each cell per run")
    parser.add_argument("--cell-runs", type=int, default=3, help="snakemake runs of the cells")
    parser.add_argument("--downstream-runs", type=int, default=3)
    parser.add_argument(
        "--downstream-cores",
        type=int,
        help="snakemake --cores of the downstream runs (default: every core of the machine)",
    )
    parser.add_argument("--import-reps", type=int, default=5)
    parser.add_argument(
        "--skip", choices=["cells", "downstream", "imports"], action="append", default=[]
    )
    parser.add_argument(
        "--output",
        type=Path,
        help="JSON file (default benchmarks/results/workflow-overhead-<N>core-<date>.json)",
    )
    parser.add_argument("--readme", type=Path, default=REPO / "benchmarks" / "README.md")
    parser.add_argument("--no-readme", action="store_true")
    parser.add_argument(
        "--render", action="store_true", help="only write the README section from the JSON"
    )
    parser.add_argument("--keep", action="store_true", help="keep the temporary workflow copies")
    parser.add_argument(
        "--wait-load",
        type=float,
        metavar="L",
        help="first wait until the 1-minute load average is below L (others' work "
        "slows every number here); the load is kept either way",
    )
    parser.add_argument(
        "--wait-max", type=float, default=1800, help="seconds --wait-load waits at most"
    )
    return parser


def load_average() -> list[float]:
    """The 1, 5 and 15-minute load averages, rounded."""
    return [round(x, 2) for x in os.getloadavg()]


def wait_for_load(limit: float, at_most: float, poll: float = 15.0) -> dict:
    """Wait until the 1-minute load average is below ``limit`` (at most ``at_most``
    seconds); what was waited and the load when measuring began."""
    t0 = time.monotonic()
    while os.getloadavg()[0] >= limit and time.monotonic() - t0 < at_most:
        print(f"load {load_average()} >= {limit:g}: waiting ...", flush=True)
        time.sleep(poll)
    below = os.getloadavg()[0] < limit
    if not below:
        print(f"load still {load_average()} after {at_most:g} s: measuring anyway", flush=True)
    return {"limit": limit, "waited_s": round(time.monotonic() - t0, 1), "met": below}


def render_only(output: Path, result: dict, readme: Path) -> None:
    """Rewrite the README section from the JSON ``output`` alone, measuring nothing."""
    # The file may have been measured under another name and moved here.
    result.update(json=output.name, json_link=f"results/{output.name}")
    output.write_text(json.dumps(result, indent=2) + "\n")
    update_readme(readme, markdown_section(result))
    print(f"updated {readme} from {output}")


def measure_label(args: argparse.Namespace, argv: list[str] | None, tmp: Path) -> dict:
    """Everything one label measures (imports, cells, downstream, minus ``--skip``), with
    the code measured and the machine's load before and after."""
    tree = export_tree(args.rev, tmp / "tree") if args.rev else (args.tree or REPO)
    run: dict = {
        "tree": tree_facts(tree, args.rev),
        "started": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "load_average_at_start": load_average(),
        "argv": sys.argv[1:] if argv is None else argv,
    }
    if args.note:
        run["note"] = args.note
    if "imports" not in args.skip:
        print("timing imports ...", flush=True)
        run["imports"] = measure_imports(tree, args.import_reps)
        run["snakemake_start"] = measure_snakemake_start(tree, args.import_reps)
    record_dirs = []
    if "cells" not in args.skip:
        run["cells"] = measure_cells(tree, tmp, args.cell_repeats, args.cell_runs)
        record_dirs.append(Path(run["cells"].pop("records_dir")))
    if "downstream" not in args.skip:
        archives = sorted(REPO.glob(TEMPLATE_ARCHIVES))
        if not record_dirs:
            raise SystemExit("downstream needs the cells' records as templates: do not skip cells")
        templates = load_templates(archives, record_dirs)
        # Our own cells just ran: their load decays before the downstream is timed.
        waited = wait_for_load(args.wait_load, args.wait_max) if args.wait_load else None
        load = load_average()
        run["downstream"] = measure_downstream(
            tree, tmp, templates, args.downstream_runs, cores=args.downstream_cores
        )
        run["downstream"]["load_average_at_start"] = load
        if waited:
            run["downstream"]["waited_for_load"] = waited
    run["load_average_at_end"] = load_average()
    return run


def main(argv: list[str] | None = None) -> int:
    """Measure one label into the results JSON and rewrite the README section from it
    (or, with ``--render``, only rewrite the section)."""
    args = build_parser().parse_args(argv)
    date = _dt.date.today().isoformat()
    output = args.output or default_output(date)
    result = json.loads(output.read_text()) if output.exists() else {}
    if args.render:
        render_only(output, result, args.readme)
        return 0
    rerun = command_line(sys.argv[1:] if argv is None else argv)
    print(f"to rerun: {rerun}", flush=True)
    waited = wait_for_load(args.wait_load, args.wait_max) if args.wait_load else None
    tmp = Path(tempfile.mkdtemp(prefix="trainbench-overhead-"))
    try:
        run = measure_label(args, argv, tmp)
        if waited:
            run["waited_for_load"] = waited
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            print(f"kept {tmp}")
    result.update(
        {
            "benchmark": "workflow_overhead",
            "date": date,
            "machine": machine_facts(),
            "goals": GOALS,
            "json": output.name,
            "json_link": f"results/{output.name}",
        }
    )
    result.setdefault("runs", {})[args.label] = run
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {output}")
    if not args.no_readme:
        update_readme(args.readme, markdown_section(result))
        print(f"updated {args.readme}")
    print(f"to rerun: {rerun}")
    return 0
