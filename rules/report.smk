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
        code=package_code("report.py", "tables.py", "html.py"),
    output:
        index="results/report.md",
        workload_reports=[
            f"results/reports/{workload}.md" for workload in REPORTED_WORKLOADS
        ],
        # The same reports as HTML pages, shown in place by `snakemake --report`.
        index_html=report(
            "results/html/report.html",
            caption="captions/report.rst",
            category="1. Verdicts",
            labels={"report": "all workloads"},
        ),
        workload_html=[
            report(
                f"results/html/{workload}.html",
                caption="captions/workload_report.rst",
                category="1. Verdicts",
                labels={"report": workload},
            )
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
