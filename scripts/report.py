"""Snakemake entry: each training workload's verification report, then the index
report results/report.md that links them, all from the tables."""

import logging

from trainbench.report import render_report, render_workload_report

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, format="%(asctime)s %(message)s")
inputs = dict(snakemake.input.items())
baseline = snakemake.params.baseline
for workload, path in zip(
    snakemake.params.workloads, snakemake.output.workload_reports, strict=True
):
    render_workload_report(
        workload, {**inputs, "template": inputs["workload_template"]}, path, baseline=baseline
    )
    logging.info("wrote %s", path)
index = snakemake.output.index
render_report({**inputs, "workload_reports": snakemake.output.workload_reports}, index, baseline)
logging.info("wrote %s", index)
