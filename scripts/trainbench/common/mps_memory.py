"""MPS's memory limits, as ``aten/src/ATen/mps/MPSAllocator.mm`` (torch 2.13) sets and
checks them; shared by the config check (a refusal before any job), the MPS device (the
limits in force, recorded) and the MPS emulator (the same refusals, raised).

The allocator reads two variables once, at its first use: ``PYTORCH_MPS_HIGH_WATERMARK_RATIO``
(a hard cap, as a multiple of Metal's recommendedMaxWorkingSetSize: default 1.7, at
most 2.0, 0.0 = no cap) and ``PYTORCH_MPS_LOW_WATERMARK_RATIO`` (where it starts
collecting cached blocks: default 1.4 on Apple silicon's unified memory, at most the high
ratio, or 2.0 when that is 0.0). A pair out of order fails the first allocation
("invalid low watermark ratio 1.4": setting the high ratio alone to 1.0 does this).
``torch.mps.set_per_process_memory_fraction(f)`` later replaces the high ratio with ``f``
(0 to 2) and is not checked against the low one.
"""

from __future__ import annotations

import re

HIGH_VARIABLE = "PYTORCH_MPS_HIGH_WATERMARK_RATIO"
LOW_VARIABLE = "PYTORCH_MPS_LOW_WATERMARK_RATIO"
HIGH_DEFAULT = 1.7
HIGH_UPPER_BOUND = 2.0
LOW_DEFAULT_UNIFIED = 1.4
_NUMBER = re.compile(r"^\s*[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")


def strtod(text: str) -> float:
    """C's strtod as the allocator reads a variable: the leading number, else 0.0."""
    match = _NUMBER.match(text)
    return float(match.group(0)) if match else 0.0


def watermark_problem(high: float, low: float) -> str | None:
    """MPS's own message for a pair it refuses at its first allocation, else None."""
    if not 0.0 <= high <= HIGH_UPPER_BOUND:
        return f"invalid high watermark ratio {high:g}"
    if not 0.0 <= low <= (HIGH_UPPER_BOUND if high == 0.0 else high):
        return f"invalid low watermark ratio {low:g}"
    return None


def ratios_from(environ: dict) -> tuple[float, float]:
    """(high, low) as the allocator reads them from ``environ``, defaults filled in."""
    high, low = environ.get(HIGH_VARIABLE), environ.get(LOW_VARIABLE)
    return (
        strtod(high) if high is not None else HIGH_DEFAULT,
        strtod(low) if low is not None else LOW_DEFAULT_UNIFIED,
    )
