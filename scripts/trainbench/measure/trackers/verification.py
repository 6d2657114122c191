"""Verification trackers: where tensors live after the first step, whether autocast
really ran, and which warnings (MPS CPU fallback, autocast disabled) were raised.
"""

from __future__ import annotations

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


class AutocastProbe:
    """Records the output dtype of the first Linear/Conv layer during one step, to
    prove autocast really ran (MPS can disable it silently)."""

    def __init__(self, model):
        import torch

        self.dtype = None
        self._handle = None
        for module in model.modules():
            if isinstance(module, (torch.nn.Linear, torch.nn.Conv2d, torch.nn.Conv1d)):
                self._handle = module.register_forward_hook(self._hook)
                break

    def _hook(self, module, inputs, output) -> None:
        import torch

        if self.dtype is None and isinstance(output, torch.Tensor):
            self.dtype = output.dtype

    def remove(self) -> None:
        if self._handle is not None:
            self._handle.remove()
            self._handle = None


def autocast_facts(amp, autocast_flag: bool | None, probe: AutocastProbe) -> dict:
    """Autocast requested vs really active in step 0 (flag inside the region and the
    first layer's output dtype)."""
    import torch

    wanted = getattr(torch, amp.dtype) if amp.enabled else None
    return {
        "autocast_requested": amp.enabled,
        "autocast_enabled_in_region": bool(autocast_flag),
        "autocast_output_dtype": str(probe.dtype).replace("torch.", "") if probe.dtype else None,
        "autocast_active": bool(amp.enabled and autocast_flag and probe.dtype == wanted),
    }
