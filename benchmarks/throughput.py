"""Harness vs bare loop vs Hugging Face Trainer, one process, one device.

    python benchmarks/throughput.py benchmarks/suites/cuda.yaml
    python benchmarks/throughput.py benchmarks/suites/cpu.yaml --only image_cnn
    python benchmarks/throughput.py --render benchmarks/results/throughput-cuda-2026-11-22.json
    python benchmarks/throughput.py --index     # benchmarks/results/README.md: every target

Writes benchmarks/results/throughput-<suite>-<date>[-<only>].json after every measurement
(an interrupted run keeps what it measured) and the Markdown summary beside it.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "scripts"))

from trainbench.bench.throughput_report import render_index, write_markdown  # noqa: E402
from trainbench.bench.throughput_run import run_suite  # noqa: E402
from trainbench.bench.throughput_suite import load_suite  # noqa: E402
from trainbench.bench.throughput_summary import target_checks  # noqa: E402
from trainbench.common.records import atomic_write_text  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("suite", nargs="?", help="a suite file (benchmarks/suites/*.yaml)")
    parser.add_argument(
        "--only", nargs="*", help="only these cases of the suite: WORKLOAD or WORKLOAD:BATCH_SIZE"
    )
    parser.add_argument("--out", default=str(HERE / "results"), help="results folder")
    parser.add_argument("--render", help="re-render the Markdown of an existing results JSON")
    parser.add_argument(
        "--index", action="store_true", help="rewrite results/README.md from every results JSON"
    )
    args = parser.parse_args()
    if args.index:
        results_dir = Path(args.out)
        files = sorted(results_dir.glob("throughput-*.json"))
        atomic_write_text(results_dir / "README.md", render_index(files))
        return 0
    if args.render:
        results = json.loads(Path(args.render).read_text())
        write_markdown(results, Path(args.render).with_suffix(".md"))
        return 0
    if not args.suite:
        parser.error("give a suite file or --render RESULTS.json")
    suite = load_suite(args.suite)
    day = dt.date.today().isoformat()
    part = f"-{'-'.join(args.only).replace(':', '-bs')}" if args.only else ""
    out = Path(args.out) / f"throughput-{suite['name']}-{day}{part}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    results = run_suite(suite, out, only=args.only, log=lambda line: print(line, flush=True))
    write_markdown(results, out.with_suffix(".md"))
    print(f"wrote {out} and {out.with_suffix('.md')}")
    for check in target_checks(results):
        if check["met"] != "met":
            print(f"target {check['met']}: {check['target']} at {check['where']}: "
                  f"{check['value']:.4f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
