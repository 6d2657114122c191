rule workload_report:
    """One workload's verification report (seed-000 form), from the tables only."""
    input:
        runs="results/tables/runs.csv",
        epochs="results/tables/epochs.csv",
        per_label_runs="results/tables/per_label_runs.csv",
        environments="results/tables/environments.csv",
        analysis=expand("results/tables/{name}.csv", name=ANALYSIS_TABLES),
        figures=expand("results/figures/{name}.png", name=FIGURE_NAMES),
        template=str(TEMPLATES / "workload_report.md.j2"),
    output:
        report("results/reports/{workload}.md", category="Reports"),
    log:
        "results/logs/reports/{workload}.log",
    conda:
        "../envs/trainbench.yaml"
    params:
        baseline=config["report"]["baseline_device"],
    script:
        "../scripts/workload_report.py"


rule report:
    """Tables -> the Markdown report (no training: a template change rebuilds only this)."""
    input:
        runs="results/tables/runs.csv",
        matmul="results/tables/matmul.csv",
        environments="results/tables/environments.csv",
        skipped="results/tables/skipped.csv",
        analysis=expand("results/tables/{name}.csv", name=ANALYSIS_TABLES),
        figures=expand("results/figures/{name}.png", name=FIGURE_NAMES),
        workload_reports=expand(
            "results/reports/{workload}.md", workload=REPORTED_WORKLOADS
        ),
        template=str(TEMPLATES / "report.md.j2"),
    output:
        report("results/report.md", category="Reports"),
    log:
        "results/logs/report.log",
    conda:
        "../envs/trainbench.yaml"
    params:
        baseline=config["report"]["baseline_device"],
    script:
        "../scripts/report.py"
