"""What a workload sees while it runs inside the child process."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from trainbench.measure import faults
from trainbench.measure.devices import AmpPolicy, Device
from trainbench.measure.trackers import WarningLog


@dataclass
class RunContext:
    spec: dict
    device: Device
    torch_device: torch.device
    amp: AmpPolicy
    settings_in_force: dict
    attempt: int = 1
    fault: str | None = None
    warnings: WarningLog | None = None
    _fault_fired: bool = field(default=False, repr=False)

    @property
    def workload_settings(self) -> dict:
        return self.spec["workload_settings"]

    @property
    def batch_size(self) -> int:
        return int(self.spec["cell"]["batch_size"])

    @property
    def eval_batch_size(self) -> int:
        return int(self.workload_settings.get("eval_batch_size") or self.batch_size)

    @property
    def run_seed(self) -> int:
        return int(self.spec["run_seed"])

    @property
    def label(self) -> str:
        cell = self.spec["cell"]
        return f"{cell['workload']}/{cell['device']}/bs{cell['batch_size']}/rep{cell['rep']}"

    @property
    def loader_kwargs(self) -> dict:
        return self.device.dataloader_kwargs()

    def generator(self, offset: int = 0) -> torch.Generator:
        """A seeded CPU generator: weights and data are drawn on the CPU and then
        moved, because each device's own generator gives different numbers."""
        return torch.Generator().manual_seed(self.run_seed * 1000 + offset)

    def inject_fault(self) -> None:
        """Fire the configured test fault once (no-op without one)."""
        if self.fault and not self._fault_fired:
            self._fault_fired = True
            faults.inject(self.fault)


class DeviceUnavailable(RuntimeError):
    """The cell's device cannot be used here; the message is the reason."""


class PrecisionUnavailable(DeviceUnavailable):
    """The device exists but cannot run the cell's kernels in the requested precision
    (e.g. an LSTM under CPU bf16 autocast without the instructions oneDNN needs)."""


def check_autocast_kernels(model: torch.nn.Module, ctx: RunContext) -> None:
    """Before anything is timed: on the CPU under autocast, probe the model's kernel
    kinds in the autocast dtype (trainbench.measure.cpu_features); raises PrecisionUnavailable
    with one line naming the dtype, the kernel and the instruction set found."""
    if ctx.device.backend != "cpu" or not ctx.amp.enabled:
        return
    from trainbench.measure.cpu_features import autocast_unavailable

    reason = autocast_unavailable(model, ctx.amp.dtype)
    if reason:
        raise PrecisionUnavailable(reason)


def make_context(spec: dict, attempt: int = 1, facts: dict | None = None) -> RunContext:
    """Device set up as the spec says, seeds set, AMP policy chosen: the context a
    cell's workload runs in (the child and the benchmarks build it the same way).
    ``facts`` (if given) receives the device's facts as soon as they are known, so a
    run that fails later still records them. Raises DeviceUnavailable with the reason."""
    import random

    import numpy as np
    from trainbench.measure.devices import get_device
    from trainbench.measure.faults import active_fault

    device = get_device(spec["backend"], spec["device_settings"])
    available, reason = device.availability()
    if not available:
        raise DeviceUnavailable(reason)
    if facts is not None:
        facts["device"] = device.facts()
    settings_in_force = device.apply_settings()
    random.seed(spec["run_seed"])
    np.random.seed(spec["run_seed"])
    torch.manual_seed(spec["run_seed"])
    return RunContext(
        spec=spec,
        device=device,
        torch_device=device.torch_device(),
        amp=device.amp_policy(),
        settings_in_force=settings_in_force,
        attempt=attempt,
        fault=active_fault(spec, attempt),
    )
