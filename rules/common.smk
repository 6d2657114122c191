import sys
from pathlib import Path

from snakemake.exceptions import WorkflowError

# The package lives in scripts/trainbench; the workflow imports it from there so
# it runs from a plain clone as well as from an installed environment.
sys.path.insert(0, str(Path(workflow.basedir) / "scripts"))

from trainbench import config as tbconfig  # noqa: E402
from trainbench.analysis import ANALYSIS_TABLES  # noqa: E402
from trainbench.workloads import info as workload_info  # noqa: E402

try:
    tbconfig.validate_config(config)
except tbconfig.ConfigError as error:
    raise WorkflowError(str(error)) from None


FIGURE_NAMES = [
    "throughput",
    "speedup",
    "epoch_time",
    "loss",
    "per_label",
    "matmul",
    "memory",
]

# Paths inside the workflow's own tree (not the working directory).
TEMPLATES = Path(workflow.basedir) / "scripts" / "trainbench" / "templates"

CELLS = tbconfig.expand_matrix(config)
WORKLOADS = tbconfig.enabled_workloads(config)
# Training workloads get a verification report of their own (seed-000 form).
REPORTED_WORKLOADS = [w for w in WORKLOADS if workload_info(w).kind == "training"]
DEVICE_IDS = list(tbconfig.iter_device_ids(config))


wildcard_constraints:
    workload="|".join(WORKLOADS) or "NO_WORKLOAD",
    device="|".join(DEVICE_IDS),
    batch_size=r"\d+",
    rep=r"\d+",


def run_records(workload=None):
    """metrics.json of every cell of the matrix (or of one workload)."""
    return [
        f"results/runs/{cell.relpath}/metrics.json"
        for cell in CELLS
        if workload is None or cell.workload == workload
    ]


def data_dir(workload):
    return f"results/data/{workload}"


def data_input(wildcards):
    """A workload that prepares data depends on its shared data artifact."""
    if workload_info(wildcards.workload).prepares_data:
        return f"{data_dir(wildcards.workload)}/meta.json"
    return []


def run_spec(wildcards):
    cell = tbconfig.Cell(
        wildcards.workload,
        wildcards.device,
        int(wildcards.batch_size),
        int(wildcards.rep),
    )
    if cell not in CELLS:
        raise WorkflowError(
            f"{cell.relpath} is not a cell of this config's matrix; "
            "check workloads.<name>.batch_sizes, devices and repeats"
        )
    path = (
        data_dir(cell.workload) if workload_info(cell.workload).prepares_data else None
    )
    return tbconfig.cell_spec(config, cell, data_path=path, include_launcher=False)


def gpu_slots(wildcards):
    """Accelerator cells take the one `gpu` slot (the profile caps it at 1)."""
    return 0 if wildcards.device.startswith("cpu") else 1


def cell_threads(wildcards):
    """Cores a cell occupies: its configured CPU thread count, else the whole
    machine (PyTorch's default uses every core; accelerator cells feed the GPU
    from one core). The launcher, not Snakemake, sets the child's thread count."""
    variant = tbconfig.find_variant(config, wildcards.device)
    if variant.backend != "cpu":
        return 1
    if not config["launcher"]["exclusive_timing"]:
        return variant.threads or 1
    return variant.threads or workflow.cores


def timed_slots(wildcards):
    """Every cell takes the one `timed_slot` (capped at 1 by the default profile),
    unless launcher.exclusive_timing is false."""
    return 1 if config["launcher"]["exclusive_timing"] else 0


def included_records():
    """Records of other machines' results folders (aggregate.include_results)."""
    found = []
    for folder in config["aggregate"]["include_results"]:
        found += sorted(
            str(p) for p in Path(folder).glob("runs/*/*/bs*/rep*/metrics.json")
        )
    return found
