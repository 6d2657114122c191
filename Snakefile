# trainbench: workload x device x batch size x repeat -> one record per run -> tables -> report.
# Wiring only; helpers live in rules/common.smk, logic in scripts/trainbench/.
from snakemake.utils import min_version, validate

min_version("9.0")


include: "rules/setup.smk"


configfile: "config.yaml"


# The description at the top of `snakemake --report`.
report: "rules/captions/workflow.rst"


# common.smk checks the config first, so a bad key gets a short message naming it.
include: "rules/common.smk"


# Snakemake's own schema check, as the workflow template has it (~0.2 s a start: it
# parses the 47 kB schema again); after common.smk's, it finds nothing new.
validate(config, "scripts/trainbench/config/schemas/config.schema.yaml")


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
        PAPER_FIGURES,


# On a cluster (profiles/slurm) only cells and data sets are Slurm jobs; every other
# rule only reads records and writes tables, figures and reports, where Snakemake
# runs. (What the `localrules:` directive does, for every rule defined above.)
CLUSTER_JOB_RULES = {"run_cell", "run_reference", "prepare_data"}
workflow.localrules(
    *(r.name for r in workflow.rules if r.name not in CLUSTER_JOB_RULES)
)
