# The published tables and every figure family, from the record tables, in one job:
# one process imports pandas, scipy, matplotlib and seaborn once (~2 s a process on
# a 2-core machine) instead of once per table set and per figure. Changing a table
# or a figure never retrains.


rule analysis:
    """Speedup and eval speed with bootstrap CIs, stability, per-label, parity, memory,
    crossover and collapse tables (CSV for tools, Markdown for people), then the
    figures: throughput, speedup, epoch times, loss, per-label F1, matmul, memory."""
    input:
        runs="results/tables/runs.csv",
        epochs="results/tables/epochs.csv",
        per_label_runs="results/tables/per_label_runs.csv",
        matmul="results/tables/matmul.csv",
    output:
        tables=expand(
            "results/tables/{name}.{ext}", name=ANALYSIS_TABLES, ext=("csv", "md")
        ),
        throughput=report(
            "results/figures/throughput.png",
            caption="captions/throughput.rst",
            category="Throughput",
        ),
        speedup=report(
            "results/figures/speedup.png",
            caption="captions/speedup.rst",
            category="Speedup",
        ),
        epoch_time=report(
            "results/figures/epoch_time.png",
            caption="captions/epoch_time.rst",
            category="Stability",
        ),
        loss=report(
            "results/figures/loss.png",
            caption="captions/loss.rst",
            category="Accuracy parity",
        ),
        per_label=report(
            "results/figures/per_label.png",
            caption="captions/per_label.rst",
            category="Accuracy parity",
        ),
        matmul=report(
            "results/figures/matmul.png",
            caption="captions/matmul.rst",
            category="Crossover",
        ),
        memory=report(
            "results/figures/memory.png",
            caption="captions/memory.rst",
            category="Memory",
        ),
    log:
        "results/logs/analysis.log",
    conda:
        "../envs/trainbench.yaml"
    params:
        baseline=config["report"]["baseline_device"],
    script:
        "../scripts/analysis.py"
