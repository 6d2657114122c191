"""Failure classification: one table of real-world failures, the order, hints."""

from __future__ import annotations

import pytest
import torch
from trainbench.launch.classify import classify, find_silent_corruption, signal_name
from trainbench.measure.training import NonFiniteLossError


def _mro(cls: type) -> list[str]:
    return [c.__name__ for c in cls.__mro__]


def _exc(cls: type, message: str) -> dict:
    """kwargs as the launcher builds them from the child's exception info."""
    return {"exception_type": cls.__name__, "exception_mro": _mro(cls), "message": message}


class _AcceleratorError(RuntimeError):
    """Stands in for torch.AcceleratorError on a torch that lacks it."""


_AcceleratorError.__name__ = "AcceleratorError"
AcceleratorError = getattr(torch, "AcceleratorError", _AcceleratorError)


MPS_OOM = (
    "MPS backend out of memory (MPS allocated: 17.80 GB, other allocations: 1.20 GB, max "
    "allowed: 18.13 GB). Tried to allocate 512.00 MB on private pool."
)
MPS_UNSUPPORTED = (
    "The operator 'aten::_fft_r2c' is not currently implemented for the MPS device. If you "
    "want this op to be added in priority during the prototype phase of this feature, please "
    "comment on https://github.com/pytorch/pytorch/issues/77764."
)
LLVM_CRASH = (
    'loc("mps_matmul"("(mpsFileLoc)":0:0)): error: incompatible dimensions\n'
    "LLVM ERROR: Failed to infer result type(s).\n"
)

CASES = [
    # id, classify kwargs, expected class
    (
        "torch-oom-by-mro",
        _exc(torch.OutOfMemoryError, "Tried to allocate 20.00 GiB"),
        "oom",
    ),
    ("cuda-oom-message", _exc(RuntimeError, "CUDA out of memory. Tried to allocate 2 GiB"), "oom"),
    ("mps-oom-runtimeerror", _exc(RuntimeError, MPS_OOM), "oom"),
    (
        "cpu-allocator-oom",
        _exc(RuntimeError, "[enforce fail] DefaultCPUAllocator: can't allocate memory"),
        "oom",
    ),
    ("mps-unsupported-op", _exc(NotImplementedError, MPS_UNSUPPORTED), "unsupported_op"),
    (
        "unsupported-op-fallback-wording",
        _exc(
            NotImplementedError,
            "The operator 'aten::foo' is not currently supported on the MPS backend",
        ),
        "unsupported_op",
    ),
    (
        "mps-float64",
        _exc(
            TypeError,
            "Cannot convert a MPS Tensor to float64 dtype as the MPS framework doesn't "
            "support float64. Please use float32 instead.",
        ),
        "dtype",
    ),
    (
        "half-not-implemented",
        _exc(RuntimeError, "\"addmm_impl_cpu_\" not implemented for 'Half'"),
        "dtype",
    ),
    (
        "mps-placeholder",
        _exc(RuntimeError, "Placeholder storage has not been allocated on MPS device!"),
        "placement",
    ),
    (
        "same-device",
        _exc(
            RuntimeError,
            "Expected all tensors to be on the same device, but found at least two devices",
        ),
        "placement",
    ),
    (
        "accelerator-error-by-mro",
        _exc(AcceleratorError, "an illegal memory access was encountered"),
        "accelerator_error",
    ),
    (
        "cuda-error-message",
        _exc(RuntimeError, "CUDA error: device-side assert triggered"),
        "accelerator_error",
    ),
    (
        "llvm-crash-sigabrt",
        {"returncode": -6, "stderr": LLVM_CRASH},
        "accelerator_error",
    ),
    (
        "metal-assertion-sigabrt",
        {"returncode": -6, "stderr": "-[MTLDebugCommandBuffer commit]: failed assertion `x'"},
        "accelerator_error",
    ),
    ("sigabrt-plain", {"returncode": -6, "stderr": "injected fault: abort()\n"}, "signal"),
    ("sigsegv", {"returncode": -11, "stderr": "Fatal Python error: Segmentation fault"}, "signal"),
    ("sigkill-no-stderr", {"returncode": -9}, "signal"),
    ("timeout-sigterm", {"returncode": -15, "timed_out": True}, "timeout"),
    (
        "timeout-beats-crash-text",
        {"returncode": -15, "timed_out": True, "stderr": "LLVM ERROR: whatever\n"},
        "timeout",
    ),
    ("timeout-no-returncode", {"timed_out": True}, "timeout"),
    ("nan-flag", {"nan_loss": True, "returncode": 1}, "nan_loss"),
    (
        "nan-by-mro",
        _exc(NonFiniteLossError, "training loss is nan in epoch 1 (device cpu)"),
        "nan_loss",
    ),
    ("generic-valueerror", _exc(ValueError, "batch holds no tensor"), "unknown"),
    ("exit-code-1-quiet", {"returncode": 1, "stderr": "something went wrong"}, "unknown"),
    ("nothing-at-all", {}, "unknown"),
    # Order: the first matching class wins.
    (
        "oom-before-unsupported",
        _exc(RuntimeError, "MPS backend out of memory; not currently supported on the MPS backend"),
        "oom",
    ),
    (
        "unsupported-before-dtype",
        _exc(
            NotImplementedError,
            "not currently implemented for the MPS device; Cannot convert a MPS Tensor to float64",
        ),
        "unsupported_op",
    ),
    (
        "dtype-before-placement",
        _exc(
            RuntimeError,
            "Cannot convert a MPS Tensor to float64 (Expected all tensors to be on the same device)",
        ),
        "dtype",
    ),
    (
        "placement-before-accelerator",
        _exc(RuntimeError, "Placeholder storage has not been allocated on MPS device! CUDA error"),
        "placement",
    ),
    (
        "crash-with-oom-in-stderr",
        {"returncode": -6, "stderr": "RuntimeError: MPS backend out of memory\n"},
        "oom",
    ),
    (
        "accelerator-before-signal",
        {"returncode": -11, "stderr": "MPSNDArray error"},
        "accelerator_error",
    ),
    ("signal-before-nan", {"returncode": -6, "nan_loss": True}, "signal"),
    # An exception carries its own message: stale stderr text is not used to classify it.
    (
        "exception-ignores-stderr",
        {**_exc(ValueError, "bad value"), "stderr": "CUDA out of memory (earlier warning)"},
        "unknown",
    ),
]


