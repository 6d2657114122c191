"""What every backend's device class shares: the AMP policy, the memory reading, the
host's own memory figures, and the :class:`Device` interface itself."""

from __future__ import annotations

import resource
import sys
from dataclasses import asdict, dataclass
from typing import Any

import torch
from trainbench.measure.precision import matmul_facts


@dataclass
class AmpPolicy:
    enabled: bool
    dtype: str | None  # "bfloat16" / "float16" / None
    scaler: bool
    reason: str

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class MemoryReading:
    initial_bytes: int | None
    peak_bytes: int | None
    method: str
    extra: dict

    def as_dict(self) -> dict:
        return asdict(self)


def torch_version_tuple() -> tuple[int, int]:
    base = torch.__version__.split("+")[0]
    parts = base.split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return (0, 0)


def host_peak_rss_bytes() -> int:
    """Peak resident set size of this process. ru_maxrss is KiB on Linux, bytes on macOS."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)


def host_current_rss_bytes() -> int:
    import psutil

    return int(psutil.Process().memory_info().rss)


HOST_RSS_METHOD = (
    "host peak RSS of the cell's process (getrusage ru_maxrss; includes Python, torch and data)"
)


class Device:
    backend = "cpu"
    # Whether the training steps sample memory (sample_memory): only a device whose
    # peak cannot be read afterwards needs it inside the steps.
    samples_memory_per_step = False

    def __init__(self, settings: dict | None = None):
        self.settings = dict(settings or {})

    # -- identity ---------------------------------------------------------------
    def availability(self) -> tuple[bool, str]:
        raise NotImplementedError

    def torch_device(self) -> torch.device:
        return torch.device(self.backend)

    def facts(self) -> dict:
        return {"backend": self.backend}

    # -- timing -----------------------------------------------------------------
    def synchronize(self) -> None:
        """Wait for all queued work; a no-op on the CPU, which runs synchronously."""

    def make_event(self) -> Any | None:
        """A device timing event, or None where wall clocks are exact (CPU)."""
        return None

    # -- settings ---------------------------------------------------------------
    def apply_settings(self) -> dict:
        """Apply the process-wide settings and return the ones actually in force."""
        deterministic = bool(self.settings.get("deterministic", False))
        if deterministic:
            torch.use_deterministic_algorithms(True)
        return {
            "deterministic": deterministic,
            "torch_threads": torch.get_num_threads(),
            "torch_interop_threads": torch.get_num_interop_threads(),
            **matmul_facts(self.backend),
        }

    def amp_policy(self, requested: str | None = None) -> AmpPolicy:
        requested = self.settings.get("autocast", "off") if requested is None else requested
        if requested in ("off", False, None):
            return AmpPolicy(False, None, False, "autocast off by config")
        return self._amp_policy(requested)

    def _amp_policy(self, requested: str) -> AmpPolicy:
        return AmpPolicy(False, None, False, f"autocast {requested} not applied on {self.backend}")

    def make_grad_scaler(self, policy: AmpPolicy):
        if not policy.scaler:
            return None
        return torch.amp.GradScaler(self.backend)

    def dataloader_kwargs(self) -> dict:
        workers = int(self.settings.get("num_workers", 0))
        pin = bool(self.settings.get("pin_memory", False)) and self.backend == "cuda"
        return {
            "num_workers": workers,
            "pin_memory": pin,
            "persistent_workers": workers > 0,
        }

    # -- memory -----------------------------------------------------------------
    def reset_peak_memory(self) -> None:
        pass

    def current_memory_bytes(self) -> int | None:
        return host_current_rss_bytes()

    def sample_memory(self) -> None:
        """Called after forward, backward and optimizer step; only MPS needs it."""

    def memory_reading(self, initial: int | None) -> MemoryReading:
        return MemoryReading(initial, host_peak_rss_bytes(), HOST_RSS_METHOD, {})

    def memory_limit_bytes(self) -> int | None:
        import psutil

        return int(psutil.virtual_memory().total)

    def reserved_memory_bytes(self) -> int | None:
        """Memory the backend holds beyond live tensors (CUDA's caching allocator,
        MPS's driver allocations); None where the backend has no such figure."""
        return None

    def memory_snapshot(self) -> dict:
        """Memory now, read outside every timed region (once per epoch): device
        tensors, the backend's reserved/driver memory, and the process's RSS."""
        return {
            "allocated_bytes": self.current_memory_bytes() if self.backend != "cpu" else None,
            "reserved_bytes": self.reserved_memory_bytes(),
            "process_rss_bytes": host_current_rss_bytes(),
        }

    def empty_cache(self) -> None:
        pass
