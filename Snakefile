# trainbench: workload x device x batch size x repeat -> one record per run -> tables -> report.
# Wiring only; helpers live in rules/common.smk, logic in scripts/trainbench/.
from snakemake.utils import min_version, validate

min_version("9.0")


configfile: "config.yaml"


# common.smk checks the config first, so a bad key gets a short message naming it.
include: "rules/common.smk"


validate(config, "scripts/trainbench/schemas/config.schema.yaml")


include: "rules/data.smk"
include: "rules/run.smk"
include: "rules/aggregate.smk"
include: "rules/figures.smk"
include: "rules/report.smk"


rule all:
    input:
        "results/report.md",
