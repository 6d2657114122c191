"""The float64 reference of a cell's first training steps, against which the parity
test measures how far each device's training drifts (docs/statistics.md, "Parity").

Repeat k of every device of a workload starts from the same weights and sees the same
batches (they share ``run_seed``), so their per-step training losses differ only by
arithmetic — until training, which amplifies every difference, has turned the
rounding into a change as large as a change of seed. A run of the same steps in
float64 is the yardstick: how far the baseline's float32 losses lie from it says how
far correct arithmetic of that precision drifts on this workload, at each step; the
parity test scales that by each device's precision (``trainbench.measure.precision``).

One reference per workload, batch size and repeat, on the CPU (float64 exists
everywhere there, not on MPS): the baseline cell's spec with ``reference: {dtype,
steps}`` added, run by the launcher like a cell (a fresh process, a record, a
timeout) but untimed and without the canary. It is made only where it is needed —
another device of the same repeat finished ``ok`` with losses not bit-identical to
the baseline's — so a machine with one device pays nothing.
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Sequence
from pathlib import Path

from trainbench import config as tbconfig
from trainbench.common.records import atomic_write_json
from trainbench.measure.reference_run import REFERENCE_DTYPE

SKIPPED = "skipped"


def reference_spec(
    config: dict, cell: tbconfig.Cell, steps: int, data_path: str | None = None
) -> dict:
    """The spec of ``cell``'s float64 reference: the cell's own spec (workload
    settings, seeds, data) on the CPU with the config's CPU settings, autocast off,
    and ``reference`` set. ``cell`` is the baseline's cell of that repeat."""
    variant = tbconfig.find_variant(config, cell.device)
    spec = tbconfig.cell_spec(config, cell, data_path=data_path)
    if variant.backend != "cpu":
        spec["backend"] = "cpu"
        spec["device_settings"] = copy.deepcopy(config["device_settings"]["cpu"])
        spec["device_settings"]["threads"] = None
    spec["device_settings"]["autocast"] = "off"
    spec.pop("compile", None)
    spec["faults"] = []
    spec["reference"] = {"dtype": REFERENCE_DTYPE, "steps": int(steps)}
    spec["config_hash"] = tbconfig.config_hash(spec)
    return spec


def _losses(record: dict) -> list[float] | None:
    steps = ((record.get("result") or {}).get("steps") or {}).get("losses")
    return [x for epoch in steps for x in epoch] if steps else None


def need_for_reference(baseline: dict | None, others: Sequence[dict]) -> str | None:
    """Why this repeat needs no reference (None: it needs one): the baseline did not
    finish ok, no other device finished ok, or every ok device's losses are
    bit-identical to the baseline's (parity then says ``identical``)."""
    if not baseline or baseline.get("status") != "ok":
        return "the baseline cell of this repeat has no ok record"
    ok = [r for r in others if r.get("status") == "ok"]
    if not ok:
        return "no other device of this repeat finished ok"
    base = _losses(baseline)
    if base is not None and all(_losses(r) == base for r in ok):
        return "every other device's losses are bit-identical to the baseline's"
    return None


def read_records(paths: Sequence[str | os.PathLike]) -> list[dict]:
    out = []
    for path in paths:
        with open(path) as fh:
            out.append(json.load(fh))
    return out


def write_skipped(output: str | os.PathLike, spec: dict, reason: str) -> dict:
    record = {"status": SKIPPED, "reason": reason, "cell": spec["cell"], "spec": spec}
    Path(output).parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(output, record)
    return record


def make_reference(
    spec: dict,
    baseline_record: str | os.PathLike,
    other_records: Sequence[str | os.PathLike],
    output: str | os.PathLike,
    log_path: str | os.PathLike,
) -> dict:
    """Write the reference record of one repeat: run it (through the launcher) when
    :func:`need_for_reference` says it is needed, else a ``skipped`` record with the
    reason."""
    from trainbench.launch.launcher import run_cell

    baseline = read_records([baseline_record])[0]
    reason = need_for_reference(baseline, read_records(other_records))
    if reason is not None:
        Path(log_path).parent.mkdir(parents=True, exist_ok=True)
        Path(log_path).write_text(f"trainbench reference not made: {reason}\n")
        return write_skipped(output, spec, reason)
    return run_cell(spec, output, log_path)
