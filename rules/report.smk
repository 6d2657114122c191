rule report:
    """Tables -> the Markdown report (no training: a template change rebuilds only this)."""
    input:
        runs="results/tables/runs.csv",
        matmul="results/tables/matmul.csv",
        environments="results/tables/environments.csv",
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
