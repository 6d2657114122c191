"""Snakemake entry: each training workload's verification report, then the index
report results/report.md that links them, all rendered from the published tables."""

import logging
import sys
from pathlib import Path

# This checkout's trainbench first (Snakemake appends the script folder last).
sys.path.insert(0, snakemake.scriptdir)
from trainbench.analysis.html import write_html  # noqa: E402
from trainbench.analysis.report import render_report, render_workload_report  # noqa: E402

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, format="%(asctime)s %(message)s")
inputs = {Path(path).stem: path for path in snakemake.input.tables}
inputs.update(
    config_files=list(snakemake.params.config_files),
    run_name=snakemake.params.run_name,
    environments=snakemake.input.environments,
    skipped=snakemake.input.skipped,
    software=snakemake.input.software,
    duplicates=snakemake.input.duplicates,
    figures=list(snakemake.input.figures),
)
for workload, path in zip(
    snakemake.params.workloads, snakemake.output.workload_reports, strict=True
):
    render_workload_report(
        workload, {**inputs, "template": snakemake.input.workload_template}, path
    )
    logging.info("wrote %s", path)
index = snakemake.output.index
render_report(
    {
        **inputs,
        "template": snakemake.input.template,
        "workload_reports": list(snakemake.output.workload_reports),
    },
    index,
)
logging.info("wrote %s", index)
# The index's links to the workload reports go to their HTML pages.
pages = dict(zip(snakemake.output.workload_reports, snakemake.output.workload_html, strict=True))
write_html(index, snakemake.output.index_html, "trainbench report", pages)
for workload, source, page in zip(
    snakemake.params.workloads,
    snakemake.output.workload_reports,
    snakemake.output.workload_html,
    strict=True,
):
    write_html(source, page, f"trainbench: {workload}")
