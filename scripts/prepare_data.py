"""Snakemake entry: build one workload's shared data artifact."""

import logging
from pathlib import Path

from trainbench.workloads import get

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, format="%(asctime)s %(message)s")
workload = get(snakemake.wildcards.workload)
meta = workload.prepare_data(
    snakemake.params.settings, Path(snakemake.output[0]).parent, snakemake.params.seed
)
logging.info("prepared %s: %s", snakemake.wildcards.workload, meta)
