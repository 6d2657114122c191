"""Snakemake entry of rules figures and paper_figures: every figure family, drawn from
the tables (never from training), side by side in the job's threads (worker processes:
forked on Linux, spawned on macOS, trainbench.analysis.worker_processes). With the
param ``paper`` (report.figures) each family at its paper size, named by its file."""

import logging
import sys
from pathlib import Path


def main(snakemake) -> None:
    # This checkout's trainbench first (Snakemake appends the script folder last).
    sys.path.insert(0, snakemake.scriptdir)
    from trainbench.analysis.figures import FIGURE_NAMES, draw_figures, paper_from_config
    from trainbench.analysis.tables import read_table

    logging.basicConfig(
        filename=snakemake.log[0], level=logging.INFO, format="%(asctime)s %(message)s"
    )
    tables = {Path(path).stem: read_table(path) for path in snakemake.input.tables}
    tables.update(
        {name: read_table(snakemake.input[name]) for name in ("runs", "epochs", "matmul")}
    )
    settings = snakemake.params.get("paper")
    style = {}
    if settings is None:
        paths = {name: getattr(snakemake.output, name) for name in FIGURE_NAMES}
    else:
        paths = {Path(path).stem: path for path in snakemake.output}
        style["paper"] = paper_from_config(settings)
    draw_figures(
        tables,
        paths,
        workers=snakemake.threads,
        done=lambda name, path: logging.info("wrote %s", path),
        **style,
    )


# A spawned worker (macOS) runs this file again as __mp_main__, without Snakemake's
# `snakemake` object: the work happens only in the job's own process.
if __name__ == "__main__":
    main(snakemake)
