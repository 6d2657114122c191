rule report:
    """The index report and each training workload's verification report (seed-000
    form), in one job, from the published tables only (no training, no statistics:
    a template change rebuilds only these)."""
    input:
        tables=expand(f"{RESULTS}/tables/{{name}}.csv", name=PUBLISHED_TABLES),
        environments=f"{RESULTS}/tables/environments.csv",
        skipped=f"{RESULTS}/tables/skipped.csv",
        software=f"{RESULTS}/tables/software.csv",
        duplicates=f"{RESULTS}/tables/duplicates.csv",
        figures=expand(f"{RESULTS}/figures/{{name}}.png", name=FIGURE_NAMES),
        template=workflow_path(TEMPLATES / "report.md.j2"),
        workload_template=workflow_path(TEMPLATES / "workload_report.md.j2"),
        code=package_code(
            "analysis/report.py",
            "analysis/report_tables.py",
            "analysis/report_beside.py",
            "analysis/beside_verdicts.py",
            "analysis/tables.py",
            "analysis/html.py",
        ),
    output:
        index=f"{RESULTS}/report.md",
        workload_reports=[
            f"{RESULTS}/reports/{workload}.md" for workload in REPORTED_WORKLOADS
        ],
        # The same reports as HTML pages, shown in place by `snakemake --report`.
        index_html=report(
            f"{RESULTS}/html/report.html",
            caption="captions/report.rst",
            category="1. Verdicts",
            labels={"report": "all workloads"},
        ),
        workload_html=[
            report(
                f"{RESULTS}/html/{workload}.html",
                caption="captions/workload_report.rst",
                category="1. Verdicts",
                labels={"report": workload},
            )
            for workload in REPORTED_WORKLOADS
        ],
    log:
        f"{RESULTS}/logs/report.log",
    conda:
        "../envs/trainbench.yaml"
    params:
        workloads=REPORTED_WORKLOADS,
        config_files=CONFIG_FILES,
        run_name=RUN_NAME,
    script:
        "../scripts/report.py"
