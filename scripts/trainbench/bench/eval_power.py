"""How small an evaluation fault the evaluation-parity rule catches, and at which
allowance (``benchmarks/parity_power.py``, ``benchmarks/false_alarm.py``).

A column with an **evaluation fault sweep** (``Column.eval_sweep``) runs clean cells
whose evaluation parity also applies the test fault ``eval_output_error`` (1 ± ε on a
quarter of the outputs' tiles) at every size ε of the sweep, each apart, to copies of
the device's outputs after the clean comparison, and records every output's errors
(:func:`trainbench.measure.eval_parity.fault_sweep`). Each run row keeps its clean outputs
(``eval_outputs``) and the faulted ones (``eval_fault_sweep``): the device's relative
RMSE against float64, the network's float32 floor, and the canary's max-norm error.

Here they are judged again, with the cell's own rule
(:func:`trainbench.common.eval_envelope.judge`) at the allowances of
:data:`ALLOWANCE_CHOICES` (the configured one among them), and with **the earlier rule**
— the worst max-norm error within a fixed tolerance per precision (float32 1e-4, TF32
5e-3, float16 1e-2, bfloat16 5e-2; the canary's), in the class it read (a CUDA cell's
cuDNN TF32 not in it), without the re-check with TF32 off it ran where a CUDA float32
cell failed (that needs the device again) — for comparison. Per workload × batch
size × column: the clean outputs' largest error ÷ envelope (a value above 1 is a false
alarm), and the smallest ε caught **in every repeat** under each rule.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from trainbench.common.eval_envelope import ALLOWANCES, judge

# The rule's allowances m_p, and each class's halved and doubled: which catches smaller
# faults, and at what cost in false alarms.
ALLOWANCE_CHOICES = (1.0, 0.5, 2.0)
EARLIER_TOLERANCES = {"float32": 1e-4, "tf32": 5e-3, "float16": 1e-2, "bfloat16": 5e-2}


def earlier_class(run: Mapping) -> str:
    """The precision class the earlier rule judged a run's evaluation in: its autocast
    dtype, TF32 where cuBLAS's TF32 matmuls were allowed, else float32 (a CUDA cell's
    cuDNN TF32 was not in that class)."""
    if run.get("autocast_dtype"):
        return str(run["autocast_dtype"])
    if run.get("tf32_matmul") or run.get("float32_matmul_precision") == "high":
        return "tf32"
    return "float32"


def earlier_catches(outputs: Sequence[Mapping], run: Mapping) -> bool:
    """Whether the earlier fixed-tolerance rule fails these outputs."""
    tolerance = EARLIER_TOLERANCES[earlier_class(run)]
    worst = [o.get("max_error") for o in outputs]
    return any(w is None or not math.isfinite(w) or w > tolerance for w in worst)


def _allowances(factor: float) -> dict:
    return {name: factor * m for name, m in ALLOWANCES.items()}


def _label(factor: float) -> str:
    return "m" if factor == 1 else f"m × {factor:g}"


def _smallest(sizes: Sequence[float], caught: Mapping[float, list[bool]]) -> float | None:
    """The smallest ε caught in every repeat, from which every larger ε is caught too."""
    found = None
    for size in sorted(sizes, reverse=True):
        if caught.get(size) and all(caught[size]):
            found = size
        else:
            break
    return found


def entry(runs: Sequence[Mapping]) -> dict:
    """The power of the rule on one workload × batch size × column's runs (each with
    ``eval_outputs`` and ``eval_fault_sweep``)."""
    ok = [r for r in runs if r.get("eval_outputs") and r.get("eval_fault_sweep")]
    precision = ok[0].get("eval_parity_precision") or "float32"
    sizes = sorted({s["size"] for r in ok for s in r["eval_fault_sweep"]})
    out = {"repeats": len(ok), "precision": precision, "earlier_class": earlier_class(ok[0]),
           "sizes": sizes, "allowances": {}}  # fmt: skip
    for choice in ALLOWANCE_CHOICES:
        allowances = _allowances(choice)
        clean = [judge(r["eval_outputs"], precision, allowances)["ratio"] for r in ok]
        caught = {size: [judge(s["outputs"], precision, allowances)["status"] == "fail"
                         for r in ok for s in r["eval_fault_sweep"] if s["size"] == size]
                  for size in sizes}  # fmt: skip
        out["allowances"][_label(choice)] = {
            "clean_ratio": max((c for c in clean if c is not None), default=None),
            "false_alarms": sum(c is None or c > 1 for c in clean),
            "smallest_caught": _smallest(sizes, caught),
            "caught": {str(s): sum(v) for s, v in caught.items()},
        }
    earlier = {size: [earlier_catches(s["outputs"], r) for r in ok
                      for s in r["eval_fault_sweep"] if s["size"] == size] for size in sizes}  # fmt: skip
    out["earlier"] = {
        "false_alarms": sum(earlier_catches(r["eval_outputs"], r) for r in ok),
        "smallest_caught": _smallest(sizes, earlier),
    }
    errors = [o["error"] for r in ok for o in r["eval_outputs"] if o.get("error") is not None]
    floors = [o["floor"] for r in ok for o in r["eval_outputs"] if o.get("floor") is not None]
    out["clean_error_max"] = max(errors, default=None)
    out["floor_min"], out["floor_max"] = min(floors, default=None), max(floors, default=None)
    return out


def eval_power(runs: Sequence[Mapping]) -> list[dict]:
    """One :func:`entry` per workload × batch size × column whose runs carry a sweep."""
    keys = dict.fromkeys((r["workload"], r["batch_size"], r["column"]) for r in runs
                         if r.get("eval_fault_sweep"))  # fmt: skip
    out = []
    for workload, bs, column in keys:
        mine = [
            r
            for r in runs
            if (r["workload"], r["batch_size"], r["column"]) == (workload, bs, column)
        ]
        out.append({"workload": workload, "batch_size": bs, "column": column, **entry(mine)})
    return out


def _pct(size: float | None) -> str:
    return "not within the sweep" if size is None else f"{100 * size:g}%"


def _g(value: float | None) -> str:
    return "–" if value is None else f"{value:.3g}"


def markdown(entries: Sequence[Mapping]) -> list[str]:
    """The section's Markdown lines (none without entries)."""
    if not entries:
        return []
    choices = [_label(c) for c in ALLOWANCE_CHOICES]
    configured = choices[0]
    lines = [
        "## Evaluation faults: the smallest caught",
        "",
        "The test fault `eval_output_error` (1 ± ε on a quarter of the outputs' tiles) at each "
        f"ε of the sweep ({', '.join(_pct(s) for s in entries[0]['sizes'])}), applied apart to "
        "copies of each clean run's device outputs after its clean comparison, judged by the "
        f"cell's rule at its allowances (**{configured}**: "
        + ", ".join(f"{k} {v:g}" for k, v in ALLOWANCES.items())
        + "), at half and at twice them, and by the earlier fixed max-norm tolerances "
        "(without their re-check with TF32 off, which needs the device again; float32 1e-4, "
        "TF32 5e-3, "
        "float16 1e-2, bfloat16 5e-2). Smallest ε: caught in every repeat, and at every larger "
        "ε. Clean ratio: the clean outputs' largest error ÷ envelope (above 1: a false alarm).",
        "",
        "| workload | batch | column | precision | repeats | clean error | float32 floor | "
        + " | ".join(f"{c}: clean ratio, smallest ε" for c in choices)
        + " | earlier rule: smallest ε |",
        "|" + "---|" * (8 + len(choices)),
    ]
    for e in entries:
        floors = (f"{_g(e['floor_min'])}–{_g(e['floor_max'])}" if e["floor_min"] is not None
                  else "–")  # fmt: skip
        cells = [
            e["workload"], str(e["batch_size"]), e["column"], e["precision"], str(e["repeats"]),
            _g(e["clean_error_max"]), floors,
            *(f"{_g(e['allowances'][c]['clean_ratio'])}"
              + (f" ({e['allowances'][c]['false_alarms']} false alarms)"
                 if e["allowances"][c]["false_alarms"] else "")
              + f", {_pct(e['allowances'][c]['smallest_caught'])}" for c in choices),
            f"{_pct(e['earlier']['smallest_caught'])} ({e['earlier_class']} tolerance"
            + (f"; {e['earlier']['false_alarms']} false alarms" if e["earlier"]["false_alarms"]
               else "") + ")",
        ]  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    return lines + [""]
