import json
import os
from pathlib import Path

from snakemake.exceptions import WorkflowError

# rules/setup.smk put this checkout's scripts/ first on the path.
from trainbench import config as tbconfig  # noqa: E402
from trainbench.config.files import refusal_text, workflow_layers  # noqa: E402
from trainbench.analysis.published import FIGURE_NAMES, PUBLISHED_TABLES  # noqa: E402
from trainbench.workloads import info as registry_info  # noqa: E402
from trainbench.launch.scheduler_passes import coalesce_reevaluations  # noqa: E402

# One pending scheduler timer, not one more per finished job: Snakemake's extra passes
# grew round by round beside the timed cells (trainbench.launch.scheduler_passes).
coalesce_reevaluations()

# Every config file and --config, each already checked by rules/setup.smk.
_CONFIG_LAYERS = workflow_layers(workflow.configfiles, workflow.config_settings.config)
# Which repeats each workload gets: the last file that sets them decides (config.py).
tbconfig.settle_inherited_keys(
    config, [(layer.name, layer.data) for layer in _CONFIG_LAYERS]
)
try:
    tbconfig.validate_config(config)
except tbconfig.ConfigError as error:
    raise WorkflowError(refusal_text(str(error), _CONFIG_LAYERS)) from None


# Paths inside the workflow's own tree (not the working directory).
PACKAGE = Path(workflow.basedir) / "scripts" / "trainbench"
TEMPLATES = PACKAGE / "analysis" / "templates"


def workflow_path(path):
    """A file of the workflow's own tree as an input path: relative to the working
    directory when inside it, so a results folder copied with its workflow (or a
    moved clone) keeps its provenance and does not rerun."""
    path = Path(path)
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def package_code(*parts):
    """The package's source files a rule runs (modules and whole subpackages), as
    inputs: editing figure code rebuilds the figures and reports, never a table or a
    cell (Snakemake's own code trigger sees only the rule's entry script)."""
    files = []
    for part in parts:
        path = PACKAGE / part
        found = sorted(path.glob("*.py")) if path.is_dir() else [path]
        files += [workflow_path(f) for f in found]
    return files


def workload_info(workload):
    """A bundled workload's registry entry, or your own's (its config names `entry`)."""
    return registry_info(workload, config["workloads"][workload])


# Each config's results in a folder of its own: results/<run_name>/ (results/ if none).
RUN_NAME = config.get("run_name") or ""
RESULTS = f"results/{RUN_NAME}" if RUN_NAME else "results"
# The config files this run was read from: config.yaml, then each --configfile over it.
CONFIG_FILES = ["config.yaml"] + [
    workflow_path(p) for p in workflow.configfiles if workflow_path(p) != "config.yaml"
]

# aggregate.records_only: tables, figures and reports from the records already here.
RECORDS_ONLY = bool(config["aggregate"]["records_only"])
# report.figures.vector: every figure family again at a paper size, as PDF or SVG
# (rule paper_figures), or none.
PAPER_FORMAT = config["report"]["figures"]["vector"]
PAPER_FIGURES = (
    []
    if PAPER_FORMAT == "none"
    else [f"{RESULTS}/figures/paper/{name}.{PAPER_FORMAT}" for name in FIGURE_NAMES]
)
CELLS = tbconfig.expand_matrix(config)  # every cell's first `repeats.min` repeats
WORKLOADS = tbconfig.enabled_workloads(config)
# Training workloads get a verification report of their own (seed-000 form).
REPORTED_WORKLOADS = [w for w in WORKLOADS if workload_info(w).kind == "training"]
DEVICE_IDS = list(tbconfig.iter_device_ids(config))
REPEATS = {w: tbconfig.repeat_settings(config, w) for w in WORKLOADS}
# Each training workload's quality target (read by the statistics alone: no cell reruns).
TARGETS = {w: config["workloads"][w].get("target") for w in REPORTED_WORKLOADS}
# Each workload's devices in the config's order: the first is the default baseline.
DEVICE_ORDER = {w: tbconfig.workload_devices(config, w) for w in WORKLOADS}
# Cells run in rounds: repeat k of every device before repeat k + 1 of any, so slow
# drift of the machine spreads evenly over devices, and within a round a workload's
# devices one after another (tbconfig.RunOrder; higher priority runs first).
RUN_ORDER = tbconfig.run_order(config)
TOP_PRIORITY = RUN_ORDER.top


