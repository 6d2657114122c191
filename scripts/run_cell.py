"""Snakemake entry: run one matrix cell (every attempt) and write its record."""

from trainbench.config import launcher_settings
from trainbench.launcher import run_cell

spec = dict(snakemake.params.spec)
spec["launcher"] = launcher_settings(snakemake.config, snakemake.wildcards.workload)
run_cell(spec, snakemake.output[0], snakemake.log[0])
