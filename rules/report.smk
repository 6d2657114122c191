rule report:
    """The index report and each training workload's verification report (seed-000
    form), in one job, from the published tables only (no training, no statistics:
    a template change rebuilds only these)."""
    input:
        tables=expand("results/tables/{name}.csv", name=PUBLISHED_TABLES),
        environments="results/tables/environments.csv",
        skipped="results/tables/skipped.csv",
        figures=expand("results/figures/{name}.png", name=FIGURE_NAMES),
        template=workflow_path(TEMPLATES / "report.md.j2"),
        workload_template=workflow_path(TEMPLATES / "workload_report.md.j2"),
        code=package_code("report.py", "tables.py"),
    output:
        index=report("results/report.md", category="Reports"),
        workload_reports=[
            report(f"results/reports/{workload}.md", category="Reports")
            for workload in REPORTED_WORKLOADS
        ],
    log:
        "results/logs/report.log",
    conda:
        "../envs/trainbench.yaml"
    params:
        workloads=REPORTED_WORKLOADS,
    script:
        "../scripts/report.py"