@pytest.mark.parametrize("kwargs, expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_classification_table(kwargs, expected):
    assert classify(**kwargs).error_class == expected


def test_omp_duplicate_runtime_gives_hint():
    result = classify(
        returncode=-6,
        stderr="OMP: Error #15: Initializing libiomp5.dylib, but found libomp.dylib already "
        "initialized.\n",
    )
    assert result.error_class == "signal"
    assert result.hint is not None
    assert "process of its own" in result.hint and "incorrect results" in result.hint


def test_llvm_crash_hint_names_known_issue():
    result = classify(returncode=-6, stderr=LLVM_CRASH)
    assert "87579" in result.hint


def test_mps_oom_hint_from_exception_message():
    result = classify(**_exc(RuntimeError, MPS_OOM))
    assert result.error_class == "oom"
    assert "batch size" in result.hint


def test_no_hint_for_plain_failures():
    assert classify(**_exc(ValueError, "bad value")).hint is None
    assert classify(returncode=-11).hint is None


def test_find_silent_corruption():
    stderr = (
        "step 1\n"
        "Error: command buffer exited with error status.\n"
        "\tThe Metal Performance Shaders operations encoded on it may not have completed.\n"
        "step 2\n"
    )
    found = find_silent_corruption(stderr)
    assert found == "Error: command buffer exited with error status."
    assert find_silent_corruption("step 1\nstep 2\n") is None
    assert find_silent_corruption("") is None


@pytest.mark.parametrize(
    "returncode, name",
    [(-6, "SIGABRT"), (-11, "SIGSEGV"), (-9, "SIGKILL"), (-15, "SIGTERM"), (0, None), (1, None)],
)
def test_signal_name(returncode, name):
    assert signal_name(returncode) == name
    assert signal_name(None) is None


def test_signal_name_unknown_number():
    assert signal_name(-250) == "signal 250"
