"""Facts about the machine and software a run used, recorded with every record."""

from __future__ import annotations

import os
import platform
import socket
import subprocess
import sys
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from trainbench.measure.cpu_features import cpu_model_name
from trainbench.measure.macos_host import core_levels, power_facts, thermal_facts

TRACKED_PACKAGES = (
    "torch",
    "numpy",
    "transformers",
    "tokenizers",
    "faiss-cpu",
    "scikit-learn",
    "scipy",
    "pandas",
    "ruptures",  # the steady-state detection's change points
    "psutil",  # other processes' CPU time (disturbed)
    "snakemake",
    "nvidia-ml-py",  # the energy tracker's NVML reader
    "zeus-apple-silicon",  # its IOReport reader on Apple Silicon (extra `apple`)
)
# Variables that change how torch behaves; recorded whenever they are set.
BEHAVIOUR_VARIABLES = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "KMP_DUPLICATE_LIB_OK",
    "PYTORCH_ENABLE_MPS_FALLBACK",
    "PYTORCH_MPS_HIGH_WATERMARK_RATIO",
    "CUDA_VISIBLE_DEVICES",
    "CUBLAS_WORKSPACE_CONFIG",
    "ONEDNN_MAX_CPU_ISA",  # lowers the instructions oneDNN may use (bf16 LSTM needs more)
    "ATEN_CPU_CAPABILITY",  # lowers torch's own CPU kernel dispatch
    "VECLIB_MAXIMUM_THREADS",  # caps Apple Accelerate's threads (torch's BLAS on macOS)
)


def package_versions() -> dict:
    versions = {}
    for name in TRACKED_PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return versions


PROJECT_ROOT = Path(__file__).resolve().parents[3]
COMMIT_VARIABLE = "TRAINBENCH_COMMIT"


