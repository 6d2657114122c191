rule prepare_data:
    """Build a workload's data set once; every device and repeat reads the same artifact."""
    output:
        f"{RESULTS}/data/{{workload}}/meta.json",
    log:
        f"{RESULTS}/logs/data/{{workload}}.log",
    # Data first: every cell of the workload waits for it.
    priority: TOP_PRIORITY + 1
    conda:
        "../envs/trainbench.yaml"
    params:
        settings=data_settings,
        seed=config["seed"],
    script:
        "../scripts/prepare_data.py"
