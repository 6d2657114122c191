"""Record one training cell's per-step times as a steady-state test case.

    python tests/data/steady/record.py image_cnn --device cpu --batch-size 32 \
        --epochs 3 --steps-per-epoch 200 --warmup-steps 1 --expected flat \
        --why "..." --out tests/data/steady/cpu-image_cnn-bs32.json

The cell runs through trainbench's own training loop (the benchmarks' harness
variant: ``run_training`` on the workload's parts), so the series is exactly what a
record's ``result.steps.seconds`` holds. ``--hog-after S`` starts a busy-loop
process S seconds into training (kept until the end): a real slowdown on a CPU.
The file keeps where and how it was recorded; ``expected`` is the class a person
judged from the series (say why in ``--why``), never the detector's answer.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "scripts"))

from trainbench import workloads  # noqa: E402
from trainbench.bench.machine import machine_facts  # noqa: E402
from trainbench.bench.throughput_suite import Variant, cell_spec, trainbench_config  # noqa: E402
from trainbench.common.records import atomic_write_text  # noqa: E402
from trainbench.measure.context import make_context  # noqa: E402
from trainbench.measure.training import run_training  # noqa: E402

CLASSES = ("flat", "warmup", "slowdown", "no steady state")


def _suite(args: argparse.Namespace) -> dict:
    settings = {
        "epochs": args.epochs,
        "warmup_steps": args.warmup_steps,
        "max_steps_per_epoch": args.steps_per_epoch,
    }
    if args.workload == "image_cnn":
        settings["data"] = {"source": "synthetic", "n_train": 8192, "n_test": 256}
    if args.workload == "two_tower":
        settings["mine_schedule"] = "0-99:none"
    return {
        "name": "steady-series",
        "device": args.device,
        "device_settings": {"threads": args.threads} if args.threads else {},
        "rounds": 1,
        "cases": {
            args.workload: {
                "batch_sizes": [args.batch_size],
                "variants": [Variant.parse("harness")],
                "settings": settings,
            }
        },
    }


def _hog_later(seconds: float, procs: list) -> threading.Timer:
    def start() -> None:
        procs.append(subprocess.Popen([sys.executable, "-c", "while True: pass"]))

    timer = threading.Timer(seconds, start)
    timer.daemon = True
    return timer


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("workload")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batch-size", type=int, required=True)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--steps-per-epoch", type=int, default=200)
    parser.add_argument("--warmup-steps", type=int, default=1)
    parser.add_argument("--threads", type=int, default=None, help="CPU: torch threads")
    parser.add_argument("--hog-after", type=float, default=None, help="seconds into training")
    parser.add_argument("--expected", choices=CLASSES, help="fill in after looking at the series")
    parser.add_argument("--why", default="", help="what in the series makes it that class")
    parser.add_argument("--note", default="", help="anything else about how it was recorded")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    suite = _suite(args)
    config = trainbench_config(suite, args.workload)
    variant = suite["cases"][args.workload]["variants"][0]
    procs: list = []
    with tempfile.TemporaryDirectory(prefix="steady-series-") as scratch:
        workloads.get(args.workload).prepare_data(
            config["workloads"][args.workload], scratch, config["seed"]
        )
        spec = cell_spec(config, args.workload, variant, args.batch_size, scratch)
        ctx = make_context(spec)
        parts = workloads.get(args.workload).build_parts(ctx)
        timer = _hog_later(args.hog_after, procs) if args.hog_after is not None else None
        if timer:
            timer.start()
        try:
            result = run_training(parts, ctx)
        finally:
            if timer:
                timer.cancel()
            for proc in procs:
                proc.kill()
    facts = machine_facts(args.device)
    record = {
        "expected": args.expected,
        "why": args.why,
        "seconds": [float(f"{s:.6g}") for epoch in result["steps"]["seconds"] for s in epoch],
        "epoch_lengths": [len(epoch) for epoch in result["steps"]["seconds"]],
        "warmup_steps": args.warmup_steps,
        "min_steps": 20,
        "recorded": {
            "workload": args.workload,
            "device": args.device,
            "batch_size": args.batch_size,
            "epochs": args.epochs,
            "steps_per_epoch": args.steps_per_epoch,
            "how": "trainbench.measure.training.run_training on the workload's own parts "
            "(tests/data/steady/record.py); step times as result.steps.seconds holds them",
            "hog_after_s": args.hog_after,
            "date": dt.date.today().isoformat(),
            "machine": {k: facts.get(k) for k in ("host", "cpu_model", "logical_cores", "gpu")},
            "torch": facts["torch"],
            "torch_threads": facts["torch_threads"],
            "python": facts["python"],
            "note": args.note,
        },
    }
    atomic_write_text(Path(args.out), json.dumps(record, indent=1) + "\n")
    print(f"wrote {args.out}: {len(record['seconds'])} steps")
    return 0


if __name__ == "__main__":
    sys.exit(main())
