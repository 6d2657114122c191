"""Facts about the machine a benchmark ran on, kept in its results file."""

from __future__ import annotations

import os
import platform
import socket

import torch

from ..cpu_features import isa_facts
from ..devices import cpu_model_name
from ..environment import package_versions


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
