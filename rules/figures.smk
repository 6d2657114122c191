# One rule per figure family, each reading only the tables it needs: changing a
# figure never retrains, and new records re-render only what depends on them.


rule figure_throughput:
    input:
        runs="results/tables/runs.csv",
    output:
        report(
            "results/figures/throughput.png",
            caption="captions/throughput.rst",
            category="Throughput",
        ),
    log:
        "results/logs/figures/throughput.log",
    conda:
        "../envs/trainbench.yaml"
    params:
        name="throughput",
        baseline=config["report"]["baseline_device"],
    script:
        "../scripts/figure.py"


rule figure_speedup:
    input:
        runs="results/tables/runs.csv",
    output:
        report(
            "results/figures/speedup.png",
            caption="captions/speedup.rst",
            category="Speedup",
        ),
    log:
        "results/logs/figures/speedup.log",
    conda:
        "../envs/trainbench.yaml"
    params:
        name="speedup",
        baseline=config["report"]["baseline_device"],
    script:
        "../scripts/figure.py"


rule figure_epoch_time:
    input:
        epochs="results/tables/epochs.csv",
        runs="results/tables/runs.csv",
    output:
        report(
            "results/figures/epoch_time.png",
            caption="captions/epoch_time.rst",
            category="Stability",
        ),
    log:
        "results/logs/figures/epoch_time.log",
    conda:
        "../envs/trainbench.yaml"
    params:
        name="epoch_time",
        baseline=config["report"]["baseline_device"],
    script:
        "../scripts/figure.py"


rule figure_loss:
    input:
        epochs="results/tables/epochs.csv",
        runs="results/tables/runs.csv",
    output:
        report(
            "results/figures/loss.png",
            caption="captions/loss.rst",
            category="Accuracy parity",
        ),
    log:
        "results/logs/figures/loss.log",
    conda:
        "../envs/trainbench.yaml"
    params:
        name="loss",
        baseline=config["report"]["baseline_device"],
    script:
        "../scripts/figure.py"


rule figure_per_label:
    input:
        per_label_runs="results/tables/per_label_runs.csv",
        runs="results/tables/runs.csv",
    output:
        report(
            "results/figures/per_label.png",
            caption="captions/per_label.rst",
            category="Accuracy parity",
        ),
    log:
        "results/logs/figures/per_label.log",
    conda:
        "../envs/trainbench.yaml"
    params:
        name="per_label",
        baseline=config["report"]["baseline_device"],
    script:
        "../scripts/figure.py"


rule figure_matmul:
    input:
        matmul="results/tables/matmul.csv",
    output:
        report(
            "results/figures/matmul.png",
            caption="captions/matmul.rst",
            category="Crossover",
        ),
    log:
        "results/logs/figures/matmul.log",
    conda:
        "../envs/trainbench.yaml"
    params:
        name="matmul",
        baseline=config["report"]["baseline_device"],
    script:
        "../scripts/figure.py"


rule figure_memory:
    input:
        runs="results/tables/runs.csv",
    output:
        report(
            "results/figures/memory.png",
            caption="captions/memory.rst",
            category="Memory",
        ),
    log:
        "results/logs/figures/memory.log",
    conda:
        "../envs/trainbench.yaml"
    params:
        name="memory",
        baseline=config["report"]["baseline_device"],
    script:
        "../scripts/figure.py"
