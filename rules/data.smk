rule prepare_data:
    """Build a workload's data set once; every device and repeat reads the same artifact."""
    output:
        "results/data/{workload}/meta.json",
    log:
        "results/logs/data/{workload}.log",
    conda:
        "../envs/trainbench.yaml"
    params:
        settings=lambda wildcards: config["workloads"][wildcards.workload],
        seed=config["seed"],
    script:
        "../scripts/prepare_data.py"
