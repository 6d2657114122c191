"""Snakemake entry: the published tables (CSV + Markdown), then every figure family,
from the record tables (never from training), in one process."""

import logging
from pathlib import Path

from trainbench import analysis, stats
from trainbench.figures import FIGURES

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, format="%(asctime)s %(message)s")
baseline = snakemake.params.baseline
tables = {name: analysis.read_table(path) for name, path in snakemake.input.items()}

published = analysis.analysis_tables(
    *(tables[name].copy() for name in ("runs", "epochs", "per_label_runs", "matmul")),
    baseline=baseline,
)
paths = {Path(p).name: p for p in snakemake.output.tables}
for name, frame in published.items():
    stats.write_table(frame, paths[f"{name}.csv"], paths[f"{name}.md"])
    logging.info("%s: %d rows", name, len(frame))

tables["per_label"] = tables.pop("per_label_runs")
for name, draw in FIGURES.items():
    path = getattr(snakemake.output, name)
    draw(tables, path, baseline)
    logging.info("wrote %s", path)
