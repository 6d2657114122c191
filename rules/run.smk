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
    # Repeat k of every device before repeat k + 1 of any (interleaved rounds), a
    # workload's devices one after another within a round (RUN_ORDER).
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
    # Never beside a timed cell: its Python start and statistics (1-3 s of a core)
    # ran beside CUDA cells on a 16-core host, every round but the first.
    resources:
        timed_slot=timed_slots,
    params:
        devices=lambda wildcards: DEVICE_ORDER[wildcards.workload],
        baseline=config["report"]["baseline_device"],
        settings=lambda wildcards: REPEATS[wildcards.workload],
    script:
        "../scripts/plan_round.py"


rule run_reference:
    """The float64 reference of one repeat's first training steps (parity's yardstick),
    on the CPU; made only when another device of the repeat finished ok with losses not
    bit-identical to the baseline's, else a `skipped` record with the reason."""
    input:
        unpack(reference_inputs),
        data=data_input,
    output:
        f"{RESULTS}/references/{{workload}}/bs{{batch_size}}/rep{{rep}}/reference.json",
    log:
        f"{RESULTS}/logs/references/{{workload}}/bs{{batch_size}}/rep{{rep}}.log",
    conda:
        "../envs/trainbench.yaml"
    # Untimed, but never beside a timed cell on this machine.
    threads: reference_threads
    resources:
        timed_slot=timed_slots,
        runtime=cluster_runtime,
    params:
        spec=reference_run_spec,
    script:
        "../scripts/run_reference.py"
