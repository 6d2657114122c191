"""Workflow overhead, the synthetic per-step losses and float64 references: what a real
run of the synthetic matrix would give the parity test (docs/statistics.md, "Parity").

Every ok training record gets ``result.steps`` of its own length (``steps_per_epoch``
at its batch size x epochs: seconds, samples and losses per step), and its epochs'
``train_loss`` and the task's ``final_loss`` become the means of those losses, as in
:mod:`trainbench.measure.training`. Repeat k of every device of a workload and batch size shares
one loss curve (same start, same batches: ``run_seed``), which is also that repeat's
float64 reference; each device strays from it by its own small arithmetic error, which
grows with the step as training amplifies it. Each repeat whose baseline and another
device finished ok gets a reference record (``results/references/...``) with the
curve's first ``report.parity_reference.steps`` steps, as ``rule run_reference`` writes.
"""

from __future__ import annotations

import copy
import math

import numpy as np

# Relative float32 error of each device's loss at step 0 (it grows by e per GROWTH steps).
DEVICE_ERROR = {"cpu-t1": 3e-7, "cpu-t2": 4e-7, "cuda": 2e-6, "mps": 2e-6}
GROWTH = 25.0
MAX_ERROR = 0.05


def steps_per_epoch(template: dict, batch_size: int) -> int:
    """Steps of one epoch at ``batch_size``: the template's at its own batch size, scaled."""
    settings = template["result"]["settings"]
    steps = settings["steps_per_epoch"] * template["cell"]["batch_size"] / batch_size
    return max(1, int(steps))


def loss_curve(levels: list[float], steps: int, seed: list[int]) -> list[list[float]]:
    """One repeat's per-step losses (one list per epoch) around the epochs' mean ``levels``:
    falling within each epoch, with batch-to-batch noise."""
    rng = np.random.default_rng(seed)
    slope = np.linspace(0.1, -0.1, steps)
    return [
        (level * (1 + slope) * (1 + 0.05 * rng.standard_normal(steps))).tolist() for level in levels
    ]


def device_losses(curve: list[list[float]], device: str, seed: list[int]) -> list[list[float]]:
    """``curve`` as the device computes it: its relative error times e^(step / GROWTH)."""
    rng = np.random.default_rng(seed)
    base = DEVICE_ERROR.get(device, DEVICE_ERROR["cuda"])
    out, step = [], 0
    for epoch in curve:
        growth = np.exp((step + np.arange(len(epoch))) / GROWTH)
        error = np.clip(base * growth * rng.standard_normal(len(epoch)), -MAX_ERROR, MAX_ERROR)
        out.append((np.asarray(epoch) * (1 + error)).tolist())
        step += len(epoch)
    return out


def set_steps(result: dict, losses: list[list[float]], batch_size: int) -> None:
    """``result.steps`` (seconds, samples, losses per step) of ``losses``' length, the
    settings' steps per epoch, and the epochs' and task's losses from them. The step
    times follow the template's pattern at the record's own (scaled) throughput."""
    steps = result["steps"]
    pattern = [s for epoch in steps.get("seconds") or [] for s in epoch] or [1.0]
    speed = (result.get("timed") or {}).get("samples_per_s")
    scale = (batch_size / speed if speed else 0.1) / (sum(pattern) / len(pattern))
    seconds, i = [], 0
    for epoch in losses:
        seconds.append([pattern[(i + j) % len(pattern)] * scale for j in range(len(epoch))])
        i += len(epoch)
    steps.update(seconds=seconds, samples=[batch_size] * i, losses=losses)
    result["settings"]["steps_per_epoch"] = len(losses[0])
    for epoch, values in zip(result.get("epochs") or [], losses, strict=False):
        epoch["train_loss"] = math.fsum(values) / len(values)
    if result.get("epochs") and isinstance(result.get("task"), dict):
        result["task"]["final_loss"] = result["epochs"][-1]["train_loss"]


def reference_record(baseline: dict, curve: list[list[float]], steps: int) -> dict:
    """The float64 reference record of a repeat (what ``run_reference`` writes through the
    launcher), made from the repeat's baseline record: its first ``steps`` steps."""
    record = copy.deepcopy(baseline)
    losses = curve[0][:steps]
    model = (baseline.get("result") or {}).get("model")
    record.update(backend="cpu", numerics=None, warnings=None)
    record["spec"] = {**record["spec"], "reference": {"dtype": "float64", "steps": steps}}
    record["result"] = {
        "kind": "reference",
        "dtype": "float64",
        "loss_dtype": "float64",
        "requested_steps": steps,
        "steps": {"losses": [losses]},
        "steps_per_epoch": len(curve[0]),
        "seconds": 0.05 * len(losses),
        "model": model,
        "method": "synthetic: the repeat's loss curve, which every device's losses stray from",
    }
    return record
