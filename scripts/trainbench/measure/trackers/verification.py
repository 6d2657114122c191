"""Verification trackers: where tensors live after the first step, whether autocast
really ran, and which warnings (MPS CPU fallback, autocast disabled) were raised.
"""

from __future__ import annotations

import functools
import re
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field


def _device_types(tensors) -> list[str]:
    return sorted({t.device.type for t in tensors})


def verify_placement(model, optimizer, batch_tensors: dict, expected: str) -> dict:
    """Where parameters, buffers, batch tensors and optimizer state live, after step 1."""
    import torch

    state_tensors = [
        v
        for state in optimizer.state.values()
        for v in state.values()
        if isinstance(v, torch.Tensor)
    ]
    # Optimizer "step" counters may live on the CPU by design (capturable=False).
    state_tensors = [t for t in state_tensors if t.dim() > 0]
    facts = {
        "expected": expected,
        "parameters": _device_types(model.parameters()),
        "buffers": _device_types(model.buffers()),
        "optimizer_state": _device_types(state_tensors),
        "batch": {
            name: t.device.type for name, t in batch_tensors.items() if isinstance(t, torch.Tensor)
        },
    }
    checks = {
        "parameters_on_device": facts["parameters"] == [expected],
        "buffers_on_device": all(d == expected for d in facts["buffers"]),
        "optimizer_state_on_device": all(d == expected for d in facts["optimizer_state"]),
        "batch_on_device": all(d == expected for d in facts["batch"].values()),
    }
    facts["checks"] = checks
    facts["all_on_device"] = all(checks.values())
    return facts


FALLBACK_RE = re.compile(
    r"The operator '([^']+)' is not currently supported on the MPS backend and will fall back"
)
AUTOCAST_DISABLED_RE = re.compile(r"autocast.*(not supported|Disabling autocast)", re.IGNORECASE)


@dataclass
class WarningLog:
    fallback_ops: list[str] = field(default_factory=list)
    autocast_disabled: list[str] = field(default_factory=list)
    other: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {
            "cpu_fallback_ops": sorted(set(self.fallback_ops)),
            "autocast_disabled_warnings": self.autocast_disabled[:5],
            "other_warnings": sorted(set(self.other))[:20],
        }


@contextmanager
def capture_warnings() -> Iterator[WarningLog]:
    """Record every warning (MPS CPU-fallback warnings are emitted once per process
    unless warn_always is on) and still show them in the log."""
    import torch

    log = WarningLog()
    previous = torch.is_warn_always_enabled()
    torch.set_warn_always(True)
    original_show = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):
        text = str(message)
        match = FALLBACK_RE.search(text)
        if match:
            log.fallback_ops.append(match.group(1))
        elif AUTOCAST_DISABLED_RE.search(text):
            log.autocast_disabled.append(text)
        else:
            log.other.append(f"{category.__name__}: {text[:200]}")
        original_show(message, category, filename, lineno, file, line)

    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = show
        try:
            yield log
        finally:
            warnings.showwarning = original_show
            torch.set_warn_always(previous)


def _probed_layers() -> tuple[type, ...]:
    """Layers whose ops autocast casts to its lower precision on every device (linear,
    convolutions, transposed convolutions; attention through its linear maps). Not
    RNNs or Bilinear: whether autocast casts them depends on the device (a GRU stays
    float32 under the CPU's bf16 autocast), so their dtype cannot say whether autocast
    ran."""
    import torch

    nn = torch.nn
    return (
        nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.ConvTranspose1d, nn.ConvTranspose2d,
        nn.ConvTranspose3d, nn.MultiheadAttention,
    )  # fmt: skip


class AutocastProbe:
    """Records, during one step, the output dtype of the first layer autocast casts
    on every device (Linear, convolution, attention) that runs, to prove autocast really ran
    (MPS can disable it silently). Every such layer is watched, not only the first
    one defined: a layer defined but never called (nn.MultiheadAttention's out_proj,
    whose weight it uses without calling it, is the first Linear of every
    nn.TransformerEncoder) would leave the probe blind and autocast reported as not
    active. ``layer`` names the one that answered; None when none ran."""

    def __init__(self, model):
        self.dtype = None
        self.layer: str | None = None
        self._handles = [
            module.register_forward_hook(functools.partial(self._hook, name))
            for name, module in model.named_modules()
            if isinstance(module, _probed_layers())
        ]

    def _hook(self, name: str, module, inputs, output) -> None:
        import torch

        first = output[0] if isinstance(output, (tuple, list)) and output else output
        if self.dtype is None and isinstance(first, torch.Tensor) and first.is_floating_point():
            self.dtype = first.dtype
            self.layer = name or type(module).__name__

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []


def autocast_facts(amp, autocast_flag: bool | None, probe: AutocastProbe) -> dict:
    """Autocast requested vs really active in step 0: the flag inside the region and
    the output dtype of the first layer autocast casts that ran (its name beside it).
    Where no such layer ran (a model of functional ops only), the flag alone decides
    and ``autocast_probe`` says so."""
    import torch

    wanted = getattr(torch, amp.dtype) if amp.enabled else None
    seen = probe.dtype is not None
    return {
        "autocast_requested": amp.enabled,
        "autocast_enabled_in_region": bool(autocast_flag),
        "autocast_output_dtype": str(probe.dtype).replace("torch.", "") if seen else None,
        "autocast_probe_layer": probe.layer,
        "autocast_probe": "the output dtype of the first Linear, convolution or attention "
        "layer to run in step 0, and the autocast flag inside the step"
        if seen
        else "no Linear, convolution or attention layer ran in step 0: the autocast flag "
        "inside the step alone",
        "autocast_active": bool(
            amp.enabled and autocast_flag and (probe.dtype == wanted if seen else True)
        ),
    }
