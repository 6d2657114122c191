"""Snakemake entry: render results/report.md from the tables."""

import logging

from trainbench.report import render_report

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, format="%(asctime)s %(message)s")
render_report(snakemake.input, snakemake.output[0], baseline=snakemake.params.baseline)
logging.info("wrote %s", snakemake.output[0])