wildcard_constraints:
    workload="|".join(WORKLOADS) or "NO_WORKLOAD",
    device="|".join(DEVICE_IDS),
    batch_size=r"\d+",
    rep=r"\d+",


def record_path(cell):
    return f"{RESULTS}/runs/{cell.relpath}/metrics.json"


def planned_cells(workload, below=None):
    """The workload's cells with repeat < ``below`` (default: every repeat it gets):
    the first `repeats.min` of every cell, then each adaptive round's plan. Asking
    for a round's plan makes Snakemake run the checkpoint `plan_round` first."""
    if RECORDS_ONLY:
        return [
            c for c in recorded_cells(workload) if below is None or c.rep < int(below)
        ]
    settings = REPEATS[workload]
    stop = settings["max"] if below is None else int(below)
    cells = [c for c in CELLS if c.workload == workload and c.rep < stop]
    for rep in range(settings["min"], stop):
        plan = Path(checkpoints.plan_round.get(workload=workload, rep=rep).output[0])
        planned = json.loads(plan.read_text())["cells"]
        if not planned:
            break
        cells += [tbconfig.Cell(workload, d, int(bs), rep) for d, bs in planned]
    return cells


def recorded_cells(workload):
    """The workload's cells that have a record in this results folder (records_only)."""
    cells = []
    for path in sorted(Path(RESULTS, "runs", workload).glob("*/bs*/rep*/metrics.json")):
        device, bs, rep = path.parts[-4], path.parts[-3], path.parts[-2]
        cells.append(tbconfig.Cell(workload, device, int(bs[2:]), int(rep[3:])))
    return cells


def run_records(workload=None):
    """metrics.json of every cell of the matrix (or of one workload), adaptive
    rounds included."""
    return [
        record_path(cell)
        for w in WORKLOADS
        if workload is None or w == workload
        for cell in planned_cells(w)
    ]


def all_records(wildcards):
    """Input function of `aggregate`: every record, asking the round checkpoints."""
    return run_records()


def known_records():
    """Every record this config's matrix asks for that is known without running a
    checkpoint: the first `repeats.min` of every cell and the cells of every round
    plan already written."""
    paths = [record_path(c) for c in CELLS]
    for workload in WORKLOADS:
        for rep in range(REPEATS[workload]["min"], REPEATS[workload]["max"]):
            plan = Path(f"{RESULTS}/rounds/{workload}/rep{rep}.json")
            if not plan.exists():
                break
            for device, bs in json.loads(plan.read_text())["cells"]:
                paths.append(record_path(tbconfig.Cell(workload, device, int(bs), rep)))
    return paths


def mark_tables_stale_when_records_are_missing():
    """A record of the matrix is missing (deleted, or its forced rerun was killed):
    the record tables no longer describe the records, so they must be rebuilt, and
    the missing record with them. Snakemake itself never rebuilds a missing
    intermediate file whose consumers are up to date, so the tables are marked
    stale (their mtime set to the epoch): the next run rebuilds the missing records,
    then the tables, figures and reports, and never counts a record that is not there.
    """
    runs_csv = Path(f"{RESULTS}/tables/runs.csv")
    if RECORDS_ONLY:
        return
    if runs_csv.exists() and any(not Path(p).exists() for p in known_records()):
        os.utime(runs_csv, (0, 0))


mark_tables_stale_when_records_are_missing()


def round_inputs(wildcards):
    """What a round's plan is decided from: every record of the workload so far."""
    return [record_path(c) for c in planned_cells(wildcards.workload, wildcards.rep)]


def data_dir(workload):
    return f"{RESULTS}/data/{workload}"


def data_input(wildcards):
    """A workload that prepares data depends on its shared data artifact."""
    if workload_info(wildcards.workload).prepares_data:
        return f"{data_dir(wildcards.workload)}/meta.json"
    return []


