# Every figure family in one job: one process imports matplotlib, seaborn and scipy
# once (~2 s a process on a 2-core machine) instead of once per figure. Figures
# read the tables only: changing a figure never retrains.


rule figures:
    input:
        runs="results/tables/runs.csv",
        epochs="results/tables/epochs.csv",
        per_label_runs="results/tables/per_label_runs.csv",
        matmul="results/tables/matmul.csv",
    output:
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
        "results/logs/figures.log",
    conda:
        "../envs/trainbench.yaml"
    params:
        baseline=config["report"]["baseline_device"],
    script:
        "../scripts/figure.py"
