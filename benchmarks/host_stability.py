"""Is a host's speed a property of the time or of the process? (one long process against
many short ones, CPU and CUDA; the logic and its reasoning are in
scripts/trainbench/bench/host_stability.py)

    python benchmarks/host_stability.py --out benchmarks/results/host-stability-<date>.json
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shlex
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "scripts"))

import torch  # noqa: E402
from trainbench.bench import host_stability as hs  # noqa: E402
from trainbench.bench.machine import machine_facts  # noqa: E402
from trainbench.bench.provenance import git_commit  # noqa: E402
from trainbench.common.atomic_files import atomic_write_text  # noqa: E402
from trainbench.common.code_identity import source_fingerprint  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--interval", type=float, default=0.5, help="seconds per interval")
    parser.add_argument(
        "--windows",
        action="store_true",
        help="instead of the groups: 1-s and 5-s windows alternating, one interval each "
        "(host_stability.window_plan)",
    )
    parser.add_argument("--out", type=Path)
    parser.add_argument(
        "--summarize",
        type=Path,
        metavar="JSON",
        help="write the Markdown of a --windows results file beside it, and run nothing",
    )
    parser.add_argument("--how", default="", help="with --summarize: the run's how, in words")
    args = parser.parse_args()
    if args.summarize:
        result = json.loads(args.summarize.read_text())
        md = args.summarize.with_suffix(".md")
        atomic_write_text(md, hs.window_markdown(result, args.how))
        print(f"wrote {md}")
        return 0
    made = dt.datetime.now(dt.UTC)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    cuda = torch.cuda.is_available()
    out = args.out or HERE / "results" / f"host-stability-{made:%Y-%m-%d}.json"
    result = {
        "made_at": made.isoformat(timespec="seconds"),
        "command": shlex.join(["python", "benchmarks/host_stability.py", *sys.argv[1:]]),
        "machine": machine_facts("cuda" if cuda else "cpu"),
        "code": f"git {git_commit(HERE.parent)}, source {source_fingerprint(HERE.parent)}",
        "groups": {},
    }
    steps = hs.window_plan(cuda) if args.windows else hs.plan(cuda, cores)
    for group, device, threads, seconds, pin, processes, env in steps:
        interval = seconds if args.windows else args.interval
        rows = [hs.run_child(device, threads, seconds, interval, pin, env)
                for _ in range(processes)]  # fmt: skip
        # a group met again (the alternating windows) gathers its processes
        rows = result["groups"].get(group, {}).get("rows", []) + rows
        result["groups"][group] = {"rows": rows, "summary": hs.summary(rows)}
        print(group, json.dumps(result["groups"][group]["summary"]), flush=True)
        # Written after every group: a run cut short keeps the groups it finished.
        atomic_write_text(out, json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
