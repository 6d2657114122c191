"""One small class per backend: availability, sync, memory, AMP policy, loader defaults.

Every ``torch.mps`` call goes through :func:`_mps_fn`, which returns ``None`` when
the attribute does not exist in the installed torch, so the MPS path degrades to
"not measured" instead of crashing (and is unit-tested with the API patched).
"""

from __future__ import annotations

import contextlib
import os
import platform
import resource
import sys
from dataclasses import asdict, dataclass
from typing import Any

import torch
from trainbench.measure.cpu_features import cpu_model_name, isa_facts
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


def _mps_fn(name: str):
    """torch.mps.<name> if this torch has it, else None (feature detection)."""
    module = getattr(torch, "mps", None)
    return getattr(module, name, None) if module is not None else None


def _mps_call(name: str, *args, default=None):
    fn = _mps_fn(name)
    if fn is None:
        return default
    try:
        return fn(*args)
    except (RuntimeError, AttributeError, TypeError):
        return default


class MpsDevice(Device):
    backend = "mps"
    samples_memory_per_step = True  # no peak-memory API: sampled after each step's parts

    def __init__(self, settings: dict | None = None):
        super().__init__(settings)
        self._sampled_peak: int | None = None

    def availability(self) -> tuple[bool, str]:
        backend = getattr(torch.backends, "mps", None)
        if backend is None or not hasattr(backend, "is_built"):
            return False, f"this torch ({torch.__version__}) has no torch.backends.mps"
        if not backend.is_built():
            return False, (
                f"this torch build ({torch.__version__}) was built without MPS; "
                "MPS needs macOS on Apple silicon"
            )
        if not backend.is_available():
            return (
                False,
                "torch.backends.mps.is_available() is False: macOS < 12.3 or no Metal device",
            )
        return True, "MPS available"

    def facts(self) -> dict:
        return {
            "backend": "mps",
            "name": platform.machine() + " " + (platform.mac_ver()[0] or ""),
            "chip": cpu_model_name(),
            "recommended_max_memory_bytes": _mps_call("recommended_max_memory"),
            "macos": platform.mac_ver()[0] or None,
        }

    def synchronize(self) -> None:
        _mps_call("synchronize")

    def make_event(self):
        event_mod = _mps_fn("event")
        event_cls = getattr(event_mod, "Event", None) if event_mod is not None else None
        if event_cls is None:
            return None
        try:
            return event_cls(enable_timing=True)
        except (TypeError, RuntimeError):
            return None

    def apply_settings(self) -> dict:
        fraction = self.settings.get("memory_fraction")
        applied = None
        if fraction is not None and _mps_fn("set_per_process_memory_fraction") is not None:
            # Only report the fraction as in force when the call did not fail.
            refused = object()
            outcome = _mps_call("set_per_process_memory_fraction", float(fraction), default=refused)
            applied = None if outcome is refused else float(fraction)
        in_force = super().apply_settings()
        in_force.update(
            {
                "memory_fraction": applied,
                "high_watermark_ratio": os.environ.get("PYTORCH_MPS_HIGH_WATERMARK_RATIO"),
                "cpu_fallback_enabled": os.environ.get("PYTORCH_ENABLE_MPS_FALLBACK") == "1",
            }
        )
        return in_force

    def _amp_policy(self, requested: str) -> AmpPolicy:
        if requested == "auto":
            requested = "fp16"
        dtype = "bfloat16" if requested == "bf16" else "float16"
        if dtype == "bfloat16":
            return AmpPolicy(
                True, dtype, False, "bf16 autocast on MPS (needs macOS 14); no GradScaler"
            )
        scaler_ok = torch_version_tuple() >= (2, 8)
        reason = (
            "fp16 autocast with GradScaler (MPS GradScaler works from torch 2.8)"
            if scaler_ok
            else "fp16 autocast without GradScaler: torch < 2.8 cannot scale MPS gradients"
        )
        return AmpPolicy(True, dtype, scaler_ok, reason)

    def reset_peak_memory(self) -> None:
        self._sampled_peak = None

    def current_memory_bytes(self) -> int | None:
        value = _mps_call("current_allocated_memory")
        return int(value) if value is not None else None

    def sample_memory(self) -> None:
        value = self.current_memory_bytes()
        if value is not None and (self._sampled_peak is None or value > self._sampled_peak):
            self._sampled_peak = value

    def memory_reading(self, initial: int | None) -> MemoryReading:
        driver = _mps_call("driver_allocated_memory")
        return MemoryReading(
            initial,
            self._sampled_peak,
            "sampled peak: max of torch.mps.current_allocated_memory() after forward, "
            "backward and optimizer step (MPS has no peak API)",
            {
                "driver_allocated_bytes_at_end": int(driver) if driver is not None else None,
                "recommended_max_memory_bytes": _mps_call("recommended_max_memory"),
                "host_peak_rss_bytes": host_peak_rss_bytes(),
            },
        )

    def memory_limit_bytes(self) -> int | None:
        value = _mps_call("recommended_max_memory")
        return int(value) if value is not None else None

    def reserved_memory_bytes(self) -> int | None:
        """torch.mps.driver_allocated_memory(): every Metal allocation of the process,
        the allocator's cache included (grows where current_allocated_memory does not:
        the leaks of pytorch issues 164299 and 181213)."""
        value = _mps_call("driver_allocated_memory")
        return int(value) if value is not None else None

    def empty_cache(self) -> None:
        _mps_call("empty_cache")


DEVICE_CLASSES: dict[str, type[Device]] = {"cpu": CpuDevice, "cuda": CudaDevice, "mps": MpsDevice}


def fused_optimizer(setting: str | bool | None, device_type: str) -> bool | None:
    """``fused`` for Adam/AdamW: "auto" = fused on CUDA (one kernel over every
    parameter instead of several per tensor), torch's own choice elsewhere."""
    if setting is None or setting == "auto":
        return True if device_type == "cuda" else None
    return bool(setting)


def get_device(backend: str, settings: dict | None = None) -> Device:
    try:
        return DEVICE_CLASSES[backend](settings)
    except KeyError:
        raise ValueError(
            f"unknown device backend {backend!r}; known: {sorted(DEVICE_CLASSES)}"
        ) from None
