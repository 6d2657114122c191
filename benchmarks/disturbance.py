"""Injected disturbance, caught on the cell's own cores and GPU; quiet cells left alone.

    python benchmarks/disturbance.py                          # cpu-t1 and cpu, here
    python benchmarks/disturbance.py --devices cpu-t1 cpu cuda --reps 3   # a CUDA host

Every device's cells run under each condition (quiet, a busy loop on each of the cell's
CPUs, a busy loop on every CPU, and on CUDA another process's matmuls on the same GPU),
one at a time, through the launcher. Writes benchmarks/results/disturbance-<date>.json
and .md (or --out). The logic is in scripts/trainbench/bench/disturbance.py.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import shlex
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "scripts"))

from trainbench.bench import disturbance as db  # noqa: E402
from trainbench.bench.parity_power import prepare_data  # noqa: E402
from trainbench.bench.workers import run_in_workers  # noqa: E402
from trainbench.common.atomic_files import atomic_write_text  # noqa: E402
from trainbench.common.code_identity import code_identity  # noqa: E402
from trainbench.launch.environment import git_commit  # noqa: E402

# image_cnn at config.yaml's first batch size: a 1-s window on every device (extended
# where a GPU trains the epoch in less).
CONFIG = {
    "seed": 0,
    "repeats": 1,
    "devices": ["cpu"],
    "workloads": {
        "image_cnn": {
            "batch_sizes": [32],
            "epochs": 1,
            "warmup_steps": 5,
            "data": {"source": "synthetic", "n_train": 2048, "n_test": 512},
        }
    },
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--devices", nargs="+", default=["cpu-t1", "cpu"], help="cpu (every CPU), cpu-tN, cuda"
    )
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--conditions", nargs="+", default=list(db.CONDITIONS))
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    config, devices = db.bench_config(CONFIG, args.devices)
    made = dt.datetime.now(dt.UTC)
    out = args.out or HERE / "results" / f"disturbance-{made:%Y-%m-%d}.json"
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="disturbance-") as root:
        data = prepare_data(config, [db_job("image_cnn")], Path(root))["image_cnn"]
        calls = [
            (config, "image_cnn", device, 32, rep, condition, data, root)
            for rep in range(args.reps)
            for condition in args.conditions
            for device in devices
            if condition != db.GPU_NEIGHBOUR or device.startswith("cuda")
        ]
        run_in_workers(db.run_one, calls, 1, lambda r: (rows.append(r), print(_line(r))))
    results = {
        "made_at": made.isoformat(timespec="seconds"),
        "command": shlex.join(["python", "benchmarks/disturbance.py", *sys.argv[1:]]),
        "code": code_identity(git_commit())["label"],
        "machine": db.machine_words(),
        "summary": db.summarize(rows),
        "rows": rows,
    }
    atomic_write_text(out, json.dumps(results, indent=1) + "\n")
    atomic_write_text(out.with_suffix(".md"), db.markdown(results))
    print(f"wrote {out} and {out.with_suffix('.md')}")
    return 0


def db_job(workload: str):
    from types import SimpleNamespace

    return SimpleNamespace(workload=workload)


def _line(r: dict) -> str:
    share = r["cell_cpu_others_share"]
    return (
        f"{r['condition']:14} {r['device']:7} rep {r['rep']} {r['status']:6} "
        f"flagged={r['flagged']!s:5} share={'-' if share is None else f'{share:.1%}'} "
        f"{r['reason'] or r['error'] or ''}"
    )


if __name__ == "__main__":
    sys.exit(main())
