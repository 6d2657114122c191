rule aggregate:
    """Records -> tables. Reads only metrics.json files; nothing is typed in."""
    input:
        records=run_records(),
        included=included_records(),
    output:
        runs="results/tables/runs.csv",
        matmul="results/tables/matmul.csv",
        epochs="results/tables/epochs.csv",
        per_label_runs="results/tables/per_label_runs.csv",
        environments="results/tables/environments.csv",
        skipped="results/tables/skipped.csv",
    log:
        "results/logs/aggregate.log",
    conda:
        "../envs/trainbench.yaml"
    params:
        skip_invalid=config["aggregate"]["skip_invalid_records"],
    script:
        "../scripts/aggregate.py"