def _git(repo: Path, *args: str) -> str | None:
    try:
        out = subprocess.run(
            ["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=5
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def git_commit(repo: str | os.PathLike | None = None) -> str:
    """$TRAINBENCH_COMMIT when set: the commit a copy of the tree was made from, where
    the copy's own git (if any) does not describe it (a tree carried to a GPU machine
    beside a stale ``.git`` read as "<old commit>-dirty"). Else the commit of the
    project's own repository (``-dirty`` when tracked files changed), never an
    enclosing repository's: a copy of the tree inside another checkout is not that
    checkout's commit. Else "unknown"."""
    declared = os.environ.get(COMMIT_VARIABLE)
    if declared:
        return declared
    repo = Path(repo or PROJECT_ROOT).resolve()
    top = _git(repo, "rev-parse", "--show-toplevel")
    if top is not None and Path(top).resolve() == repo:
        head = _git(repo, "rev-parse", "HEAD")
        if head:
            dirty = _git(repo, "status", "--porcelain", "--untracked-files=no")
            return head + ("-dirty" if dirty else "")
    return "unknown"


def gpu_models() -> list[str] | None:
    """Names of the NVIDIA GPUs this process can see, from ``nvidia-smi`` (no torch,
    so it is known even when a cell dies before touching the GPU); None where
    nvidia-smi is absent or fails (no NVIDIA driver: unknown, not "no GPU")."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=15,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    return [line.strip() for line in out.stdout.splitlines() if line.strip()]


def host_facts() -> dict:
    """Facts that need no torch (the launcher records them even when a child dies).

    On a Slurm cluster they name the node (host, slurm_node), its hardware
    (cpu_model, logical_cores, gpu_models) and the job that ran the cell, so
    records of different node types are never averaged together. On a Mac, also its
    performance and efficiency cores, Low Power Mode and thermal state; everywhere, the
    power source (trainbench.measure.macos_host), read when the record is written."""
    return {
        "host": socket.gethostname(),
        "os": platform.platform(),
        "machine": platform.machine(),
        "python": sys.version.split()[0],
        "cpu_model": cpu_model_name(),
        "logical_cores": os.cpu_count(),
        "cpu_core_levels": core_levels(),
        "power": power_facts(),
        "thermal": thermal_facts(),
        "cpu_precision_flags": cpu_precision_flags(),
        "gpu_models": gpu_models(),
        "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
        "slurm_node": os.environ.get("SLURMD_NODENAME"),
        "slurm_partition": os.environ.get("SLURM_JOB_PARTITION"),
        "slurm_cluster": os.environ.get("SLURM_CLUSTER_NAME"),
        "behaviour_variables": {k: os.environ[k] for k in BEHAVIOUR_VARIABLES if k in os.environ},
    }


def cpu_precision_flags() -> list[str]:
    """The CPU's flags that decide low-precision kernels (avx2, avx512_bf16, amx_bf16,
    ARM bf16 ...; trainbench.measure.cpu_features.PRECISION_FLAGS), sorted; empty when the
    platform exposes none (no /proc/cpuinfo, no sysctl)."""
    from trainbench.measure.cpu_features import PRECISION_FLAGS, cpu_flags

    return sorted(f for f in cpu_flags()[0] if f in PRECISION_FLAGS)


# -- the child's environment -----------------------------------------------------------

SCRIPTS_DIR = Path(__file__).resolve().parents[2]  # scripts/, holding trainbench


# Thread-count variables a parent may leave behind. Snakemake sets them to the
# job's `threads` (1 under --cores 1), which would silently make every CPU cell
# single-threaded. A cell's thread count comes from its config alone.
INHERITED_THREAD_VARIABLES = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "NUMEXPR_NUM_THREADS",
    "GOTO_NUM_THREADS",
)


# On macOS, what caps a thread count besides torch.set_num_threads (CpuDevice.apply_settings),
# read by its library when it loads, so set before the child imports torch. torch's matrix
# multiplies go to Apple's Accelerate (vecLib), whose threads only VECLIB_MAXIMUM_THREADS
# caps (no call does: threadpoolctl#136, flexiblas#32). OMP_NUM_THREADS is every OpenMP
# runtime's starting count in every thread: torch.set_num_threads reaches torch's own
# parallel loops (each thread's first at::parallel_for applies it, pytorch#37461), not an
# OpenMP region outside them nor another library's copy of libomp (scikit-learn's wheel
# bundles one). On Linux torch.set_num_threads alone caps torch's OpenMP and BLAS, and
# nothing is set.
MACOS_THREAD_VARIABLES = ("VECLIB_MAXIMUM_THREADS", "OMP_NUM_THREADS")


def cell_threads(spec: dict) -> int | None:
    """The cell's CPU thread count (cpu-t2: 2); None: torch's default (not a CPU cell,
    or no count configured)."""
    threads = spec["device_settings"].get("threads") if spec["backend"] == "cpu" else None
    return int(threads) if threads else None


def thread_variables(spec: dict) -> dict[str, str]:
    """The variables that carry the cell's thread count to the libraries torch cannot
    reach (:data:`MACOS_THREAD_VARIABLES`, macOS only); empty without a thread count."""
    threads = cell_threads(spec)
    if threads is None or sys.platform != "darwin":
        return {}
    return dict.fromkeys(MACOS_THREAD_VARIABLES, str(threads))


def child_environment(spec: dict) -> tuple[dict, dict]:
    """The child's environment: ours without inherited thread limits, plus the
    variables that carry the cell's thread count (:func:`thread_variables`), plus the
    variables the config asks for (which win). Returns (full environment, the
    config's overrides alone, for the record)."""
    backend = spec["backend"]
    settings = spec["device_settings"]
    overrides = {str(k): str(v) for k, v in (settings.get("env") or {}).items()}
    if backend == "mps":
        if settings.get("enable_cpu_fallback"):
            overrides["PYTORCH_ENABLE_MPS_FALLBACK"] = "1"
        if settings.get("high_watermark_ratio") is not None:
            overrides["PYTORCH_MPS_HIGH_WATERMARK_RATIO"] = str(settings["high_watermark_ratio"])
        if settings.get("low_watermark_ratio") is not None:
            overrides["PYTORCH_MPS_LOW_WATERMARK_RATIO"] = str(settings["low_watermark_ratio"])
    env = {k: v for k, v in os.environ.items() if k not in INHERITED_THREAD_VARIABLES}
    env.update(thread_variables(spec))
    env.update(overrides)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SCRIPTS_DIR), env.get("PYTHONPATH")]))
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONFAULTHANDLER"] = "1"
    return env, overrides


@dataclass(frozen=True)
class CellEnvironment:
    """A cell's child environment, computed once per cell (:func:`cell_environment`) and
    handed on: every attempt's child starts with ``variables``, the availability memo is
    keyed on ``overrides``, and the record holds both and ``thread_caps``."""

    variables: dict[str, str]  # the child's whole environment
    overrides: dict[str, str]  # what the config set (the record's env_overrides)
    thread_caps: dict  # what held the cell's thread count (the record's thread_caps)


def thread_caps(spec: dict, variables: dict[str, str], overrides: dict[str, str]) -> dict:
    """What held the cell's thread count, for the record: ``threads`` (None: torch's
    default), the variables the launcher set for it (``set_by_launcher``; a variable the
    config's env sets is the config's, in env_overrides), and on macOS ``accelerate``:
    the VECLIB_MAXIMUM_THREADS the child started with, or that Accelerate ran at its
    default (None elsewhere: Accelerate is macOS's)."""
    veclib = variables.get("VECLIB_MAXIMUM_THREADS")
    if sys.platform != "darwin":
        accelerate = None
    elif veclib:
        accelerate = f"capped at {veclib} threads by VECLIB_MAXIMUM_THREADS"
    else:
        accelerate = "its default thread count: VECLIB_MAXIMUM_THREADS unset"
    return {
        "threads": cell_threads(spec),
        "set_by_launcher": {k: v for k, v in thread_variables(spec).items() if k not in overrides},
        "accelerate": accelerate,
    }


def cell_environment(spec: dict) -> CellEnvironment:
    """:func:`child_environment` of the cell ``spec``, for the launcher to hand on."""
    variables, overrides = child_environment(spec)
    return CellEnvironment(variables, overrides, thread_caps(spec, variables, overrides))