def data_settings(wildcards):
    """Only the workload keys that shape its data set (a new batch size or repeat
    count must not rebuild the data and so rerun every finished cell)."""
    settings = config["workloads"][wildcards.workload]
    keys = workload_info(wildcards.workload).data_keys
    return {k: settings[k] for k in keys if k in settings}


def _cell(wildcards):
    cell = tbconfig.Cell(
        wildcards.workload,
        wildcards.device,
        int(wildcards.batch_size),
        int(wildcards.rep),
    )
    first = tbconfig.Cell(cell.workload, cell.device, cell.batch_size, 0)
    if first not in CELLS or cell.rep >= REPEATS[cell.workload]["max"]:
        raise WorkflowError(
            f"{cell.relpath} is not a cell of this config's matrix; "
            "check workloads.<name>.batch_sizes, devices and repeats"
        )
    return cell


def run_spec(wildcards):
    cell = _cell(wildcards)
    path = (
        data_dir(cell.workload) if workload_info(cell.workload).prepares_data else None
    )
    return tbconfig.cell_spec(config, cell, data_path=path, include_launcher=False)


def cell_priority(wildcards):
    return RUN_ORDER.priority(wildcards.workload, wildcards.batch_size, wildcards.rep)


def on_cluster():
    """Whether jobs run through a cluster executor (Snakemake's Slurm plugin): true
    in the main Snakemake, which submits them, and in each job's own Snakemake
    (slurm-jobstep). Known only once the workflow executes (not while the Snakefile
    is read, and never in a dry run), so resource functions ask when evaluated."""
    return not workflow.local_exec


def _backend(wildcards):
    return tbconfig.find_variant(config, wildcards.device).backend


def _exclusive():
    return bool(config["launcher"]["exclusive_timing"])


def _machine_cores():
    """--cores (in a cluster job: the node's cores), or None where none was given
    (the main Snakemake of a cluster run needs no --cores)."""
    try:
        return workflow.cores
    except WorkflowError:
        return None


def gpu_slots(wildcards):
    """GPUs a cell asks for. Locally every accelerator cell takes the one `gpu`
    slot (the default profile caps it at 1). On a cluster the Slurm executor turns
    `gpu` into `--gpus=1`, which only CUDA cells ask for (no Slurm node has MPS)."""
    backend = _backend(wildcards)
    if backend == "cpu":
        return 0
    if on_cluster():
        return 1 if backend == "cuda" else 0
    return 1


def cell_threads(wildcards):
    """Cores a cell occupies: its configured CPU thread count, else the whole
    machine (PyTorch's default uses every core; accelerator cells feed the GPU
    from one core). The launcher, not Snakemake, sets the child's thread count."""
    variant = tbconfig.find_variant(config, wildcards.device)
    if variant.backend != "cpu":
        return 1
    if not _exclusive():
        return variant.threads or 1
    return variant.threads or _machine_cores() or 1


def timed_slots(wildcards):
    """Every cell takes the one `timed_slot` (capped at 1 by the default profile),
    unless launcher.exclusive_timing is false. Not on a cluster: there Slurm keeps
    timed cells apart (cluster_sbatch_flags), and a local cap would run the whole
    cluster's cells one at a time."""
    return 1 if _exclusive() and not on_cluster() else 0


def cluster_cpus(wildcards, threads):
    """A cell's `cpus_per_task` (the Slurm executor's --cpus-per-task, for the job
    and for its job step; ignored by local runs). With launcher.exclusive_timing a
    cell that would use every core (a CPU cell without a thread count, an
    accelerator cell with its DataLoader workers) asks for none (-1): its node is
    its own (--exclusive) and a job step without --cpus-per-task may use all of
    it. Otherwise the cores it uses: its threads, or for an accelerator cell one
    core plus one per DataLoader worker."""
    variant = tbconfig.find_variant(config, wildcards.device)
    if variant.backend == "cpu":
        if variant.threads:
            return variant.threads
        return -1 if _exclusive() and on_cluster() else threads
    if _exclusive() and on_cluster():
        return -1
    workers = config["device_settings"][variant.backend].get("num_workers") or 0
    return 1 + int(workers)


