"""Snakemake entry: the published tables (CSV + Markdown) from the record tables."""

import logging

from trainbench import analysis, stats

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, format="%(asctime)s %(message)s")
tables = analysis.analysis_tables(
    analysis.read_table(snakemake.input.runs),
    analysis.read_table(snakemake.input.epochs),
    analysis.read_table(snakemake.input.per_label_runs),
    analysis.read_table(snakemake.input.matmul),
    baseline=snakemake.params.baseline,
)
for name, frame in tables.items():
    stats.write_table(frame, f"results/tables/{name}.csv", f"results/tables/{name}.md")
    logging.info("%s: %d rows", name, len(frame))
