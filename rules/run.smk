rule run_cell:
    """One cell, in its own child process; a crash becomes a `failed` record, not a failed job."""
    input:
        data=data_input,
    output:
        "results/runs/{workload}/{device}/bs{batch_size}/rep{rep}/metrics.json",
    log:
        "results/logs/runs/{workload}/{device}/bs{batch_size}/rep{rep}.log",
    benchmark:
        "results/benchmarks/runs/{workload}/{device}/bs{batch_size}/rep{rep}.tsv"
    conda:
        "../envs/trainbench.yaml"
    threads: cell_threads
    resources:
        gpu=gpu_slots,
        timed_slot=timed_slots,
        # read by the Slurm executor only (profiles/slurm); local runs ignore them
        cpus_per_task=cluster_cpus,
        slurm_extra=cluster_sbatch_flags,
        runtime=cluster_runtime,
    params:
        spec=run_spec,
    script:
        "../scripts/run_cell.py"
