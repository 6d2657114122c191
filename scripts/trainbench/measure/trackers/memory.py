"""Memory over a run: the peak (each backend's own method, named in the record) and
one snapshot per epoch, so growth epoch over epoch is visible (MPS leaks that
``current_allocated_memory`` misses show in the driver's figure)."""

from __future__ import annotations

from trainbench.measure.devices import Device


class MemoryTracker:
    """Reset the device's peak at construction; snapshot once per epoch, outside
    every timed region; the final reading names how the peak was measured."""

    def __init__(self, device: Device):
        self.device = device
        device.reset_peak_memory()
        self.initial_bytes = device.current_memory_bytes()
        self.per_epoch: list[dict] = []
        # Whether the training steps must call :meth:`sample` (a device without a peak
        # API); elsewhere the steps skip it: nothing the measurement needs.
        self.per_step = bool(getattr(device, "samples_memory_per_step", False))

    def start(self, kind: str) -> None:
        pass

    def stop(self, kind: str, seconds: float) -> None:
        pass

    def sample(self) -> None:
        """After forward, backward and optimizer step, where :attr:`per_step` (MPS: no
        peak API)."""
        self.device.sample_memory()

    def epoch_end(self, epoch: int) -> dict:
        snapshot = {"epoch": epoch, **self.device.memory_snapshot()}
        self.per_epoch.append(snapshot)
        return snapshot

    def summary(self) -> dict:
        reading = self.device.memory_reading(self.initial_bytes)
        return {
            "device": reading.as_dict(),
            "limit_bytes": self.device.memory_limit_bytes(),
            "per_epoch": self.per_epoch,
            "per_epoch_method": "after each epoch's evaluation: allocated = device tensors "
            "(CUDA memory_allocated, MPS current_allocated_memory), reserved = CUDA "
            "memory_reserved or MPS driver_allocated_memory, process RSS (psutil)",
        }
