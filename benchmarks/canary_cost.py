"""Cost of the numerical canary (trainbench.measure.canary) that every cell runs before training.

    .venv/bin/python benchmarks/canary_cost.py                  # the best available device
    .venv/bin/python benchmarks/canary_cost.py --device cpu --autocast bf16 --repeats 20
    python3 benchmarks/canary_cost.py --device cuda --matmul-precision high   # TF32

The first call is timed apart (``cold``): a cell's child process runs the canary once,
right after start-up, so that is what each cell pays (lazy kernel initialisation
included, which training would otherwise pay in its first step). Then ``--repeats``
warm calls; per op, the cold and the median warm seconds (reference in CPU float64
included). Prints a table and writes benchmarks/results/canary-<device>-<date>.json
(``canary-<device>-<autocast>-<precision>-<date>.json`` for the other variants).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

import torch  # noqa: E402
from trainbench.launch.environment import host_facts  # noqa: E402
from trainbench.measure.canary import run_canary  # noqa: E402
from trainbench.measure.context import RunContext  # noqa: E402
from trainbench.measure.devices import get_device  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


def available_device() -> str:
    """cuda, else mps, else cpu (availability as the cells check it)."""
    for backend in ("cuda", "mps"):
        if get_device(backend).availability()[0]:
            return backend
    return "cpu"


def make_ctx(backend: str, autocast: str) -> RunContext:
    device = get_device(backend, {"autocast": autocast})
    available, reason = device.availability()
    if not available:
        raise SystemExit(f"{backend} is not available: {reason}")
    in_force = device.apply_settings()
    spec = {"workload_settings": {}, "run_seed": 0, "cell": {}}
    return RunContext(spec, device, device.torch_device(), device.amp_policy(), in_force)


def measure(ctx: RunContext, repeats: int) -> dict:
    """The cold call and ``repeats`` warm calls: totals and per-op seconds."""
    cold = run_canary(ctx)
    if cold["status"] == "error" and "ops" not in cold:
        raise SystemExit(f"the canary raised: {cold['message']}")
    warm = [run_canary(ctx) for _ in range(repeats)]
    ops = {
        name: {
            "cold_s": op.get("seconds"),
            "warm_median_s": statistics.median(w["ops"][name].get("seconds", 0.0) for w in warm)
            if warm
            else None,
            "dtype": op.get("dtype"),
            "max_rel_error": op.get("max_rel_error"),
            "tolerance": op.get("tolerance"),
        }
        for name, op in cold["ops"].items()
    }
    totals = [w["seconds"] for w in warm]
    return {
        "status": cold["status"],
        "failed_ops": cold["failed_ops"],
        "precision": cold["precision"],
        "cold_s": cold["seconds"],
        "warm_median_s": statistics.median(totals) if totals else None,
        "warm_max_s": max(totals) if totals else None,
        "repeats": repeats,
        "ops": ops,
    }


def print_table(result: dict) -> None:
    print(f"{'op':32} {'dtype':9} {'cold ms':>8} {'warm ms':>8} {'rel. error':>10} {'tol':>7}")
    for name, op in result["ops"].items():
        warm = op["warm_median_s"]
        error = op["max_rel_error"]
        print(
            f"{name:32} {op['dtype'] or '-':9} {op['cold_s'] * 1e3:8.1f} "
            f"{(warm or 0) * 1e3:8.2f} {error if error is not None else float('nan'):10.2e} "
            f"{op['tolerance'] or float('nan'):7.0e}"
        )
    warm = result["warm_median_s"] or 0.0
    print(
        f"total: cold {result['cold_s']:.3f} s, warm median {warm:.3f} s "
        f"({result['repeats']} repeats); status {result['status']}, {result['precision']}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cpu", "cuda", "mps"], default=None)
    parser.add_argument("--autocast", choices=["off", "bf16", "fp16"], default="off")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument(
        "--matmul-precision", choices=["highest", "high", "medium"], default=None,
        help="torch.set_float32_matmul_precision before the run (high = TF32 on CUDA)",
    )  # fmt: skip
    parser.add_argument("--out", type=Path, default=None, help="JSON path (default: results/)")
    args = parser.parse_args(argv)
    backend = args.device or available_device()
    if args.matmul_precision:
        torch.set_float32_matmul_precision(args.matmul_precision)
    ctx = make_ctx(backend, args.autocast)
    result = measure(ctx, args.repeats)
    print_table(result)
    date = dt.date.today().isoformat()
    variant = "".join(
        f"-{part}" for part in (args.autocast, args.matmul_precision) if part not in ("off", None)
    )
    out = args.out or RESULTS / f"canary-{backend}{variant}-{date}.json"
    facts = {k: v for k, v in host_facts().items() if k in ("host", "cpu_model", "logical_cores")}
    document = {
        "benchmark": "canary_cost",
        "date": date,
        "device": backend,
        "device_facts": ctx.device.facts(),
        "autocast": args.autocast,
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "machine": facts,
        **result,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(document, indent=2, sort_keys=True) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
