"""The test fault ``silent_numeric_error``: the device's math silently wrong, the way
PyTorch's MPS backend has been — matmul errors of 10–30% that depend on the
allocator's state (pytorch issue 193487), wrong gradients from ``bmm`` with a
non-contiguous operand (197636), ``addcdiv`` on non-contiguous tensors breaking
Adam (118115). Nothing raises and no value becomes NaN: the run finishes ``ok`` with
numbers that are wrong, which only a comparison with a trusted reference (the
numerical canary, the parity test) can show.

For tests and for ``benchmarks/parity_power.py`` only: like every fault it is
refused unless ``launcher.allow_fault_injection`` is true, and it is active only in
the child of a cell whose ``fault_injection`` entry names it. A fault entry may carry
``size`` (default 0.1): the relative error of each wrong value.

**What goes wrong** while :func:`silent_numeric_error` is entered (the child enters it
around the canary and the workload: training and evaluation):

* **matmul family** — the outputs of ``aten.mm``, ``addmm``, ``bmm`` and ``baddbmm``,
  and so of everything that lowers to them (``@``, ``torch.matmul``, ``F.linear``,
  ``nn.Linear``, ``einsum``, in the forward *and* the backward pass), seen as rows ×
  columns (the leading dimensions flattened), are cut into tiles of one row ×
  :data:`TILE` columns; a :data:`FRACTION` of the tiles are multiplied by 1 + size or
  by 1 − size (each sign half the time). Which tiles is drawn from a generator seeded
  with the output's ``data_ptr()`` and shape: the same product written to another
  allocation is wrong elsewhere, as in issue 193487.
* **gradients** — every parameter registered in an ``nn.Module`` while the fault is
  entered gets a gradient hook: a :data:`FRACTION` of its gradient's tiles (keyed by
  the gradient's allocation) are multiplied by 1 ± size (wrong gradients, 197636;
  convolution weights included, which the matmul part does not reach).
* **optimizer updates** — ``addcdiv``/``addcdiv_`` and ``_foreach_addcdiv``/
  ``_foreach_addcdiv_`` (Adam's and AdamW's update, single-tensor and foreach) where
  a tensor operand is *non-contiguous*: the update (result − input) is wrong by 1 ±
  size on a :data:`FRACTION` of its tiles (118115). Contiguous operands — every
  parameter of the bundled workloads — are computed right, as on the real device.

Only floating tensors of :data:`CORRUPTED_DTYPES` (float32, float16, bfloat16) on the
cell's device type are touched: float64, the canary's trusted CPU reference, never
is, so on a CPU cell the canary compares wrong float32 results with a right float64
reference, as it would on MPS. The canary's matmul, linear, bmm and non-contiguous
addcdiv checks then fail at any size above ~1e-3 (their float32 tolerance is 1e-4;
measured: every faulted run of ``benchmarks/parity_power.py``, sizes 1%–100%, failed
its canary). Everything else (convolution, attention kernels, element-wise ops, the
data) is untouched, and nothing at all changes outside the context. Since the wrong
tiles follow the allocator, a faulted run is not reproducible run to run (addresses
differ between processes), like the bug it imitates.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

FAULT = "silent_numeric_error"
DEFAULT_SIZE = 0.1
FRACTION = 0.25
TILE = 16
CORRUPTED_DTYPES = (torch.float32, torch.float16, torch.bfloat16)

_aten = torch.ops.aten
MATMUL_OPS = frozenset({_aten.mm, _aten.addmm, _aten.bmm, _aten.baddbmm})
ADDCDIV_OPS = frozenset({_aten.addcdiv, _aten.addcdiv_})
FOREACH_ADDCDIV_OPS = frozenset({_aten._foreach_addcdiv, _aten._foreach_addcdiv_})
_INPLACE = frozenset({_aten.addcdiv_, _aten._foreach_addcdiv_})


def tile_factors(tensor: torch.Tensor, size: float) -> torch.Tensor:
    """The factors :func:`corrupt_` multiplies ``tensor`` by (its shape, its dtype and
    device): 1 except on a :data:`FRACTION` of the row × :data:`TILE` tiles, 1 ± size
    there, chosen by a generator seeded with the tensor's allocation and shape."""
    cols = tensor.shape[-1] if tensor.dim() else 1
    rows = tensor.numel() // max(cols, 1)
    tiles = -(-cols // TILE)
    seed = (tensor.data_ptr() // 16 * 1_000_003 + rows * 7919 + cols) % (2**63)
    gen = torch.Generator().manual_seed(seed)
    u, v = torch.rand(rows, 1, generator=gen), torch.rand(1, tiles, generator=gen)
    s, t = torch.rand(rows, 1, generator=gen), torch.rand(1, tiles, generator=gen)
    chosen = torch.remainder(u + v, 1.0) < FRACTION  # a FRACTION of the tiles, in expectation
    sign = torch.where(torch.remainder(s + t, 1.0) < 0.5, -1.0, 1.0)
    per_tile = 1.0 + size * sign * chosen
    per_col = per_tile.repeat_interleave(TILE, dim=1)[:, :cols]
    return per_col.reshape(tensor.shape).to(tensor.device, tensor.dtype)


def corrupt_(tensor: torch.Tensor, size: float) -> torch.Tensor:
    """Multiply ``tensor`` in place by :func:`tile_factors`; returns it."""
    if tensor.numel():
        tensor.mul_(tile_factors(tensor, size))
    return tensor


class NumericErrorMode(TorchDispatchMode):
    """The dispatch mode behind the fault: matmul outputs and non-contiguous addcdiv
    updates made wrong on ``device_type`` (see the module docstring)."""

    def __init__(self, size: float, device_type: str):
        super().__init__()
        self.size, self.device_type = float(size), device_type

    def touched(self, tensor) -> bool:
        """Whether the fault corrupts ``tensor``: a floating tensor of the cell's device
        type in one of :data:`CORRUPTED_DTYPES`."""
        return (
            isinstance(tensor, torch.Tensor)
            and tensor.device.type == self.device_type
            and tensor.dtype in CORRUPTED_DTYPES
        )

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        packet = func.overloadpacket
        if packet in ADDCDIV_OPS:
            return self._addcdiv(func, packet, args, kwargs)
        if packet in FOREACH_ADDCDIV_OPS:
            return self._foreach_addcdiv(func, packet, args, kwargs)
        out = func(*args, **kwargs)
        if packet in MATMUL_OPS and self.touched(out):
            corrupt_(out, self.size)
        return out

    def _wrong_update(self, result: torch.Tensor, before: torch.Tensor) -> None:
        """Make the update ``result − before`` wrong on a fraction of its tiles, in place."""
        update = result - before
        result.add_(corrupt_(update.clone(), self.size) - update)

    def _addcdiv(self, func, packet, args, kwargs):
        target, operands = args[0], [a for a in args[:3] if isinstance(a, torch.Tensor)]
        strided = any(not t.is_contiguous() for t in operands)
        if not (strided and self.touched(target)):
            return func(*args, **kwargs)
        before = target.clone()
        out = func(*args, **kwargs)
        self._wrong_update(out, before)
        return out

    def _foreach_addcdiv(self, func, packet, args, kwargs):
        selves, first, second = (list(a) for a in args[:3])
        wrong = [
            i for i, trio in enumerate(zip(selves, first, second, strict=True))
            if self.touched(trio[0]) and any(not t.is_contiguous() for t in trio)
        ]  # fmt: skip
        before = {i: selves[i].clone() for i in wrong}
        out = func(*args, **kwargs)
        results = selves if packet in _INPLACE else out
        for i in wrong:
            self._wrong_update(results[i], before[i])
        return out


class _GradientHooks:
    """A gradient hook on every parameter registered while entered (see the module
    docstring); every hook removed on exit."""

    def __init__(self, size: float, mode: NumericErrorMode):
        self.size, self.mode = size, mode
        self.handles: list = []

    def on_register(self, module: torch.nn.Module, name: str, param: Any) -> None:
        if isinstance(param, torch.Tensor) and param.requires_grad:
            self.handles.append(param.register_hook(self.hook))

    def hook(self, grad: torch.Tensor) -> torch.Tensor | None:
        if not self.mode.touched(grad):
            return None
        return corrupt_(grad.clone(), self.size)

    def __enter__(self) -> _GradientHooks:
        register = torch.nn.modules.module.register_module_parameter_registration_hook
        self.handles.append(register(self.on_register))
        return self

    def __exit__(self, *exc) -> None:
        for handle in self.handles:
            handle.remove()
        self.handles.clear()


@contextlib.contextmanager
def silent_numeric_error(size: float, device_type: str) -> Iterator[NumericErrorMode]:
    """The fault, active inside the ``with`` block on tensors of ``device_type`` (see
    the module docstring). ``size``: the relative error of each wrong value, in (0, 1]."""
    if not 0 < float(size) <= 1:
        raise ValueError(f"silent_numeric_error size must be in (0, 1], not {size!r}")
    mode = NumericErrorMode(size, device_type)
    with _GradientHooks(size, mode), mode:
        yield mode


def fault_context(ctx: Any) -> contextlib.AbstractContextManager:
    """What the child enters around the canary and the workload: the fault when the
    cell's active fault is ``silent_numeric_error`` (its entry's ``size``, default
    :data:`DEFAULT_SIZE`), else nothing."""
    from trainbench.measure.faults import active_fault_entry

    entry = active_fault_entry(ctx.spec, ctx.attempt)
    if not entry or entry.get("fault") != FAULT:
        return contextlib.nullcontext()
    size = entry.get("size")
    return silent_numeric_error(DEFAULT_SIZE if size is None else size, ctx.torch_device.type)
