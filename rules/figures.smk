# Every figure family in one job, from the tables only (showyourwork's rule: compute
# and plotting apart). The job imports matplotlib and pandas once (~1 s a process on a
# 2-core machine), then draws the families side by side in processes forked from it,
# one per thread: one job per family would pay those imports eight times. On macOS,
# where fork is unsafe, the processes are spawned and pay the imports once each
# (trainbench.analysis.worker_processes). Changing a figure never recomputes a table or
# retrains.


rule figures:
    """Throughput, speedup, epoch times, loss, per-label F1, matmul, memory, energy,
    step-breakdown, quality-curve, time-to-target, across-batch-sizes and comparison
    figures, drawn from the published tables (and each run's raw value as a dot)."""
    input:
        tables=expand(f"{RESULTS}/tables/{{name}}.csv", name=PUBLISHED_TABLES),
        runs=f"{RESULTS}/tables/runs.csv",
        epochs=f"{RESULTS}/tables/epochs.csv",
        matmul=f"{RESULTS}/tables/matmul.csv",
        code=package_code("analysis/figures", "analysis/tables.py"),
    output:
        throughput=report(
            f"{RESULTS}/figures/throughput.png",
            caption="captions/throughput.rst",
            category="Throughput",
        ),
        speedup=report(
            f"{RESULTS}/figures/speedup.png",
            caption="captions/speedup.rst",
            category="Speedup",
        ),
        epoch_time=report(
            f"{RESULTS}/figures/epoch_time.png",
            caption="captions/epoch_time.rst",
            category="Stability",
        ),
        loss=report(
            f"{RESULTS}/figures/loss.png",
            caption="captions/loss.rst",
            category="Accuracy parity",
        ),
        per_label=report(
            f"{RESULTS}/figures/per_label.png",
            caption="captions/per_label.rst",
            category="Accuracy parity",
        ),
        matmul=report(
            f"{RESULTS}/figures/matmul.png",
            caption="captions/matmul.rst",
            category="Crossover",
        ),
        memory=report(
            f"{RESULTS}/figures/memory.png",
            caption="captions/memory.rst",
            category="Memory",
        ),
        energy=report(
            f"{RESULTS}/figures/energy.png",
            caption="captions/energy.rst",
            category="Energy",
        ),
        step_breakdown=report(
            f"{RESULTS}/figures/step_breakdown.png",
            caption="captions/step_breakdown.rst",
            category="Speedup",
        ),
        quality=report(
            f"{RESULTS}/figures/quality.png",
            caption="captions/quality.rst",
            category="Time to target",
        ),
        time_to_target=report(
            f"{RESULTS}/figures/time_to_target.png",
            caption="captions/time_to_target.rst",
            category="Time to target",
        ),
        across_batch=report(
            f"{RESULTS}/figures/across_batch.png",
            caption="captions/across_batch.rst",
            category="Speedup",
        ),
        comparison=report(
            f"{RESULTS}/figures/comparison.png",
            caption="captions/comparison.rst",
            category="Comparison",
        ),
    log:
        f"{RESULTS}/logs/figures.log",
    conda:
        "../envs/trainbench.yaml"
    # Snakemake gives a job at most --cores threads.
    threads: len(FIGURE_NAMES)
    script:
        "../scripts/figures.py"


# The same families at a paper's size (report.figures: width, fonts in points), as PDF
# or SVG, in a rule of their own: the PNG figures and the reports never wait for them,
# and report.figures.vector: none leaves them out (rule all asks for PAPER_FIGURES).
if PAPER_FIGURES:

    rule paper_figures:
        """Every figure family as figures/paper/<name>.pdf (or .svg), for a paper:
        one column wide (both when panels sit side by side), fonts in print points.
        """
        input:
            tables=expand(f"{RESULTS}/tables/{{name}}.csv", name=PUBLISHED_TABLES),
            runs=f"{RESULTS}/tables/runs.csv",
            epochs=f"{RESULTS}/tables/epochs.csv",
            matmul=f"{RESULTS}/tables/matmul.csv",
            code=package_code("analysis/figures", "analysis/tables.py"),
        output:
            PAPER_FIGURES,
        log:
            f"{RESULTS}/logs/paper_figures.log",
        conda:
            "../envs/trainbench.yaml"
        threads: len(FIGURE_NAMES)
        params:
            paper=config["report"]["figures"],
        script:
            "../scripts/figures.py"
