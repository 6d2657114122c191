"""Snakemake entry: build one workload's shared data artifact."""

import logging
import sys
from pathlib import Path

# This checkout's trainbench first (Snakemake appends the script folder last).
sys.path.insert(0, snakemake.scriptdir)
from trainbench.workloads import get  # noqa: E402

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, format="%(asctime)s %(message)s")
workload = get(snakemake.wildcards.workload)
meta = workload.prepare_data(
    snakemake.params.settings, Path(snakemake.output[0]).parent, snakemake.params.seed
)
logging.info("prepared %s: %s", snakemake.wildcards.workload, meta)
