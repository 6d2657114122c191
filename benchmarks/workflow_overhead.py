"""Workflow overhead benchmark: per-cell overhead of Snakemake, process start-up and
imports, and aggregate + tables + figures + reports over 1,000 synthetic records.

    .venv/bin/python benchmarks/workflow_overhead.py --rev <commit> --label before
    .venv/bin/python benchmarks/workflow_overhead.py --label after

Writes benchmarks/results/workflow-overhead-<N>core-<date>.json and the
"## Workflow overhead" section of benchmarks/README.md. The logic lives in
benchmarks/overhead/ (measure, trace, synthetic records, render).
"""

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent / "scripts"), str(HERE)]

from overhead.measure import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
