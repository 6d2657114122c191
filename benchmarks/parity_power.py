"""Detection power and false alarms of the parity rule, on this machine's CPU.

    python benchmarks/parity_power.py                      # every training workload of config.yaml
    python benchmarks/parity_power.py --only image_cnn:32 --sizes 0.03 0.3
    python benchmarks/parity_power.py --workers 2           # two 1-2 thread cells at a time
    python benchmarks/parity_power.py --render benchmarks/results/parity-power-<date>.json

Per training workload and batch size: a baseline (cpu-t1, base seed 0) and a device
column (cpu-t2, base seed 100), 3 repeats each, clean and with the test fault
silent_numeric_error at each error size; the parity rule (report.parity_margins of the
config) decides detected or not, and the clean runs give the false-alarm rate. The
logic is in scripts/trainbench/bench/parity_power.py (its docstring says exactly what
runs). Writes benchmarks/results/parity-power-<date>.json after every run (--resume
continues an interrupted one) and the Markdown table beside it.
"""

from __future__ import annotations

import argparse
import datetime as dt
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "scripts"))

from trainbench.bench import parity_analysis as pa  # noqa: E402
from trainbench.bench import parity_power as pp  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--config", default=str(HERE.parent / "config.yaml"))
    parser.add_argument("--sizes", nargs="+", type=float, default=list(pp.SIZES))
    parser.add_argument("--repeats", type=int, default=pa.REPEATS)
    parser.add_argument("--only", nargs="*", default=[], help="workload or workload:batch_size")
    parser.add_argument("--workers", type=int, default=1, help="cells run at the same time")
    parser.add_argument("--device-threads", type=int, default=2, choices=(1, 2),
                        help="threads of the device column (cpu-t2 or cpu-t1)")  # fmt: skip
    parser.add_argument("--out", help="results JSON (default results/parity-power-<date>.json)")
    parser.add_argument("--resume", action="store_true", help="skip the runs --out already has")
    parser.add_argument("--workdir", help="where the cells' records go (default: a temporary "
                        "folder, removed at the end)")  # fmt: skip
    parser.add_argument("--render", help="re-apply the rule (margins of --config) to a results "
                        "JSON and rewrite it and its Markdown")  # fmt: skip
    parser.add_argument("--simulate", action="store_true", help="the rule's outcome "
                        "frequencies under the normal model (margins and shifts in σ)")  # fmt: skip
    args = parser.parse_args()
    if args.simulate:
        for margin in (2.0, 3.0, 4.0):
            for delta in (0.0, margin + 2, margin + 3):
                found = pa.simulate(margin, delta, args.repeats)
                print(f"margin {margin}σ, shift {delta}σ, n={args.repeats}: {found}")
        return 0
    if args.render:
        results = pp.rerender(args.render, args.config if "--config" in sys.argv else None)
        print(pa.render(results))
        return 0
    date = dt.date.today().isoformat()
    out = Path(args.out or HERE / "results" / f"parity-power-{date}.json")
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="parity-power-"))
    try:
        results = pp.run_benchmark(
            args.config, out, workdir, args.sizes, args.repeats, args.only, args.workers,
            args.resume, f"cpu-t{args.device_threads}",
        )  # fmt: skip
    finally:
        if not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    print(pa.render(results))
    print(f"wrote {out} and {out.with_suffix('.md')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
