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
    # Never beside a timed cell: building another workload's data would disturb it.
    resources:
        timed_slot=timed_slots,
    params:
        settings=data_settings,
        seed=config["seed"],
    script:
        "../scripts/prepare_data.py"
