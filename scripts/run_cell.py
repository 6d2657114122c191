"""Snakemake entry: run one matrix cell (every attempt) and write its record."""

from trainbench.launcher import run_cell

run_cell(snakemake.params.spec, snakemake.output[0], snakemake.log[0])
