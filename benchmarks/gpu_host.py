"""The GPU-host sweep's results file from two workflow runs and the injection benchmark.

On the GPU host, twice (see benchmarks/suites/gpu-host.yaml):
    .venv/bin/snakemake --cores $(nproc) results/gpu-host-1/tables/runs.csv \
        --configfile benchmarks/suites/gpu-host.yaml --config run_name=gpu-host-1
    python benchmarks/disturbance.py --devices cuda cpu-t1 --reps 2 --out D.json
then, with the records anywhere (the analysis needs no GPU):
    printf 'aggregate:\n  records_only: true\n' > records-only.yaml
    .venv/bin/snakemake --cores 2 results/gpu-host-1/report.md \
        --configfile benchmarks/suites/gpu-host.yaml records-only.yaml \
        --config run_name=gpu-host-1
    python benchmarks/gpu_host.py results/gpu-host-1 results/gpu-host-2 --disturbance D.json
Writes benchmarks/results/gpu-host-<date>.json and .md (or --out). The logic is in
scripts/trainbench/bench/gpu_host.py.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "scripts"))

from trainbench.bench import gpu_host as gh  # noqa: E402
from trainbench.bench import gpu_host_noise as noise  # noqa: E402
from trainbench.common.atomic_files import atomic_write_text  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "runs",
        nargs="+",
        type=Path,
        help="each run's results folder: the first two are the pair judged (declared "
        "before the runs), a later one is compared with each as well",
    )
    parser.add_argument("--disturbance", type=Path, nargs="*", default=[])
    parser.add_argument(
        "--referenced",
        type=Path,
        nargs="*",
        default=[],
        help="per run, a results folder of its records with float64 references made "
        "afterwards (for a run that made none): their overall verdicts are listed beside",
    )
    parser.add_argument(
        "--pool",
        type=Path,
        nargs="+",
        action="append",
        help="results folders whose ok records are pooled for the agreement expected at "
        "3 to 31 repeats, and whose every pair is judged as the declared pair (default: "
        "the runs); given again, another pool (runs of another protocol apart)",
    )
    parser.add_argument("--how", default="", help="the commands and machine, in words")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    made = dt.datetime.now(dt.UTC)
    runs = [gh.run_summary(path) for path in args.runs]
    if args.referenced and len(args.referenced) != len(runs):
        parser.error("--referenced takes one folder per run")
    for run, folder in zip(runs, args.referenced, strict=False):
        run["overall_with_references"] = {"results": str(folder), "verdicts": gh.overall(folder)}
    injections = [json.loads(path.read_text()) for path in args.disturbance]
    pools = args.pool or [args.runs]
    out = {
        "made_at": made.isoformat(timespec="seconds"),
        "how": args.how,
        "runs": runs,
        # the first two runs are the declared pair; with one, nothing to compare
        "agreement": gh.agreement(runs[0], runs[1]) if len(runs) > 1 else None,
        "agreement_other_pairs": gh.other_pairs(runs),
        # one entry per pool
        "agreement_chance": [noise.agreement_chance(pool) for pool in pools],
        "observed_agreement": [gh.observed_agreement(pool) for pool in pools],
        "injected": gh.injected(injections),
        "injected_from": [
            {
                "file": path.name,
                "command": d.get("command"),
                "machine": d.get("machine"),
                "code": d.get("code"),
                "complete": d.get("complete"),
            }
            for path, d in zip(args.disturbance, injections, strict=True)
        ],
    }
    path = args.out or HERE / "results" / f"gpu-host-{made:%Y-%m-%d}.json"
    atomic_write_text(path, json.dumps(out, indent=1, default=float) + "\n")
    atomic_write_text(path.with_suffix(".md"), gh.markdown(out))
    print(f"wrote {path} and {path.with_suffix('.md')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
