# trainbench: workload x device x batch size x repeat -> one record per run -> tables -> report.
# Wiring only; helpers live in rules/common.smk, logic in scripts/trainbench/.
from snakemake.utils import min_version

min_version("9.0")


include: "rules/setup.smk"


configfile: "config.yaml"


# The description at the top of `snakemake --report`.
report: "rules/captions/workflow.rst"


# common.smk validates the config against scripts/trainbench/schemas/config.schema.yaml
# (defaults filled in, as Snakemake's validate() does) with a short message naming a bad
# key; a second validate() here would only parse the 47 kB schema again (~0.2 s a start).
include: "rules/common.smk"


# aggregate.records_only: no data set is built and no cell runs (records already here).
if not config["aggregate"]["records_only"]:

    include: "rules/data.smk"
    include: "rules/run.smk"


include: "rules/aggregate.smk"
include: "rules/figures.smk"
include: "rules/report.smk"


rule all:
    default_target: True
    input:
        f"{RESULTS}/report.md",


# On a cluster (profiles/slurm) only cells and data sets are Slurm jobs; every other
# rule only reads records and writes tables, figures and reports, where Snakemake
# runs. (What the `localrules:` directive does, for every rule defined above.)
CLUSTER_JOB_RULES = {"run_cell", "run_reference", "prepare_data"}
workflow.localrules(
    *(r.name for r in workflow.rules if r.name not in CLUSTER_JOB_RULES)
)
