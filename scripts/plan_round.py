"""Snakemake entry (checkpoint plan_round): which cells of a workload get one more
repeat in the next round of adaptive repeats."""

import logging
import sys

# This checkout's trainbench first (Snakemake appends the script folder last).
sys.path.insert(0, snakemake.scriptdir)
from trainbench.analysis.rounds import plan_round  # noqa: E402

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, format="%(asctime)s %(message)s")
plan = plan_round(
    list(snakemake.input),
    workload=snakemake.wildcards.workload,
    rep=int(snakemake.wildcards.rep),
    devices=snakemake.params.devices,
    baseline=snakemake.params.baseline,
    settings=snakemake.params.settings,
    output=snakemake.output[0],
)
logging.info("round rep%s of %s: %s", snakemake.wildcards.rep, snakemake.wildcards.workload, plan)
