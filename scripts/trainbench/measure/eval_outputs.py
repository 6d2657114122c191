"""What evaluation parity compares: the leaves of ``evaluate``'s outputs, their errors
against the float64 reference, and the test fault that corrupts them
(:mod:`trainbench.measure.eval_parity` runs the passes; :mod:`trainbench.common.eval_envelope`
judges the errors)."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from trainbench.measure.canary import relative_error
from trainbench.measure.data import host_float64
from trainbench.measure.parts_contract import CONTRACT, BadInputError, entry_name

TINY = 1e-30


def leaves(value: Any, path: str = "outputs") -> Iterator[tuple[str, Any]]:
    """(path, leaf) of every tensor, array or number in nested tuples, lists, dicts."""
    if isinstance(value, torch.Tensor | np.ndarray | int | float | bool):
        yield path, value
    elif isinstance(value, dict):
        for key in value:
            yield from leaves(value[key], f"{path}.{key}")
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            yield from leaves(item, f"{path}[{i}]")


def as_tensor(value: Any) -> torch.Tensor:
    """A leaf as a CPU tensor (numbers and arrays included)."""
    if isinstance(value, torch.Tensor):
        return value.detach().cpu()
    return torch.as_tensor(np.asarray(value))


def relative_rmse(out: torch.Tensor, ref: torch.Tensor) -> float:
    """‖out − ref‖₂ / ‖ref‖₂ in float64 (the relative RMSE; 0 for two empty or two
    zero tensors); infinity when ``out`` is not finite or its shape differs."""
    got = host_float64(out)  # never a cast on the device, nor in the copy out (MPS)
    want = host_float64(ref)
    if got.shape != want.shape or not bool(torch.isfinite(got).all()):
        return math.inf
    if got.numel() == 0:
        return 0.0
    difference = float(torch.linalg.vector_norm(got - want))
    scale = float(torch.linalg.vector_norm(want))
    if difference == 0.0:
        return 0.0
    return difference / max(scale, TINY)


def compare_outputs(device: Any, reference: Any, floor: Any) -> dict:
    """Per floating leaf: its elements, the device's relative RMSE against the float64
    reference (``error``), the CPU float32 evaluation's (``floor``), and the canary's
    max-norm error of the device's (``max_error``, for comparison with a fixed-tolerance
    rule), each None where not finite; any integer leaf that differs, or a leaf on one
    side only."""
    got, want, low = dict(leaves(device)), dict(leaves(reference)), dict(leaves(floor))
    outputs, mismatched = [], []
    for path in sorted(set(got) | set(want)):
        if path not in got or path not in want:
            mismatched.append(f"{path} on one side only")
            continue
        a, b = as_tensor(got[path]), as_tensor(want[path])
        if a.is_floating_point() or b.is_floating_point():
            f = as_tensor(low[path]) if path in low else None
            outputs.append({
                "path": path, "elements": int(b.numel()), "error": _finite(relative_rmse(a, b)),
                "floor": _finite(relative_rmse(f, b)) if f is not None else None,
                "max_error": _finite(relative_error(a, b)),
            })  # fmt: skip
        elif a.shape != b.shape or not torch.equal(a, b):
            mismatched.append(f"{path} (integer) differs")
    return {"outputs": outputs, "outputs_compared": len(got), "mismatched": mismatched}


def _finite(value: float) -> float | None:
    """``value``, or None where it is not finite (a record holds no infinities)."""
    return value if math.isfinite(value) else None


def check_same_structure(device: Any, reference: Any, ctx: Any, key: str) -> None:
    """``evaluate`` gave the same structure on the device and in the reference (the same
    output paths, each of the same shape and kind): else its result depends on where it
    ran, and the two cannot be compared."""

    def shapes(value: Any) -> dict[str, tuple]:
        found = {}
        for path, leaf in leaves(value, key):
            tensor = leaf if isinstance(leaf, torch.Tensor) else torch.as_tensor(np.asarray(leaf))
            found[path] = (tuple(tensor.shape), tensor.is_floating_point())
        return found

    got, want = shapes(device), shapes(reference)
    differs = [
        f"{path}: {got.get(path, 'absent')} on the device, {want.get(path, 'absent')} in the reference"
        for path in sorted(set(got) | set(want))
        if got.get(path) != want.get(path)
    ]
    if differs:
        raise BadInputError(
            f"{entry_name(ctx)}: evaluate(model, loader, ctx) returned {key} of another "
            f"structure on the device than in the float64 reference on the CPU "
            f"({'; '.join(differs[:3])}{' ...' if len(differs) > 3 else ''}) (shape, floating). "
            f"Fix: return the same {key} wherever it runs, e.g. no device-dependent keys "
            f"or shapes ({CONTRACT})."
        )


def corrupt_outputs(value: Any, size: float) -> Any:
    """The test fault ``eval_output_error``: ``value`` with every floating tensor or
    array multiplied by 1 ± ``size`` on a fraction of its tiles
    (:func:`trainbench.measure.numeric_fault.tile_factors`); training is untouched."""
    from trainbench.measure.numeric_fault import corrupt_

    if isinstance(value, torch.Tensor) and value.is_floating_point():
        return corrupt_(value.detach().clone(), size)
    if isinstance(value, np.ndarray) and np.issubdtype(value.dtype, np.floating):
        return corrupt_(torch.from_numpy(value.copy()), size).numpy()
    if isinstance(value, float):
        return value * (1 + size)
    if isinstance(value, dict):
        return {k: corrupt_outputs(v, size) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(corrupt_outputs(v, size) for v in value)
    return value
