"""Snakemake entry: one repeat's float64 reference (or a `skipped` record saying why not)."""

import sys

# This checkout's trainbench first (Snakemake appends the script folder last).
sys.path.insert(0, snakemake.scriptdir)
from trainbench.config import launcher_settings  # noqa: E402
from trainbench.launch.child_process import CellInterrupted  # noqa: E402
from trainbench.launch.reference import make_reference  # noqa: E402

spec = dict(snakemake.params.spec)
spec["launcher"] = launcher_settings(snakemake.config, snakemake.wildcards.workload)
try:
    make_reference(
        spec,
        snakemake.input.baseline,
        list(snakemake.input.others),
        snakemake.output[0],
        snakemake.log[0],
    )
except CellInterrupted as stop:
    sys.exit(f"trainbench: {stop}; the reference's process group was stopped, it reruns next time")
