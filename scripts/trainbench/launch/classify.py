"""Classify how a cell died, from what the child reported and what it left behind.

Order (first match wins): bad_input -> oom -> compile_failed -> unsupported_op -> dtype ->
placement -> accelerator_error -> build_failed -> signal -> timeout -> nan_loss -> unknown
(a ``build()`` that ran out of memory is ``oom``: its message is matched first). The patterns are
the messages PyTorch prints on CUDA and MPS (see docs/measurement-reference.md).
"""

from __future__ import annotations

import re
import signal as _signal
from dataclasses import dataclass

from trainbench.measure.parts import COMPILE_ERROR_NAMES

OOM_PATTERNS = (
    r"out of memory",
    r"MPS backend out of memory",
    r"CUDA out of memory",
    r"OutOfMemoryError",
    r"DefaultCPUAllocator: can't allocate memory",
)
UNSUPPORTED_PATTERNS = (
    r"not currently implemented for the MPS device",
    r"not currently supported on the MPS backend",
    r"NotImplementedError: The operator",
    r"Could not run '[^']+' with arguments from the '\w+' backend",
)
DTYPE_PATTERNS = (
    r"Cannot convert a MPS Tensor to float64",
    r"MPS framework doesn't support float64",
    r"does not support (the )?(float64|double|bfloat16)",
    r"expected scalar type \w+ but found \w+",
    r"\"[a-z_]+\" not implemented for '(Half|BFloat16|Double)'",
)
PLACEMENT_PATTERNS = (
    r"Placeholder storage has not been allocated on MPS device",
    r"Expected all tensors to be on the same device",
    r"is on (cpu|mps|cuda)[:0-9]* but expected",
)
ACCELERATOR_PATTERNS = (
    r"AcceleratorError",
    r"CUDA error",
    r"CUBLAS_STATUS",
    r"cuDNN error",
    r"command buffer exited with error status",
    r"MTLReportFailure",
    r"Metal command buffer",
    r"failed assertion",
    r"MPSNDArray",
    r"LLVM ERROR",
)
COMPILE_PATTERNS = (r"torch\.compile\(mode=", r"BackendCompilerFailed", r"InductorError")
# Messages that mean "results are wrong" even though the run went on (pytorch#125954).
SILENT_CORRUPTION_PATTERNS = (r"Error: command buffer exited with error status",)

HINTS = (
    (
        r"OMP: Error #15",
        "two OpenMP runtimes started in one process (on a Mac, torch's libomp and another "
        "library's copy: faiss, MKL); keep that library in a process of its own, as two_tower "
        "does with FAISS (trainbench.workloads.faiss_process). KMP_DUPLICATE_LIB_OK=TRUE in "
        "device_settings.<dev>.env lets the cell run, but Intel warns it may give incorrect "
        "results (docs/how-it-measures.md, OpenMP)",
    ),
    (
        r"LLVM ERROR: Failed to infer result type",
        "known MPS LSTM/GRU backward crash (pytorch#87579)",
    ),
    (
        r"MPS backend out of memory",
        "lower the batch size, or raise the allocator's cap: device_settings.mps."
        "memory_fraction (up to 2), or memory_fraction: null with high_watermark_ratio "
        "and low_watermark_ratio (low at most high)",
    ),
)


@dataclass
class Classification:
    error_class: str
    hint: str | None = None


def _search(patterns: tuple[str, ...], *texts: str) -> bool:
    return any(re.search(p, t) for p in patterns for t in texts if t)


def signal_name(returncode: int | None) -> str | None:
    if returncode is None or returncode >= 0:
        return None
    try:
        return _signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"


def find_silent_corruption(stderr: str) -> str | None:
    for pattern in SILENT_CORRUPTION_PATTERNS:
        match = re.search(pattern + r".*", stderr)
        if match:
            return match.group(0).strip()
    return None


def classify(
    *,
    exception_type: str | None = None,
    exception_mro: list[str] | None = None,
    message: str = "",
    returncode: int | None = None,
    timed_out: bool = False,
    stderr: str = "",
    nan_loss: bool = False,
) -> Classification:
    """Map one failed attempt to an error class and an optional hint."""
    names = set(exception_mro or []) | ({exception_type} if exception_type else set())
    exc_text = f"{exception_type or ''}: {message}"
    # Crashes leave their message in stderr only; exceptions carry it themselves.
    texts = (exc_text, stderr) if not exception_type else (exc_text,)
    hint = next((h for p, h in HINTS if re.search(p, exc_text) or re.search(p, stderr or "")), None)

    if timed_out and not exception_type:
        # A hang is a hang even if the kill left a traceback or signal behind.
        return Classification("timeout", hint)
    if names & {"BadInputError"}:  # the cell's input broke a contract (parts_contract)
        return Classification("bad_input", hint)
    if names & {"OutOfMemoryError"} or _search(OOM_PATTERNS, *texts):
        return Classification("oom", hint)
    if names & COMPILE_ERROR_NAMES or _search(COMPILE_PATTERNS, *texts):
        return Classification("compile_failed", hint)
    if _search(UNSUPPORTED_PATTERNS, *texts):
        return Classification("unsupported_op", hint)
    if _search(DTYPE_PATTERNS, *texts):
        return Classification("dtype", hint)
    if _search(PLACEMENT_PATTERNS, *texts):
        return Classification("placement", hint)
    if names & {"AcceleratorError"} or _search(ACCELERATOR_PATTERNS, *texts):
        return Classification("accelerator_error", hint)
    if names & {"BuildFailedError"}:  # the workload's build(ctx) raised (parts_contract)
        return Classification("build_failed", hint)
    if returncode is not None and returncode < 0:
        return Classification("signal", hint)
    if timed_out:
        return Classification("timeout", hint)
    if nan_loss or "NonFiniteLossError" in names:
        return Classification("nan_loss", hint)
    return Classification("unknown", hint)
