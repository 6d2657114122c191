"""Workflow overhead benchmark: per-cell overhead of Snakemake, process start-up and
imports, and aggregate + tables + figures + reports over 1,000 synthetic records.

    .venv/bin/python benchmarks/workflow_overhead.py --rev <commit> --label before
    .venv/bin/python benchmarks/workflow_overhead.py --label after

Writes benchmarks/results/workflow-overhead-<N>core-<date>.json and the
"## Workflow overhead" section of benchmarks/README.md. The logic lives in
scripts/trainbench/bench/overhead.py.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

from trainbench.bench.overhead import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
