rule workload_report:
    """One workload's verification report (seed-000 form), from the tables only."""
    input:
        runs="results/tables/runs.csv",
        epochs="results/tables/epochs.csv",
        per_label_runs="results/tables/per_label_runs.csv",
        environments="results/tables/environments.csv",
        template=str(TEMPLATES / "workload_report.md.j2"),
    output:
        "results/reports/{workload}.md",
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
        workload_reports=expand(
            "results/reports/{workload}.md", workload=REPORTED_WORKLOADS
        ),
        template=str(TEMPLATES / "report.md.j2"),
    output:
        "results/report.md",
    log:
        "results/logs/report.log",
    conda:
        "../envs/trainbench.yaml"
    params:
        baseline=config["report"]["baseline_device"],
    script:
        "../scripts/report.py"
