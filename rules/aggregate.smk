rule aggregate:
    """Records -> tables. Reads only metrics.json files; nothing is typed in."""
    input:
        records=run_records(),
    output:
        runs="results/tables/runs.csv",
        matmul="results/tables/matmul.csv",
        epochs="results/tables/epochs.csv",
        per_label="results/tables/per_label.csv",
        environments="results/tables/environments.csv",
    log:
        "results/logs/aggregate.log",
    conda:
        "../envs/trainbench.yaml"
    script:
        "../scripts/aggregate.py"
