"""Snakemake entry: run one matrix cell (every attempt) and write its record."""

import sys

# This checkout's trainbench first (Snakemake appends the script folder last).
sys.path.insert(0, snakemake.scriptdir)
from trainbench.config import launcher_settings  # noqa: E402
from trainbench.launch.child_process import CellInterrupted  # noqa: E402
from trainbench.launch.launcher import run_cell  # noqa: E402

spec = dict(snakemake.params.spec)
spec["launcher"] = launcher_settings(snakemake.config, snakemake.wildcards.workload)
try:
    run_cell(spec, snakemake.output[0], snakemake.log[0])
except CellInterrupted as stop:  # Snakemake stopped this job: one line, no traceback
    sys.exit(f"trainbench: {stop}; the cell's process group was stopped, it reruns next time")
