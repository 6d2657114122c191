"""Snakemake entry: read every record (this run's and any included folders') and
write the record tables."""

import logging

from trainbench.aggregate import write_tables

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, format="%(asctime)s %(message)s")
paths = list(snakemake.input.records) + list(snakemake.input.included)
tables = write_tables(paths, snakemake.output, skip_invalid=snakemake.params.skip_invalid)
logging.info("aggregated %d records, skipped %d", len(paths), len(tables["skipped"]))
