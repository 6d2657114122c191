"""Snakemake entry: every figure family, drawn from the tables (never from training)."""

import logging
import sys
from pathlib import Path

# This checkout's trainbench first (Snakemake appends the script folder last).
sys.path.insert(0, snakemake.scriptdir)
from trainbench.figures import FIGURES  # noqa: E402
from trainbench.tables import read_table  # noqa: E402

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, format="%(asctime)s %(message)s")
tables = {Path(path).stem: read_table(path) for path in snakemake.input.tables}
tables.update({name: read_table(snakemake.input[name]) for name in ("runs", "epochs", "matmul")})
for name, draw in FIGURES.items():
    path = getattr(snakemake.output, name)
    draw(tables, path)
    logging.info("wrote %s", path)
