"""Snakemake entry: read every record and write the tables."""

import logging

from trainbench.analysis import write_tables

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, format="%(asctime)s %(message)s")
write_tables(snakemake.input.records, snakemake.output)
logging.info("aggregated %d records", len(snakemake.input.records))