def cluster_sbatch_flags(wildcards):
    """`slurm_extra` of a cell's Slurm job: with launcher.exclusive_timing (the
    default) `--exclusive`, a node to itself, so no other job shares its cores,
    memory bandwidth or GPUs while it is timed."""
    return "--exclusive" if _exclusive() else ""


def cluster_runtime(wildcards):
    """Slurm time limit (minutes) of a cell: every attempt's timeout plus 10 minutes
    for start-up and the record, so the launcher's own timeout, which writes a
    `failed` record, always comes before Slurm's kill, which writes none."""
    launcher = tbconfig.launcher_settings(config, wildcards.workload)
    seconds = float(launcher["timeout_s"]) * int(launcher["max_attempts"])
    return int(-(-seconds // 60)) + 10


def included_records():
    """Records of other machines' results folders (aggregate.include_results). A folder
    listed twice, or this run's own, lists its files again: rule aggregate counts each
    record once (trainbench.analysis.record_identity)."""
    found = []
    for folder in config["aggregate"]["include_results"]:
        found += sorted(
            str(p) for p in Path(folder).glob("runs/*/*/bs*/rep*/metrics.json")
        )
    return found


def included_references():
    """The float64 references of the included results folders, so parity's loss-drift
    check of a merge or a redraw has the yardstick the folder's own report had. Listed
    before this run's own (reference_paths): where both hold one for a workload, batch
    size and run seed, parity reads this run's (the last read wins)."""
    found = []
    for folder in config["aggregate"]["include_results"]:
        found += sorted(
            str(p) for p in Path(folder).glob("references/*/bs*/rep*/reference.json")
        )
    return found


def aggregated_references(wildcards=None):
    """Every reference aggregation reads (the included folders', then this run's)."""
    return included_references() + reference_paths(wildcards)


# -- float64 references (parity's yardstick; trainbench.launch.reference) ------------------


def baseline_device(workload):
    """The workload's baseline column (trainbench.config.baseline_device)."""
    return tbconfig.baseline_device(config, workload)


def reference_path(workload, batch_size, rep):
    return f"{RESULTS}/references/{workload}/bs{batch_size}/rep{rep}/reference.json"


def reference_paths(wildcards=None):
    """Every repeat's reference: training workloads with more than one device, each
    planned repeat of the baseline (adaptive rounds included)."""
    if not config["report"]["parity_reference"]["enabled"]:
        return []
    paths = []
    for workload in REPORTED_WORKLOADS:
        if len(DEVICE_ORDER[workload]) < 2:
            continue
        base = baseline_device(workload)
        for cell in planned_cells(workload):
            if cell.device == base:
                paths.append(reference_path(workload, cell.batch_size, cell.rep))
    if RECORDS_ONLY:  # the references that were made (a skipped one has a record too)
        return [p for p in paths if Path(p).exists()]
    return paths


def _repeat_cells(wildcards):
    bs, rep = int(wildcards.batch_size), int(wildcards.rep)
    return [
        c
        for c in planned_cells(wildcards.workload, rep + 1)
        if c.batch_size == bs and c.rep == rep
    ]


def reference_inputs(wildcards):
    """The records the reference is decided from: the baseline's and every other
    device's of the same workload, batch size and repeat."""
    base = baseline_device(wildcards.workload)
    cells = _repeat_cells(wildcards)
    return {
        "baseline": record_path(
            tbconfig.Cell(
                wildcards.workload, base, int(wildcards.batch_size), int(wildcards.rep)
            )
        ),
        "others": [record_path(c) for c in cells if c.device != base],
    }


def reference_run_spec(wildcards):
    from trainbench.launch.reference import reference_spec

    cell = tbconfig.Cell(
        wildcards.workload,
        baseline_device(wildcards.workload),
        int(wildcards.batch_size),
        int(wildcards.rep),
    )
    path = (
        data_dir(cell.workload) if workload_info(cell.workload).prepares_data else None
    )
    steps = config["report"]["parity_reference"]["steps"]
    return reference_spec(config, cell, steps, data_path=path)


def reference_threads(wildcards):
    """A reference runs on the CPU with PyTorch's default threads: the whole machine."""
    return _machine_cores() or 1
