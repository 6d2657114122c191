"""Snakemake entry: the record tables -> every published table (CSV + Markdown),
computed once by the statistics layer."""

import logging
import sys
from pathlib import Path

# The rule's inputs the statistics read (not analysis.published.RECORD_TABLES: the
# aggregate rule's outputs, a different set).
STATISTICS_INPUTS = (
    "runs",
    "epochs",
    "per_label_runs",
    "quality",
    "matmul",
    "setups",
    "step_losses",
    "references",
)


def main(snakemake) -> None:
    # This checkout's trainbench first (Snakemake appends the script folder last).
    sys.path.insert(0, snakemake.scriptdir)
    from trainbench.analysis.stats import publish
    from trainbench.analysis.tables import read_table, write_table

    logging.basicConfig(
        filename=snakemake.log[0], level=logging.INFO, format="%(asctime)s %(message)s"
    )
    tables = {name: read_table(snakemake.input[name]) for name in STATISTICS_INPUTS}
    published = publish(
        tables,
        devices=snakemake.params.devices,
        baseline=snakemake.params.baseline,
        repeats=snakemake.params.repeats,
        parity=snakemake.params.parity,
        step_breakdown=snakemake.params.step_breakdown,
        targets=snakemake.params.targets,
        compare=snakemake.params.compare,
        workers=snakemake.threads,
    )
    paths = {Path(p).name: p for p in snakemake.output.tables}
    for name, frame in published.items():
        write_table(frame, paths[f"{name}.csv"], paths[f"{name}.md"])
        logging.info("%s: %d rows", name, len(frame))


# A spawned worker (macOS) runs this file again as __mp_main__, without Snakemake's
# `snakemake` object: the work happens only in the job's own process.
if __name__ == "__main__":
    main(snakemake)
