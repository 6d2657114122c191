"""One small class per backend: availability, sync, memory, AMP policy, loader defaults.

The interface and what backends share are in :mod:`.device_base`, the MPS device in
:mod:`.mps_device`; the CPU and CUDA devices and the registry are here.
"""

from __future__ import annotations

import contextlib
import os

import torch
from trainbench.measure.cpu_features import cpu_model_name, isa_facts
from trainbench.measure.device_base import (
    HOST_RSS_METHOD,
    AmpPolicy,
    Device,
    MemoryReading,
    host_current_rss_bytes,
    host_peak_rss_bytes,
    torch_version_tuple,
)
from trainbench.measure.mps_device import MpsDevice


class CpuDevice(Device):
    backend = "cpu"

    def availability(self) -> tuple[bool, str]:
        return True, "the CPU is always available"

    def facts(self) -> dict:
        return {
            "backend": "cpu",
            "name": cpu_model_name(),
            "logical_cores": os.cpu_count(),
            # torch's CPU level, ONEDNN_MAX_CPU_ISA, the precision flags and their source
            "isa": isa_facts(),
        }

    def apply_settings(self) -> dict:
        threads = self.settings.get("threads")
        if threads:
            torch.set_num_threads(int(threads))
        interop = self.settings.get("interop_threads")
        if interop:
            # Only settable once, before any parallel work; the value in force is recorded.
            with contextlib.suppress(RuntimeError):
                torch.set_num_interop_threads(int(interop))
        return super().apply_settings()

    def _amp_policy(self, requested: str) -> AmpPolicy:
        if requested == "auto":
            return AmpPolicy(False, None, False, "auto: autocast stays off on the CPU")
        dtype = "bfloat16" if requested == "bf16" else "float16"
        return AmpPolicy(True, dtype, False, f"CPU autocast {dtype} requested by config")


class CudaDevice(Device):
    backend = "cuda"

    def _index(self) -> int:
        return int(self.settings.get("device_index", 0))

    def availability(self) -> tuple[bool, str]:
        if not torch.backends.cuda.is_built():
            return False, f"this torch build ({torch.__version__}) has no CUDA support"
        if not torch.cuda.is_available():
            return False, "torch.cuda.is_available() is False: no NVIDIA GPU or driver visible"
        if self._index() >= torch.cuda.device_count():
            return (
                False,
                f"cuda:{self._index()} requested but only {torch.cuda.device_count()} GPU(s) visible",
            )
        return True, f"{torch.cuda.get_device_name(self._index())} available"

    def torch_device(self) -> torch.device:
        return torch.device("cuda", self._index())

    def facts(self) -> dict:
        idx = self._index()
        props = torch.cuda.get_device_properties(idx)
        return {
            "backend": "cuda",
            "name": props.name,
            "index": idx,
            "total_memory_bytes": int(props.total_memory),
            "capability": f"{props.major}.{props.minor}",
            "multiprocessors": props.multi_processor_count,
            "cuda_runtime": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version(),
            "bf16_supported": bool(torch.cuda.is_bf16_supported()),
        }

    def synchronize(self) -> None:
        torch.cuda.synchronize(self._index())

    def dataloader_kwargs(self) -> dict:
        kwargs = super().dataloader_kwargs()
        if self.settings.get("stage_data_on_device", False):
            fraction = float(self.settings.get("stage_memory_fraction", 0.25))
            total = torch.cuda.get_device_properties(self._index()).total_memory
            kwargs["stage_on_device"] = str(self.torch_device())
            kwargs["stage_limit_bytes"] = int(fraction * total)
        return kwargs

    def make_event(self):
        return torch.cuda.Event(enable_timing=True)

    def apply_settings(self) -> dict:
        torch.cuda.set_device(self._index())
        fraction = self.settings.get("memory_fraction")
        if fraction is not None:
            torch.cuda.set_per_process_memory_fraction(float(fraction), self._index())
        deterministic = bool(self.settings.get("deterministic", False))
        torch.backends.cudnn.benchmark = (
            bool(self.settings.get("cudnn_benchmark", True)) and not deterministic
        )
        in_force = super().apply_settings()
        in_force.update(
            {
                "memory_fraction": fraction,
                "cudnn_benchmark": torch.backends.cudnn.benchmark,
            }
        )
        return in_force

    def _amp_policy(self, requested: str) -> AmpPolicy:
        bf16_ok = torch.cuda.is_bf16_supported()
        if requested == "auto":
            requested = "bf16" if bf16_ok else "fp16"
        if requested == "bf16":
            if not bf16_ok:
                return AmpPolicy(
                    True, "float16", True, "bf16 unsupported on this GPU: fp16 with GradScaler"
                )
            return AmpPolicy(True, "bfloat16", False, "bf16 autocast; bf16 needs no GradScaler")
        return AmpPolicy(True, "float16", True, "fp16 autocast with GradScaler")

    def reset_peak_memory(self) -> None:
        torch.cuda.reset_peak_memory_stats(self._index())

    def current_memory_bytes(self) -> int | None:
        return int(torch.cuda.memory_allocated(self._index()))

    def memory_reading(self, initial: int | None) -> MemoryReading:
        idx = self._index()
        return MemoryReading(
            initial,
            int(torch.cuda.max_memory_allocated(idx)),
            "torch.cuda.max_memory_allocated after reset_peak_memory_stats (tensors only)",
            {
                "peak_reserved_bytes": int(torch.cuda.max_memory_reserved(idx)),
                "host_peak_rss_bytes": host_peak_rss_bytes(),
            },
        )

    def memory_limit_bytes(self) -> int | None:
        return int(torch.cuda.get_device_properties(self._index()).total_memory)

    def reserved_memory_bytes(self) -> int | None:
        return int(torch.cuda.memory_reserved(self._index()))

    def empty_cache(self) -> None:
        torch.cuda.empty_cache()


DEVICE_CLASSES: dict[str, type[Device]] = {"cpu": CpuDevice, "cuda": CudaDevice, "mps": MpsDevice}


# The first release whose fused Adam/AdamW on MPS applies GradScaler's scale and skips a
# step with infinite gradients (pytorch#186360, June 2026; before it the MPS kernel
# ignored them). From here MPS gets the fused kernel as CUDA does.
MPS_FUSED_SINCE = (2, 13)


def fused_optimizer(setting: str | bool | None, device_type: str) -> bool | None:
    """``fused`` for Adam/AdamW: "auto" = fused on CUDA, and on MPS from torch 2.13
    (one kernel over every parameter instead of several per tensor; and with a
    GradScaler no host wait per step: a non-fused optimizer makes GradScaler read
    ``found_inf`` with ``.item()`` before each step, ``torch/amp/grad_scaler.py``
    ``_maybe_opt_step``), torch's own choice elsewhere."""
    if setting is None or setting == "auto":
        if device_type == "cuda":
            return True
        if device_type == "mps" and torch_version_tuple() >= MPS_FUSED_SINCE:
            return True
        return None
    return bool(setting)


def get_device(backend: str, settings: dict | None = None) -> Device:
    try:
        return DEVICE_CLASSES[backend](settings)
    except KeyError:
        raise ValueError(
            f"unknown device backend {backend!r}; known: {sorted(DEVICE_CLASSES)}"
        ) from None


__all__ = [
    "HOST_RSS_METHOD",
    "AmpPolicy",
    "CpuDevice",
    "CudaDevice",
    "Device",
    "MemoryReading",
    "MpsDevice",
    "cpu_model_name",
    "fused_optimizer",
    "get_device",
    "host_current_rss_bytes",
    "host_peak_rss_bytes",
]
