"""What the harness adds to each timed step, and what each addition costs.

    python benchmarks/step_overhead.py benchmarks/suites/cpu.yaml image_cnn 32
    python benchmarks/step_overhead.py benchmarks/suites/cuda.yaml image_cnn 32 --steps 100

Builds the case (a suite's workload settings at one batch size) once, then profiles the
harness's timed steps against the bare loop's on the same parts (cProfile: the functions
only the harness calls, host microseconds per step) and times each per-step addition
alone, and counts the device synchronizations per step on both sides. Each case's
verdict: the harness adds no synchronization per step and its per-step additions stay
within 1% of the bare step; exits 1 (after writing the results) when a case fails.
Writes benchmarks/results/step-overhead-<device>-<date>.json and .md (one file per
device and day; each case adds to it). Logic: scripts/trainbench/bench/step_overhead.py.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "scripts"))

from trainbench import workloads  # noqa: E402
from trainbench.bench.machine import machine_facts  # noqa: E402
from trainbench.bench.step_overhead import measure_step_overhead  # noqa: E402
from trainbench.bench.step_overhead_report import render_markdown  # noqa: E402
from trainbench.bench.throughput_suite import (  # noqa: E402
    Variant,
    cell_spec,
    load_suite,
    trainbench_config,
)
from trainbench.common.records import atomic_write_json, atomic_write_text  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("suite", nargs="?", help="a suite file (benchmarks/suites/*.yaml)")
    parser.add_argument("cases", nargs="*", help="WORKLOAD BATCH_SIZE [WORKLOAD BATCH_SIZE ...]")
    parser.add_argument("--steps", type=int, default=50, help="steps per profiled block")
    parser.add_argument("--out", default=str(HERE / "results"), help="results folder")
    parser.add_argument("--render", help="re-render the Markdown of an existing results JSON")
    parser.add_argument(
        "--fresh",
        action="store_true",
        help="start the day's results file anew (default: add the cases to it)",
    )
    args = parser.parse_args()
    if args.render:
        results = json.loads(Path(args.render).read_text())
        atomic_write_text(Path(args.render).with_suffix(".md"), render_markdown(results))
        return 0
    if not args.suite or not args.cases or len(args.cases) % 2:
        parser.error("give a suite file and WORKLOAD BATCH_SIZE pairs")
    suite = load_suite(args.suite)
    out = Path(args.out) / f"step-overhead-{suite['device']}-{dt.date.today().isoformat()}.json"
    results = json.loads(out.read_text()) if out.exists() and not args.fresh else {
        "device": suite["device"], "machine": machine_facts(suite["device"]), "cases": []}  # fmt: skip
    pairs = list(zip(args.cases[::2], args.cases[1::2], strict=True))
    with tempfile.TemporaryDirectory(prefix="trainbench-overhead-") as scratch:
        for workload, batch_size in pairs:
            config = trainbench_config(suite, workload)
            data = str(Path(scratch) / workload)
            workloads.get(workload).prepare_data(
                config["workloads"][workload], data, config["seed"]
            )
            spec = cell_spec(config, workload, Variant("harness"), int(batch_size), data)
            case = measure_step_overhead(spec, args.steps)
            case["suite"] = suite["name"]
            case["date"] = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
            results["cases"].append(case)
            out.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_json(out, results)
            syncs, verdict = case["syncs_per_step"], case["verdict"]
            print(f"{workload} bs{batch_size}: harness-only host time "
                  f"{case['profile']['harness_only_us_per_step']:.1f} us/step under cProfile; "
                  f"operations {case['operations_us_per_step']:.1f} us/step "
                  f"({verdict['additions_share_of_bare_step']:.3%} of the bare step); "
                  f"syncs/step harness {syncs['harness']:g}, bare {syncs['bare']:g}", flush=True)  # fmt: skip
    atomic_write_text(out.with_suffix(".md"), render_markdown(results))
    print(f"wrote {out} and {out.with_suffix('.md')}")
    failed = [c for c in results["cases"] if not c.get("verdict", {"passed": True})["passed"]]
    for case in failed:
        print(f"step_overhead: {case['workload']} bs {case['batch_size']} FAILED: "
              + "; ".join(case["verdict"]["reasons"]), file=sys.stderr)  # fmt: skip
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
