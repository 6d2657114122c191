"""Names of what the workflow publishes, importable without pandas or matplotlib
(the Snakefile reads them while it parses; the statistics layer and the figures
own what each one holds)."""

# Every published statistic: results/tables/<name>.csv (and .md), computed once by
# trainbench.analysis.stats.publish. Figures and reports read only these (and the record tables).
PUBLISHED_TABLES = (
    "speedup",
    "eval_speed",
    "energy",
    "stability",
    "repeats",
    "per_label",
    "task",
    "parity",
    "memory",
    "crossover",
    "collapse",
    "epoch_summary",
    "matmul_summary",
    "verification",
    "verdicts",
    "warnings",
    "overview",
    "attention",
    "cell_time",
    "step_breakdown",
    "time_to_target",
    "best_setting",
    "across_batch_sizes",
    "quality_curve",
    "comparison",
)

# The record tables the aggregate rule writes from metrics.json files.
RECORD_TABLES = (
    "runs",
    "epochs",
    "per_label_runs",
    "quality",
    "matmul",
    "environments",
    "skipped",
    "setups",
)

# results/figures/<name>.png, drawn by trainbench.analysis.figures from the tables above.
FIGURE_NAMES = (
    "throughput", "speedup", "epoch_time", "loss", "per_label", "matmul", "memory", "energy",
    "step_breakdown", "quality", "time_to_target", "across_batch", "comparison",
)  # fmt: skip
