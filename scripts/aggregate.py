"""Snakemake entry: read every record (this run's and any included folders') and
write the record tables."""

import logging
import sys

# This checkout's trainbench first (Snakemake appends the script folder last).
sys.path.insert(0, snakemake.scriptdir)
from trainbench.analysis.aggregate import write_tables  # noqa: E402
from trainbench.common.records import RecordError  # noqa: E402

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, format="%(asctime)s %(message)s")
paths = list(snakemake.input.records) + list(snakemake.input.included)
try:
    tables = write_tables(
        paths,
        snakemake.output,
        skip_invalid=snakemake.params.skip_invalid,
        own=snakemake.input.records,
        references=snakemake.input.references,
        include_results=snakemake.params.include_results,
    )
except RecordError as error:  # one line naming the file and the fix, no traceback
    logging.error("%s", error)
    sys.exit(f"trainbench: {error}")
logging.info("aggregated %d records, skipped %d", len(paths), len(tables["skipped"]))
for note in tables["duplicates"].to_dict("records"):
    logging.info("%s: %s (%s)", note["kind"], note["identity"], note["dropped"])
