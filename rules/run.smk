rule run_cell:
    """One cell, in its own child process; a crash becomes a `failed` record, not a failed job."""
    input:
        data=data_input,
    output:
        f"{RESULTS}/runs/{{workload}}/{{device}}/bs{{batch_size}}/rep{{rep}}/metrics.json",
    log:
        f"{RESULTS}/logs/runs/{{workload}}/{{device}}/bs{{batch_size}}/rep{{rep}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/runs/{{workload}}/{{device}}/bs{{batch_size}}/rep{{rep}}.tsv"
    # Repeat k of every device before repeat k + 1 of any (interleaved rounds).
    priority: cell_priority
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


checkpoint plan_round:
    """Adaptive repeats: after the rounds so far, which cells of a workload get
    repeat `rep` — those whose speedup interval is still wider than
    repeats.target_ci_halfwidth, and their baseline (docs/statistics.md)."""
    input:
        round_inputs,
    output:
        f"{RESULTS}/rounds/{{workload}}/rep{{rep}}.json",
    log:
        f"{RESULTS}/logs/rounds/{{workload}}/rep{{rep}}.log",
    priority: TOP_PRIORITY + 1
    conda:
        "../envs/trainbench.yaml"
    params:
        devices=lambda wildcards: DEVICE_ORDER[wildcards.workload],
        baseline=config["report"]["baseline_device"],
        settings=lambda wildcards: REPEATS[wildcards.workload],
    script:
        "../scripts/plan_round.py"
