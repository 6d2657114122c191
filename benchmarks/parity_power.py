"""Detection power and false alarms of the parity rule, on this machine's CPU.

    python benchmarks/parity_power.py                      # every training workload of config.yaml
    python benchmarks/parity_power.py --only image_cnn:32 --sizes 0.03 0.3
    python benchmarks/parity_power.py --columns baseline reference clean fault3%
    python benchmarks/parity_power.py --workers 2           # two one-thread cells at a time
    python benchmarks/parity_power.py --render benchmarks/results/parity-power-<date>.json

Per training workload and batch size, 5 repeats (run seeds 0-4) of a one-thread
float32 baseline, their float64 references, a clean copy of the baseline, three benign
columns (two threads, oneDNN limited to AVX2, bf16 autocast) and the test fault
silent_numeric_error at each error size; the parity rule of the report, paired by run
seed, judges every column against the baseline at 5 repeats, at 3 and on every 3 of
the 5 seeds. The logic is in scripts/trainbench/bench/parity_power.py (its docstring
says exactly what runs) and parity_analysis.py. Writes
benchmarks/results/parity-power-<date>.json after every run (--resume continues an
interrupted one) and the Markdown beside it.
"""

from __future__ import annotations

import argparse
import datetime as dt
import shlex
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "scripts"))

from trainbench.bench import parity_markdown  # noqa: E402
from trainbench.bench import parity_power as pp  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--config", default=str(HERE.parent / "config.yaml"))
    parser.add_argument("--sizes", nargs="+", type=float, default=list(pp.SIZES))
    parser.add_argument("--repeats", type=int, default=pp.REPEATS)
    parser.add_argument("--only", nargs="*", default=[], help="workload or workload:batch_size")
    parser.add_argument("--columns", nargs="*", default=[],
                        help="columns to run (default all: " + " ".join(pp.columns()).replace("%", "%%") + ")")  # fmt: skip
    parser.add_argument("--workers", type=int, default=1, help="cells run at the same time")
    parser.add_argument("--out", help="results JSON (default results/parity-power-<date>.json)")
    parser.add_argument("--resume", action="store_true", help="skip the runs --out already has")
    parser.add_argument("--workdir", help="where the cells' records go (default: a temporary "
                        "folder, removed at the end)")  # fmt: skip
    parser.add_argument("--render", help="re-apply the rule to a results JSON and rewrite it "
                        "and its Markdown")  # fmt: skip
    args = parser.parse_args()
    if args.render:
        print(parity_markdown.render(pp.rerender(args.render)))
        return 0
    unknown = sorted(set(args.columns) - set(pp.columns(args.sizes)))
    if unknown:
        parser.error(f"--columns: unknown {unknown}; known: {' '.join(pp.columns(args.sizes))}")
    date = dt.date.today().isoformat()
    out = Path(args.out or HERE / "results" / f"parity-power-{date}.json")
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="parity-power-"))
    command = "python " + shlex.join(["benchmarks/parity_power.py", *sys.argv[1:]])
    options = pp.Options(sizes=args.sizes, repeats=args.repeats, only=args.only,
                         columns=args.columns, workers=args.workers, resume=args.resume,
                         command=command)  # fmt: skip
    try:
        results = pp.run_benchmark(args.config, out, workdir, options)
    finally:
        if not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    print(parity_markdown.render(results))
    print(f"wrote {out} and {out.with_suffix('.md')}")
    print(f"rerun: {command}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
