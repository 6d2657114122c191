"""What the MPS backend refuses, as the emulator raises it: MPS's own exception type and
message, then the rule broken and the first line of code outside torch that broke it.

Each rule names its source (PyTorch's code or issue), so a Mac owner can check it:

* float64 (and complex128) device tensors do not exist: MPS raises
  ``TypeError: Cannot convert a MPS Tensor to float64 dtype ...`` when one is made,
  cast or copied in (``aten/src/ATen/mps/EmptyTensor.cpp``; pytorch#122602, by design);
* a copy out of the device with a cast to float64 in the same call
  (``t.to("cpu", torch.float64)``, ``cpu64.copy_(t)``): raises on 2.13, writes nothing
  at all on 2.14 (pytorch#197715); copy out first, then cast on the CPU;
* pinned host memory is not MPS's (pytorch#86060: ``pin_memory()`` fails; the
  DataLoader warns and does not pin);
* no CUDA call while the cell is on MPS;
* one device per op: a CPU tensor with more than zero dimensions beside device tensors
  ("Expected all tensors to be on the same device"); 0-dim CPU tensors are scalars;
* the allocator's watermarks (:mod:`.allocator`) and event order (:mod:`.api`).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch

FLOAT64 = "no float64 on the device"
COPY_OUT_CAST = "no cast to float64 in a copy out of the device"
PINNED = "no pinned memory for MPS"
CUDA_CALL = "no CUDA call on MPS"
ONE_DEVICE = "one device per op"
WATERMARK = "watermark ratios"
OUT_OF_MEMORY = "the high watermark"
EVENT_ORDER = "event order"
NUMPY = "no NumPy view of a device tensor"

DOUBLE_MESSAGE = (
    "Cannot convert a MPS Tensor to float64 dtype as the MPS framework doesn't support "
    "float64. Please use float32 instead."
)
_TORCH_DIR = str(Path(torch.__file__).resolve().parent)
_OWN_DIR = str(Path(__file__).resolve().parent)
_SKIPPED = (_TORCH_DIR, _OWN_DIR, str(Path(sys.modules["contextlib"].__file__).parent))


class EmulatedMpsError(Exception):
    """Mixed into the exception raised, so a reader knows the emulator raised it."""

    rule: str = ""
    where: str = ""


class EmulatedMpsTypeError(EmulatedMpsError, TypeError):
    """A TypeError, as MPS raises for float64 (so the failure is classed ``dtype``)."""


class EmulatedMpsRuntimeError(EmulatedMpsError, RuntimeError):
    """A RuntimeError, as MPS raises for the other rules (OOM, devices, watermarks)."""


def where() -> str:
    """The innermost frame outside torch, the standard library's contextlib and the
    emulator: ``in forward (examples/my_model.py line 12)``."""
    frame = sys._getframe(1)
    while frame is not None:
        path = os.path.realpath(frame.f_code.co_filename)
        name = frame.f_code.co_filename
        if name in ("<string>", "<stdin>"):  # code given to python itself (-c, a pipe)
            return f"in {frame.f_code.co_name} ({name} line {frame.f_lineno})"
        if not name.startswith("<") and not path.startswith(_SKIPPED):
            try:
                shown = os.path.relpath(path)
            except ValueError:
                shown = path
            shown = path if shown.startswith("..") else shown
            return f"in {frame.f_code.co_name} ({shown} line {frame.f_lineno})"
        frame = frame.f_back
    return "inside torch"


def broken(kind: type[EmulatedMpsError], rule: str, message: str) -> EmulatedMpsError:
    """The exception for ``rule``: the rule and where first (a message cut short keeps
    them), then MPS's own ``message``."""
    place = where()
    error = kind(f"[MPS emulator: {rule}, {place}] {message}")
    error.rule, error.where = rule, place
    return error


def is_double(dtype: torch.dtype | None) -> bool:
    return dtype in (torch.float64, torch.complex128)
