"""Snakemake's scheduler passes while jobs wait, with its own timers and with one pending.

    python benchmarks/scheduler_timers.py --jobs 30 --seconds 2 \
        --out benchmarks/results/scheduler-timers-<date>.json

Runs a toy workflow twice (Snakemake's own reevaluation timers, then kept to one pending
by trainbench.launch.scheduler_passes) and writes the JSON and a .md beside it. The
logic is in scripts/trainbench/bench/scheduler_timers.py.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import shlex
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "scripts"))

import snakemake  # noqa: E402
from trainbench.bench import scheduler_timers as st  # noqa: E402
from trainbench.bench.provenance import git_commit  # noqa: E402
from trainbench.common.atomic_files import atomic_write_text  # noqa: E402
from trainbench.measure.cpu_features import cpu_model_name  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=30)
    parser.add_argument("--seconds", type=float, default=2.0, help="each job's sleep")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    made = dt.datetime.now(dt.UTC)
    with tempfile.TemporaryDirectory() as tmp:
        rows = [st.run_toy(Path(tmp) / str(patch), patch, args.jobs, args.seconds)
                for patch in (False, True)]  # fmt: skip
    result = {
        "made_at": made.isoformat(timespec="seconds"),
        "command": shlex.join(["python", "benchmarks/scheduler_timers.py", *sys.argv[1:]]),
        "machine": f"{cpu_model_name()}, Python {platform.python_version()}, Snakemake "
        f"{snakemake.__version__}",
        "code": f"git {git_commit(HERE.parent)}",
        "rows": rows,
    }
    out = args.out or HERE / "results" / f"scheduler-timers-{made:%Y-%m-%d}.json"
    atomic_write_text(out, json.dumps(result, indent=1) + "\n")
    atomic_write_text(out.with_suffix(".md"), st.markdown(result))
    print(f"wrote {out} and {out.with_suffix('.md')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
