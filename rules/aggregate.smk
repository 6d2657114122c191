rule aggregate:
    """Records -> record tables: facts copied out of metrics.json files, nothing typed in."""
    input:
        records=all_records,
        included=included_records(),
        code=package_code("aggregate.py", "records.py"),
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


rule statistics:
    """Record tables -> every published statistic, computed once (trainbench.stats):
    speedup and eval speed with intervals honest for n and verdicts from them,
    stability and noise flags, repeats, parity, memory, crossover, verdicts, warnings.
    """
    input:
        runs="results/tables/runs.csv",
        epochs="results/tables/epochs.csv",
        per_label_runs="results/tables/per_label_runs.csv",
        matmul="results/tables/matmul.csv",
        code=package_code("stats", "tables.py", "published.py"),
    output:
        tables=expand(
            "results/tables/{name}.{ext}", name=PUBLISHED_TABLES, ext=("csv", "md")
        ),
    log:
        "results/logs/statistics.log",
    conda:
        "../envs/trainbench.yaml"
    params:
        devices=DEVICE_ORDER,
        baseline=config["report"]["baseline_device"],
        repeats=REPEATS,
    script:
        "../scripts/compute_statistics.py"
