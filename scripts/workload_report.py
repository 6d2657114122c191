"""Snakemake entry: render results/reports/{workload}.md from the tables."""

import logging

from trainbench.report import render_workload_report

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, format="%(asctime)s %(message)s")
render_workload_report(
    snakemake.wildcards.workload,
    snakemake.input,
    snakemake.output[0],
    baseline=snakemake.params.baseline,
)
logging.info("wrote %s", snakemake.output[0])
