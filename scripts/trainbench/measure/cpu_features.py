"""What this CPU can compute: the instruction set found, and whether the kernels a
model needs run under CPU autocast in a given dtype.

The instruction set is read three ways and all are recorded: torch's dispatch level
(``torch.backends.cpu.get_cpu_capability()``, lowered by ``ATEN_CPU_CAPABILITY``),
oneDNN's cap (``ONEDNN_MAX_CPU_ISA``, which lowers what oneDNN may use — torch's own
level does not show it), and the CPU's flags (/proc/cpuinfo on Linux, ``sysctl
hw.optional`` on macOS). A flag table cannot say which kernels exist, so
:func:`autocast_unavailable` runs each kind of kernel the model holds (a copy of its
first module of that kind) forward and backward on a tiny input under
``torch.autocast('cpu', dtype)``: a RuntimeError there (oneDNN: "could not create a
primitive descriptor") is the honest answer. Torch is imported only where used.
"""

from __future__ import annotations

import copy
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

# Flags that decide low-precision CPU kernels (x86 names from /proc/cpuinfo; ARM
# "Features"; macOS sysctl hw.optional names, lower-cased).
PRECISION_FLAGS = (
    "avx2",
    "avx512f",
    "avx512_bf16",
    "avx512_fp16",
    "avx_vnni",
    "amx_bf16",
    "amx_fp16",
    "amx_tile",
    "bf16",
    "fphp",
    "asimdhp",
    "sve",
    "arm.feat_bf16",
    "arm.feat_fp16",
    "neon",
)
ISA_VARIABLES = ("ONEDNN_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY")


def _linux_flags(cpuinfo: Path) -> set[str]:
    for line in cpuinfo.read_text(errors="replace").splitlines():
        key, _, value = line.partition(":")
        if key.strip().lower() in ("flags", "features"):
            return set(value.split())
    return set()


def _macos_flags() -> set[str]:
    """``sysctl hw.optional`` lines ``hw.optional.arm.FEAT_BF16: 1``: the names set to 1."""
    try:
        out = subprocess.run(
            ["sysctl", "hw.optional"], capture_output=True, text=True, timeout=5
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return set()
    flags = set()
    for line in out.splitlines():
        key, _, value = line.partition(":")
        if value.strip() == "1":
            flags.add(key.strip().lower().removeprefix("hw.optional."))
    return flags


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> tuple[set[str], str]:
    """The CPU's feature flags and where they were read ("none" when nowhere)."""
    if sys.platform == "darwin":
        flags = _macos_flags()
        return flags, "sysctl hw.optional" if flags else "none"
    if cpuinfo.is_file():
        return _linux_flags(cpuinfo), str(cpuinfo)
    return set(), "none"


def isa_facts() -> dict:
    """The instruction set found: torch's level, the variables that lower it, and
    the precision-relevant flags (sorted) with their source."""
    import torch

    flags, source = cpu_flags()
    return {
        "torch_capability": torch.backends.cpu.get_cpu_capability(),
        **{name.lower(): os.environ.get(name) for name in ISA_VARIABLES},
        "precision_flags": sorted(f for f in flags if f in PRECISION_FLAGS),
        "flags_source": source,
    }


def isa_text(facts: dict) -> str:
    """One short phrase naming the instruction set found, e.g. "AVX512 (torch), oneDNN
    capped at AVX2 by ONEDNN_MAX_CPU_ISA; flags avx2 avx512f"."""
    text = f"{facts.get('torch_capability')} (torch)"
    if facts.get("onednn_max_cpu_isa"):
        text += f", oneDNN capped at {facts['onednn_max_cpu_isa']} by ONEDNN_MAX_CPU_ISA"
    flags = " ".join(facts.get("precision_flags") or []) or "none of the precision flags"
    return f"{text}; flags {flags}"


def _probe_input(module: Any) -> tuple | None:
    """A tiny input for a copy of ``module``, or None for a kind not probed."""
    import torch
    from torch import nn

    if isinstance(module, nn.RNNBase):
        shape = (1, 2, module.input_size) if module.batch_first else (2, 1, module.input_size)
        return (torch.randn(shape),)
    if isinstance(module, nn.Linear):
        return (torch.randn(2, module.in_features),)
    if isinstance(module, nn.modules.conv._ConvNd) and not module.transposed:
        spatial = [k * d for k, d in zip(module.kernel_size, module.dilation, strict=True)]
        return (torch.randn(1, module.in_channels, *spatial),)
    if isinstance(module, nn.MultiheadAttention) and module._qkv_same_embed_dim:
        x = torch.randn(
            (1, 2, module.embed_dim) if module.batch_first else (2, 1, module.embed_dim)
        )
        return (x, x, x)
    return None


def probe_modules(model: Any) -> dict[str, Any]:
    """The first module of each probed kind in ``model``, by class name."""
    found: dict[str, Any] = {}
    for module in model.modules():
        name = type(module).__name__
        if name not in found and _probe_input(module) is not None:
            found[name] = module
    return found


def _run_probe(module: Any, dtype: Any) -> None:
    import torch

    probe = copy.deepcopy(module).cpu().float().train()
    inputs = _probe_input(probe)
    with torch.autocast("cpu", dtype=dtype):
        out = probe(*inputs)
    out = out[0] if isinstance(out, tuple) else out
    out.float().sum().backward()


def autocast_unavailable(model: Any, dtype: str) -> str | None:
    """None when every probed kernel kind of ``model`` runs forward and backward under
    ``torch.autocast('cpu', dtype)``; else one line naming the dtype, the kernel, the
    error's first line and the instruction set found. Torch's random state is left as
    it was: the probe's random inputs must not move the cell's dropout masks and
    batches off those of the baseline's repeat with the same run seed (parity pairs
    them)."""
    import torch

    torch_dtype = getattr(torch, dtype)
    with torch.random.fork_rng(devices=[]):
        return _first_failure(model, torch_dtype, dtype)


def _first_failure(model: Any, torch_dtype: Any, dtype: str) -> str | None:
    for name, module in probe_modules(model).items():
        try:
            _run_probe(module, torch_dtype)
        except RuntimeError as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            first = first.split(". Run workload with")[0][:160]
            return (
                f"CPU autocast {dtype} unavailable: {name} fails under it ({first}); "
                f"instruction set {isa_text(isa_facts())}"
            )
    return None


def cpu_model_name() -> str:
    """Best-effort CPU model string (Linux /proc/cpuinfo, macOS sysctl)."""
    if sys.platform.startswith("linux"):
        try:
            with open("/proc/cpuinfo") as fh:
                for line in fh:
                    if line.lower().startswith("model name"):
                        return line.split(":", 1)[1].strip()
        except OSError:
            pass
    if sys.platform == "darwin":
        try:
            out = subprocess.run(
                ["sysctl", "-n", "machdep.cpu.brand_string"],
                capture_output=True,
                text=True,
                timeout=5,
            )
            if out.stdout.strip():
                return out.stdout.strip()
        except (OSError, subprocess.SubprocessError):
            pass
    return platform.processor() or platform.machine()
