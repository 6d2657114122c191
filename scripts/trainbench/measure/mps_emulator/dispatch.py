"""Device tensors of the emulated MPS: a ``torch.Tensor`` wrapper subclass that says
``mps:0`` and holds a CPU tensor, and one dispatch mode that every ATen op passes
through (``__torch_dispatch__``: below autograd and autocast, so a backward pass, the
optimizer's kernels and MPS autocast's casts all arrive here as ops).

For each op the mode checks MPS's rules (:mod:`.rules`), runs it on the CPU tensors
inside, wraps every result that MPS would hold on the device, counts each new storage in
the emulated allocator (:mod:`.allocator`) and each op that makes the host wait for the
device (:class:`SyncTally`: ``.item()``, a copy to the host, ``nonzero``, a tensor read
as a bool, an explicit synchronization).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import torch
from torch.utils._python_dispatch import TorchDispatchMode, return_and_correct_aliasing
from torch.utils._pytree import tree_leaves, tree_map
from trainbench.measure.mps_emulator import rules
from trainbench.measure.mps_emulator.allocator import EmulatedAllocator

MPS = torch.device("mps", 0)
CPU = torch.device("cpu")
aten = torch.ops.aten
# Ops that make the host wait for the device's queue (their result is read on the host).
SYNCING = {
    aten._local_scalar_dense.default: "a value read on the host (.item(), float(), a bool)",
    aten.is_nonzero.default: "a tensor read as a bool",
    aten.nonzero.default: "nonzero (its size is only known on the device)",
    aten.masked_select.default: "masked_select (its size is only known on the device)",
    aten.equal.default: "torch.equal (a bool on the host)",
}
# Ops that may take CPU tensors of any size beside device tensors (copies, index lists).
MIXED_OK = {
    aten.copy_.default,
    aten._to_copy.default,
    aten.index.Tensor,
    aten.index_put_.default,
    aten._index_put_impl_.default,
    aten.lift_fresh.default,
    aten.set_.source_Storage_storage_offset,
}


@dataclass
class SyncTally:
    """Host waits on the device: all of them, and those inside timed steps (between two
    consecutive timing events with no synchronization between them: a region's steps)."""

    total: int = 0
    kinds: Counter = field(default_factory=Counter)
    in_steps: int = 0
    steps: int = 0
    in_step_kinds: Counter = field(default_factory=Counter)
    in_step_where: Counter = field(default_factory=Counter)
    _since_event: list | None = None  # syncs since the last event of an open region

    def wait(self, kind: str, explicit: bool = False) -> None:
        self.total += 1
        self.kinds[kind] += 1
        if explicit:  # a synchronization closes (or opens) a region
            self._since_event = None
        elif self._since_event is not None:
            self._since_event.append((kind, rules.where()))

    def event_recorded(self) -> None:
        if self._since_event is not None:
            self.steps += 1
            self.in_steps += len(self._since_event)
            for kind, place in self._since_event:
                self.in_step_kinds[kind] += 1
                self.in_step_where[place] += 1
        self._since_event = []

    def facts(self) -> dict:
        return {
            "total": self.total,
            "kinds": dict(self.kinds),
            "timed_steps_seen": self.steps,
            "in_timed_steps": self.in_steps,
            "in_timed_steps_kinds": dict(self.in_step_kinds),
            "in_timed_steps_where": dict(self.in_step_where.most_common(5)),
        }


class MpsTensor(torch.Tensor):
    """A tensor on the emulated ``mps:0``; its values live in ``elem`` (CPU)."""

    elem: torch.Tensor
    __torch_function__ = torch._C._disabled_torch_function_impl

    @staticmethod
    def __new__(cls, elem: torch.Tensor) -> MpsTensor:
        wrapper = torch.Tensor._make_wrapper_subclass(
            cls,
            elem.size(),
            strides=elem.stride(),
            storage_offset=elem.storage_offset(),
            dtype=elem.dtype,
            layout=elem.layout,
            device=MPS,
            requires_grad=elem.requires_grad,
        )
        wrapper.elem = elem
        return wrapper

    def __repr__(self, *, tensor_contents=None) -> str:
        text = repr(self.elem)
        return text[:-1] + ", device='mps:0')"

    def __tensor_flatten__(self):
        return ["elem"], None

    @staticmethod
    def __tensor_unflatten__(inner, meta, outer_size, outer_stride):
        return MpsTensor(inner["elem"])

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        # Reached only where the emulator's mode is not on the stack (another thread).
        return current().handle(func, args, kwargs or {})

    def new_tensor(self, data, dtype=None, device=None, requires_grad=False, **_kwargs):
        """On MPS, ``new_tensor`` builds on the device (its C++ path skips the dispatch
        mode, so it is built on the host and copied in, through the rules)."""
        device = self.device if device is None else torch.device(device)
        made = torch.tensor(data, dtype=dtype or self.dtype).to(device)
        return made.requires_grad_(requires_grad)

    def tolist(self):
        current().syncs.wait("a copy to the host (.tolist())")
        return self.elem.tolist()

    def numpy(self, *, force: bool = False):
        raise rules.broken(
            rules.EmulatedMpsTypeError,
            rules.NUMPY,
            "can't convert mps:0 device type tensor to numpy. Use Tensor.cpu() to copy the "
            "tensor to host memory first.",
        )

    def __array__(self, dtype=None, copy=None):
        return self.numpy()

    def __reduce_ex__(self, protocol):
        """Pickled (torch.save) as its host values, loaded back onto the device."""
        return rebuild_on_device, (self.elem.detach(), self.requires_grad)


_CURRENT: list[MpsDispatch] = []


def rebuild_on_device(elem: torch.Tensor, requires_grad: bool) -> torch.Tensor:
    tensor = elem.to(MPS) if _CURRENT else elem
    return tensor.requires_grad_(requires_grad)


def current() -> MpsDispatch:
    return _CURRENT[-1]


def _unwrap(value):
    return value.elem if isinstance(value, MpsTensor) else value


def _device_of(value) -> torch.device | None:
    if value is None:
        return None
    return value if isinstance(value, torch.device) else torch.device(value)


class MpsDispatch(TorchDispatchMode):
    """The mode every op passes through while the emulator is installed."""

    def __init__(self, allocator: EmulatedAllocator):
        super().__init__()
        self.allocator = allocator
        self.syncs = SyncTally()
        self.ops = 0
        _CURRENT.append(self)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return self.handle(func, args, kwargs or {})

    # -- one op ------------------------------------------------------------------------

    def handle(self, func, args, kwargs):
        self.ops += 1
        leaves = tree_leaves((args, kwargs))
        on_device = any(isinstance(x, MpsTensor) for x in leaves)
        target = _device_of(kwargs.get("device"))
        if (
            target is not None
            and target.type == "cuda"
            or any(isinstance(x, torch.Tensor) and x.device.type == "cuda" for x in leaves)
        ):
            raise rules.broken(
                rules.EmulatedMpsRuntimeError, rules.CUDA_CALL, f"{func} on a CUDA tensor"
            )
        if not on_device and (target is None or target.type != "mps"):
            if func is aten._pin_memory.default or kwargs.get("pin_memory"):
                self._refuse_pinned()
            return func(*args, **kwargs)
        return self._on_device(func, args, kwargs, target, leaves)

    def _on_device(self, func, args, kwargs, target, leaves):
        if func is aten._pin_memory.default or kwargs.get("pin_memory"):
            self._refuse_pinned()
        if func is aten.copy_.default:
            return self._copy(args[0], args[1], args, kwargs)
        if func not in MIXED_OK:
            self._check_one_device(func, leaves)
        to_host = target is not None and target.type == "cpu"
        if func is aten._to_copy.default:
            self._check_cast(args[0], kwargs, to_host)
        if func in SYNCING:
            self.syncs.wait(SYNCING[func])
        plain_kwargs = {
            k: (CPU if k == "device" else tree_map(_unwrap, v)) for k, v in kwargs.items()
        }
        if target is None:
            plain_kwargs.pop("device", None)
        out = func(*tree_map(_unwrap, args), **plain_kwargs)
        if to_host:
            self.syncs.wait("a copy to the host (.cpu(), .to('cpu'))")
            return out
        wrapped = tree_map(self._wrap, out)
        if any(isinstance(x, MpsTensor) for x in tree_leaves(args)):
            return return_and_correct_aliasing(func, args, kwargs, wrapped)
        return wrapped

    def _wrap(self, value):
        if not isinstance(value, torch.Tensor) or isinstance(value, MpsTensor):
            return value
        if rules.is_double(value.dtype):
            raise rules.broken(rules.EmulatedMpsTypeError, rules.FLOAT64, rules.DOUBLE_MESSAGE)
        wrapper = MpsTensor(value)
        if value.numel():
            self.allocator.track(value)
        return wrapper

    # -- rules -------------------------------------------------------------------------

    def _refuse_pinned(self):
        raise rules.broken(
            rules.EmulatedMpsRuntimeError,
            rules.PINNED,
            'Attempted to set the storage of a tensor on device "cpu" to a storage on '
            'different device "mps:0" (pinned memory is not supported on MPS: pytorch#86060)',
        )

    def _check_one_device(self, func, leaves):
        for value in leaves:
            if (
                isinstance(value, torch.Tensor)
                and not isinstance(value, MpsTensor)
                and value.dim() > 0
            ):
                raise rules.broken(
                    rules.EmulatedMpsRuntimeError,
                    rules.ONE_DEVICE,
                    f"Expected all tensors to be on the same device, but found at least two "
                    f"devices, mps:0 and cpu! ({func})",
                )

    def _check_cast(self, source, kwargs, to_host: bool) -> None:
        dtype = kwargs.get("dtype")
        if not isinstance(source, MpsTensor) or not rules.is_double(dtype):
            return
        if to_host:
            raise rules.broken(
                rules.EmulatedMpsTypeError,
                rules.COPY_OUT_CAST,
                f"{rules.DOUBLE_MESSAGE} (a copy out of MPS cast to float64 in the same "
                "call: raises on torch 2.13, writes nothing on 2.14, pytorch#197715; copy "
                "to the CPU first, then cast)",
            )
        raise rules.broken(rules.EmulatedMpsTypeError, rules.FLOAT64, rules.DOUBLE_MESSAGE)

    def _copy(self, dst, src, args, kwargs):
        if isinstance(dst, MpsTensor):
            if isinstance(src, torch.Tensor) and src.device.type == "cuda":
                raise rules.broken(rules.EmulatedMpsRuntimeError, rules.CUDA_CALL, "copy from CUDA")
            dst.elem.copy_(_unwrap(src), *args[2:], **kwargs)
            return dst
        # a copy out of the device into a host tensor
        if rules.is_double(dst.dtype) and not rules.is_double(src.dtype):
            raise rules.broken(
                rules.EmulatedMpsTypeError,
                rules.COPY_OUT_CAST,
                f"{rules.DOUBLE_MESSAGE} (a copy out of MPS into a float64 host tensor: "
                "raises on torch 2.13, writes nothing on 2.14, pytorch#197715)",
            )
        self.syncs.wait("a copy to the host (copy_)")
        dst.copy_(src.elem, *args[2:], **kwargs)
        return dst


def _attention_math(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):  # fmt: skip
    """scaled_dot_product_attention by its math path (MPS's own kernel choice happens
    in C++ by device type, which a CPU build has no entry for). Under MPS autocast the
    op is a lower-precision one: its inputs are cast first, as autocast would."""
    if torch.is_autocast_enabled("mps"):
        dtype = torch.get_autocast_dtype("mps")

        def cast(t):
            return t.to(dtype) if t is not None and t.is_floating_point() else t

        query, key, value, attn_mask = cast(query), cast(key), cast(value), cast(attn_mask)
        with torch.autocast("mps", enabled=False):
            return _attention_math(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)  # fmt: skip
    return aten._scaled_dot_product_attention_math(
        query, key, value, attn_mask, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa
    )[0]


def attention_for_device_tensors(original):
    """``F.scaled_dot_product_attention`` that takes the math path for device tensors
    (patched over the module attribute, so nested callers such as
    ``multi_head_attention_forward`` and transformers find it too)."""

    def scaled_dot_product_attention(*args, **kwargs):
        if any(isinstance(x, MpsTensor) for x in tree_leaves((args, kwargs))):
            return _attention_math(*args, **kwargs)
        return original(*args, **kwargs)

    return scaled_dot_product_attention


def factory_for_device_tensors(original):
    """``torch.tensor`` / ``torch.as_tensor`` that build a device tensor on the host and
    copy it in through the dispatch mode (their C++ path skips dispatch modes, and a CPU
    build has no MPS kernel to fall to): MPS's rules apply to the copy."""

    def factory(data, *args, dtype=None, device=None, **kwargs):
        target = _device_of(device)
        if target is None or target.type != "mps":
            return original(data, *args, dtype=dtype, device=device, **kwargs)
        grad = kwargs.pop("requires_grad", False)
        made = original(data, *args, dtype=dtype, **kwargs)
        return made.to(target).requires_grad_(grad) if grad else made.to(target)

    factory.__name__ = factory.__qualname__ = original.__name__
    factory.__doc__ = original.__doc__
    return factory
