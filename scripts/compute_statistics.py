"""Snakemake entry: the record tables -> every published table (CSV + Markdown),
computed once by the statistics layer."""

import logging
from pathlib import Path

from trainbench.stats import publish
from trainbench.tables import read_table, write_table

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, format="%(asctime)s %(message)s")
tables = {name: read_table(path) for name, path in snakemake.input.items()}
published = publish(
    tables,
    devices=snakemake.params.devices,
    baseline=snakemake.params.baseline,
    repeats=snakemake.params.repeats,
)
paths = {Path(p).name: p for p in snakemake.output.tables}
for name, frame in published.items():
    write_table(frame, paths[f"{name}.csv"], paths[f"{name}.md"])
    logging.info("%s: %d rows", name, len(frame))
