#!/usr/bin/env bash
# Rebuild tests/data/cpu-records.tgz from this checkout's code: real records (schema as
# written now) of the matrix in tests/data/cpu-records.yaml, run by the workflow itself.
# Needs `make report`'s .venv; takes a few minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/../.."
rm -rf results/cpu-records
.venv/bin/snakemake --cores 1 results/cpu-records/tables/runs.csv \
    --configfile tests/data/cpu-records.yaml
tar czf tests/data/cpu-records.tgz --owner=0 --group=0 --sort=name \
    -C results/cpu-records runs
echo "tests/data/cpu-records.tgz: $(tar tzf tests/data/cpu-records.tgz | grep -c metrics.json) records"
