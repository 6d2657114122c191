"""Injected disturbance, caught on the cell's own cores and GPU; quiet cells left alone.

    python benchmarks/disturbance.py                          # cpu-t1 and cpu, here
    python benchmarks/disturbance.py --devices cpu-t1 cpu cuda --reps 3   # a CUDA host

Every device's cells run under each condition (quiet, a busy loop on each of the cell's
CPUs, a busy loop on every CPU, and on CUDA another process's matmuls on the same GPU),
one at a time, through the launcher. Writes benchmarks/results/disturbance-<date>.json
and .md (or --out) after every cell, so a run stopped by a time limit keeps the cells
it finished (``"complete": false``). A run whose results file was lost can be written
from its printed lines, which carry each cell's condition, device, repeat, outcome,
share and reason (``--from-log LOG --machine-of JSON``: the machine and code of another
results file made on the same machine at the same code; the other fields are absent).
The logic is in scripts/trainbench/bench/disturbance.py.
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
    parser.add_argument("--from-log", type=Path, help="a run's printed lines (no cell runs)")
    parser.add_argument("--machine-of", type=Path, help="with --from-log: a results file")
    parser.add_argument("--logged-command", help="with --from-log: the command that printed it")
    args = parser.parse_args()
    made = dt.datetime.now(dt.UTC)
    out = args.out or HERE / "results" / f"disturbance-{made:%Y-%m-%d}.json"
    if args.from_log:
        return from_log(args, made, out)
    config, devices = db.bench_config(CONFIG, args.devices)
    command = shlex.join(["python", "benchmarks/disturbance.py", *sys.argv[1:]])
    code = code_identity(git_commit())["label"]
    rows: list[dict] = []

    def done(r: dict) -> None:
        rows.append(r)
        print(db.line(r), flush=True)
        write(out, results(made, command, code, db.machine_words(), rows, complete=False))

    with tempfile.TemporaryDirectory(prefix="disturbance-") as root:
        data = prepare_data(config, [db_job("image_cnn")], Path(root))["image_cnn"]
        calls = [
            (config, "image_cnn", device, 32, rep, condition, data, root)
            for rep in range(args.reps)
            for condition in args.conditions
            for device in devices
            if condition != db.GPU_NEIGHBOUR or device.startswith("cuda")
        ]
        run_in_workers(db.run_one, calls, 1, done)
    write(out, results(made, command, code, db.machine_words(), rows, complete=True))
    print(f"wrote {out} and {out.with_suffix('.md')}")
    return 0


def results(made, command: str, code: str, machine: str, rows: list[dict], complete: bool,
            **more) -> dict:  # fmt: skip
    return {
        "made_at": made.isoformat(timespec="seconds"),
        "command": command,
        "code": code,
        "machine": machine,
        "complete": complete,
        **more,
        "summary": db.summarize(rows),
        "rows": rows,
    }


def write(out: Path, data: dict) -> None:
    atomic_write_text(out, json.dumps(data, indent=1) + "\n")
    atomic_write_text(out.with_suffix(".md"), db.markdown(data))


def from_log(args: argparse.Namespace, made: dt.datetime, out: Path) -> int:
    """The results file of a run whose own was lost, from its printed lines."""
    if args.machine_of is None:
        sys.exit("--from-log needs --machine-of: a results file of the same machine and code")
    other = json.loads(args.machine_of.read_text())
    rows = db.rows_from_log(args.from_log.read_text())
    command = (args.logged_command or "a run") + (
        f" (rows from its printed lines; machine and code as {args.machine_of.name})"
    )
    data = results(made, command, other["code"], other["machine"], rows, complete=False,
                   rows_from="the run's printed lines: condition, device, rep, status, "
                   "flagged, share and reason only")  # fmt: skip
    write(out, data)
    print(f"wrote {out} and {out.with_suffix('.md')} ({len(rows)} cells from the log)")
    return 0


def db_job(workload: str):
    from types import SimpleNamespace

    return SimpleNamespace(workload=workload)


if __name__ == "__main__":
    sys.exit(main())
