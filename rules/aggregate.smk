rule aggregate:
    """Records -> record tables: facts copied out of metrics.json files, nothing typed in."""
    input:
        records=all_records,
        included=included_records(),
        references=aggregated_references,
        code=package_code(
            "analysis/aggregate.py",
            "analysis/run_rows.py",
            "analysis/record_view.py",
            "analysis/hardware.py",
            "common/records.py",
            "analysis/setups.py",
            "analysis/software.py",
            "analysis/record_identity.py",
            "analysis/loss_tables.py",
            "analysis/quality_rows.py",
            "common/vocabulary.py",
        ),
    output:
        runs=f"{RESULTS}/tables/runs.csv",
        matmul=f"{RESULTS}/tables/matmul.csv",
        epochs=f"{RESULTS}/tables/epochs.csv",
        per_label_runs=f"{RESULTS}/tables/per_label_runs.csv",
        quality=f"{RESULTS}/tables/quality.csv",
        environments=f"{RESULTS}/tables/environments.csv",
        skipped=f"{RESULTS}/tables/skipped.csv",
        setups=f"{RESULTS}/tables/setups.csv",
        software=f"{RESULTS}/tables/software.csv",
        duplicates=f"{RESULTS}/tables/duplicates.csv",
        references=f"{RESULTS}/tables/references.csv",
        step_losses=f"{RESULTS}/tables/step_losses.csv",
    log:
        f"{RESULTS}/logs/aggregate.log",
    conda:
        "../envs/trainbench.yaml"
    params:
        skip_invalid=config["aggregate"]["skip_invalid_records"],
        include_results=config["aggregate"]["include_results"],
    script:
        "../scripts/aggregate.py"


rule statistics:
    """Record tables -> every published statistic, computed once (trainbench.analysis.stats):
    speedup and eval speed with intervals honest for n and verdicts from them,
    stability and noise flags, repeats, parity, memory, crossover, verdicts, warnings.
    """
    input:
        runs=f"{RESULTS}/tables/runs.csv",
        epochs=f"{RESULTS}/tables/epochs.csv",
        per_label_runs=f"{RESULTS}/tables/per_label_runs.csv",
        quality=f"{RESULTS}/tables/quality.csv",
        matmul=f"{RESULTS}/tables/matmul.csv",
        setups=f"{RESULTS}/tables/setups.csv",
        step_losses=f"{RESULTS}/tables/step_losses.csv",
        references=f"{RESULTS}/tables/references.csv",
        code=package_code(
            "analysis/stats",
            "analysis/tables.py",
            "analysis/published.py",
            "common/precision_classes.py",
            "common/vocabulary.py",
            "config/targets.py",
        ),
    output:
        tables=expand(
            f"{RESULTS}/tables/{{name}}.{{ext}}",
            name=PUBLISHED_TABLES,
            ext=("csv", "md"),
        ),
    log:
        f"{RESULTS}/logs/statistics.log",
    conda:
        "../envs/trainbench.yaml"
    # The speed tables' bootstraps beside the other tables (trainbench.analysis.stats.publish).
    threads: 2
    params:
        devices=DEVICE_ORDER,
        baseline=config["report"]["baseline_device"],
        repeats=REPEATS,
        parity=config["report"]["parity"],
        step_breakdown=config["report"]["step_breakdown"],
        targets=TARGETS,
        compare=config["aggregate"]["compare"],
    script:
        "../scripts/compute_statistics.py"
