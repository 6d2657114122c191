"""What evaluation calibration costs beyond the evaluation it times, from run records.

    python benchmarks/eval_calibration_cost.py results/gpu-host-1 results/gpu-host-2 \
        --out benchmarks/results/eval-calibration-cost-<date>.json

Each argument is a results folder (its records under runs/). Writes the JSON and a .md
beside it. The logic is in scripts/trainbench/bench/eval_calibration_cost.py.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import shlex
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "scripts"))

from trainbench.bench import eval_calibration_cost as ec  # noqa: E402
from trainbench.common.atomic_files import atomic_write_text  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("folders", nargs="+", type=Path, help="results folders")
    parser.add_argument("--how", default="", help="where the folders' records come from")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    made = dt.datetime.now(dt.UTC)
    result = {
        "made_at": made.isoformat(timespec="seconds"),
        "command": shlex.join(["python", "benchmarks/eval_calibration_cost.py", *sys.argv[1:]]),
        "how": args.how,
        "rows": [row for folder in args.folders for row in ec.folder_costs(folder)],
    }
    out = args.out or HERE / "results" / f"eval-calibration-cost-{made:%Y-%m-%d}.json"
    atomic_write_text(out, json.dumps(result, indent=1) + "\n")
    atomic_write_text(out.with_suffix(".md"), ec.markdown(result))
    print(f"wrote {out} and {out.with_suffix('.md')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
