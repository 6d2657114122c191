"""Facts about the machine a benchmark ran on, kept in its results file."""

from __future__ import annotations

import os
import platform
import socket

import torch
from trainbench.launch.environment import package_versions
from trainbench.measure.cpu_features import isa_facts
from trainbench.measure.devices import cpu_model_name


def machine_facts(backend: str) -> dict:
    """Host, CPU, cores, torch threads, Python and package versions; the GPU on CUDA."""
    facts = {
        "host": socket.gethostname(),
        "cpu_model": cpu_model_name(),
        "logical_cores": os.cpu_count(),
        "cpu_isa": isa_facts(),
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "packages": package_versions(),
    }
    if backend == "cuda" and torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        facts.update(
            {
                "gpu": props.name,
                "gpu_memory_gib": round(props.total_memory / 2**30, 1),
                "cuda": torch.version.cuda,
                "cudnn": torch.backends.cudnn.version(),
            }
        )
    try:
        import transformers

        facts["transformers"] = transformers.__version__
    except ImportError:
        pass
    return facts


def pin_process(cores: int | None) -> dict:
    """pyperf's ``--affinity``: keep this process (and torch's CPU threads) on the last
    ``cores`` logical CPUs it may use, so the host-bound part of a step does not migrate
    between cores between blocks. Linux only (os.sched_setaffinity, feature-detected);
    elsewhere, or with ``cores`` None, nothing changes. What is in force afterwards."""
    can_pin = hasattr(os, "sched_setaffinity") and hasattr(os, "sched_getaffinity")
    facts: dict = {"requested_cores": cores, "pinned": False}
    if cores and can_pin:
        allowed = sorted(os.sched_getaffinity(0))
        chosen = allowed[-int(cores) :]
        os.sched_setaffinity(0, chosen)
        torch.set_num_threads(len(chosen))
        facts.update(pinned=True, cpus=chosen)
    elif cores:
        facts["reason"] = "os.sched_setaffinity is not available on this platform"
    facts["torch_threads"] = torch.get_num_threads()
    return facts
