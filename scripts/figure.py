"""Snakemake entry: render every figure family from the tables (never from training)."""

import logging

from trainbench.analysis import read_table
from trainbench.figures import FIGURES

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, format="%(asctime)s %(message)s")
tables = {name: read_table(path) for name, path in snakemake.input.items()}
tables["per_label"] = tables.pop("per_label_runs")
for name, path in snakemake.output.items():
    FIGURES[name](tables, path, snakemake.params.baseline)
    logging.info("wrote %s", path)
