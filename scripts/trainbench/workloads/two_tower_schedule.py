"""The two_tower workload's mining schedule (seed report 003): which epochs mine hard
negatives with FAISS (``mine_schedule``, e.g. ``"0-1:none,2-9:faiss"``), and the
mining settings checked against each other and the document bank."""

from __future__ import annotations

import re

from trainbench.workloads.two_tower_data import KEY

SCHEDULE_KEY = f"{KEY}.mine_schedule"
MINING_MODES = ("none", "faiss")

_RANGE = re.compile(r"^\s*(\d+)(?:\s*-\s*(\d+))?\s*:\s*([A-Za-z_]+)\s*$")
_SCHEDULE_HELP = (
    "write comma-separated 0-based epoch ranges START-END:MODE (or EPOCH:MODE) with MODE "
    "none or faiss, e.g. '0-1:none,2-9:faiss'"
)


def parse_mine_schedule(text: str) -> list[tuple[int, int, str]]:
    """``"0-1:none,2-9:faiss"`` -> ``[(0, 1, "none"), (2, 9, "faiss")]``, sorted.

    Ranges are 0-based and inclusive; they must not overlap. Raises ValueError
    naming ``workloads.two_tower.mine_schedule`` and the fix."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"`{SCHEDULE_KEY}` is empty; {_SCHEDULE_HELP}")
    ranges = []
    for part in text.split(","):
        match = _RANGE.match(part)
        if not match:
            raise ValueError(
                f"`{SCHEDULE_KEY}`: cannot read {part.strip()!r} in {text!r}; {_SCHEDULE_HELP}"
            )
        start = int(match[1])
        end = int(match[2]) if match[2] is not None else start
        mode = match[3]
        if mode not in MINING_MODES:
            raise ValueError(
                f"`{SCHEDULE_KEY}`: unknown mode {match[3]!r} in {part.strip()!r}; "
                f"allowed modes: {', '.join(MINING_MODES)}"
            )
        if end < start:
            raise ValueError(
                f"`{SCHEDULE_KEY}`: range {part.strip()!r} ends before it starts; "
                f"write START-END with START <= END"
            )
        ranges.append((start, end, mode))
    ranges.sort()
    for (s0, e0, m0), (s1, e1, m1) in zip(ranges, ranges[1:], strict=False):
        if s1 <= e0:
            raise ValueError(
                f"`{SCHEDULE_KEY}`: ranges {s0}-{e0}:{m0} and {s1}-{e1}:{m1} overlap "
                f"(epoch {s1} is in both); give every epoch at most one mode"
            )
    return ranges


def mining_mode(schedule: list[tuple[int, int, str]], epoch0: int) -> str:
    """The mode for 0-based ``epoch0``; epochs no range covers use ``none``."""
    for start, end, mode in schedule:
        if start <= epoch0 <= end:
            return mode
    return "none"


def check_mining(settings: dict, bank_size: int | None = None) -> None:
    """Mining settings a schema cannot relate to each other or to the data."""
    mining = settings["mining"]
    k, candidates = int(mining["k"]), int(mining["candidates"])
    if candidates <= k:
        raise ValueError(
            f"`{KEY}.mining.candidates` ({candidates}) must exceed `{KEY}.mining.k` ({k}): the "
            "positive is dropped from the candidates and k must remain. Fix: raise candidates."
        )
    if bank_size is not None and bank_size - 1 < k:
        raise ValueError(
            f"`{KEY}.mining.k` ({k}) exceeds the {bank_size - 1} documents a query can have as "
            "negatives. Fix: lower mining.k or add documents."
        )
