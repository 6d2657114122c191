"""Fault injection, for tests only: make one cell fail the way real backends fail.

Off by default. The config refuses ``fault_injection`` unless
``launcher.allow_fault_injection`` is true (or TRAINBENCH_ALLOW_FAULTS=1 in a
test's environment), and the child refuses it again unless the launcher marked
the spec as allowed. Each fault imitates a failure seen in the field: the same
exception class and message, or a real signal. ``silent_numeric_error`` (an entry
may carry ``size``, default 0.1) makes the device's math silently wrong for the whole
run instead: see :mod:`trainbench.measure.numeric_fault`; ``eval_output_error`` (``size``
too) makes only the evaluation's outputs wrong, training untouched: see
:mod:`trainbench.measure.eval_parity`.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import time

import torch

FAULTS = (
    "exception",
    "sigabrt",
    "segfault",
    "sigkill",
    "hang",
    "cuda_oom",
    "mps_oom",
    "mps_unsupported_op",
    "mps_placeholder",
    "nan_loss",
    "silent_corruption",
    "compile_failed",
    "silent_numeric_error",
    "eval_output_error",
)


class InjectedFault(RuntimeError):
    """A plain Python exception raised on purpose."""


def active_fault_entry(spec: dict, attempt: int) -> dict | None:
    """The cell's fault entry in force on ``attempt`` (the first that applies), or None."""
    if not spec.get("faults_allowed"):
        return None
    for fault in spec.get("faults") or []:
        attempts = fault.get("attempts")
        if attempts and attempt not in attempts:
            continue
        return fault
    return None


def active_fault(spec: dict, attempt: int) -> str | None:
    entry = active_fault_entry(spec, attempt)
    return entry["fault"] if entry else None


def inject(fault: str) -> None:
    """Trigger ``fault`` now. Faults that corrupt results instead of raising
    (nan_loss, silent_corruption, eval_output_error) are handled by the training loop;
    silent_numeric_error by the child (:mod:`trainbench.measure.numeric_fault`)."""
    if fault == "exception":
        raise InjectedFault("injected Python exception")
    if fault == "sigabrt":
        sys.stderr.write("injected fault: abort()\n")
        sys.stderr.flush()
        os.abort()
    if fault == "segfault":
        sys.stderr.flush()
        ctypes.string_at(0)  # reads address 0: a real SIGSEGV
    if fault == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    if fault == "hang":
        while True:
            time.sleep(1)
    if fault == "cuda_oom":
        raise torch.OutOfMemoryError(
            "CUDA out of memory. Tried to allocate 20.00 GiB. GPU 0 has a total capacity of "
            "79.11 GiB of which 1.25 GiB is free. (injected)"
        )
    if fault == "mps_oom":
        raise RuntimeError(
            "MPS backend out of memory (MPS allocated: 17.80 GB, other allocations: 1.20 GB, max "
            "allowed: 18.13 GB). Tried to allocate 512.00 MB on private pool. Use "
            "PYTORCH_MPS_HIGH_WATERMARK_RATIO=0.0 to disable upper limit for memory allocations "
            "(may cause system failure). (injected)"
        )
    if fault == "mps_unsupported_op":
        raise NotImplementedError(
            "The operator 'aten::_fft_r2c' is not currently implemented for the MPS device. If you "
            "want this op to be added in priority during the prototype phase of this feature, please "
            "comment on https://github.com/pytorch/pytorch/issues/77764. As a temporary fix, you can "
            "set the environment variable `PYTORCH_ENABLE_MPS_FALLBACK=1` to use the CPU as a "
            "fallback for this op. (injected)"
        )
    if fault == "mps_placeholder":
        raise RuntimeError("Placeholder storage has not been allocated on MPS device! (injected)")
    if fault == "compile_failed":
        # A real torch.compile failure: dynamo hands a graph to a backend that refuses it.
        def refusing_backend(graph_module, example_inputs):
            raise RuntimeError("injected: the compiler backend refused the graph")

        torch.compile(lambda x: x + 1, backend=refusing_backend)(torch.ones(1))
    if fault in ("nan_loss", "silent_corruption", "silent_numeric_error", "eval_output_error"):
        return
    raise ValueError(f"unknown fault {fault!r}; known: {', '.join(FAULTS)}")
