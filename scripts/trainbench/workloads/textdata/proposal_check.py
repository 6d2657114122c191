"""The independent checker of generated proposals: it parses the text and knows nothing
of the generator's state, so the tests can prove that every injected label is right."""

from __future__ import annotations

import datetime as dt
import re

from trainbench.workloads.textdata.proposal_vocabulary import BANNED_PHRASES, MONTHS

_MONTH_RE = "|".join(MONTHS)
_TIMELINE_TOKEN = re.compile(
    rf"\bPhase (?P<phase>\d+)\b"
    rf"|\b(?P<d1>\d{{1,2}}) (?P<m1>{_MONTH_RE}) (?P<y1>\d{{4}})\b"
    rf"|\b(?P<m2>{_MONTH_RE}) (?P<d2>\d{{1,2}}), (?P<y2>\d{{4}})\b"
    rf"|\b(?P<m3>{_MONTH_RE}) (?P<y3>\d{{4}})\b"
    rf"|\b(?P<y4>\d{{4}})\b"
)
_PERSON = re.compile(r"\b(?:Dr\.|Professor) ([A-Z][A-Za-z'-]+) ([A-Z][A-Za-z'-]+)")
_LISTED_OBJECTIVE = re.compile(r"^Objective (\d+):", re.MULTILINE)
_OBJECTIVE_REFERENCE = re.compile(r"\bObjective (\d+)\b(?!:)")


def _dates_in_phase_order(text: str) -> list[dt.date]:
    """Every date after a "Phase N" mention, grouped by phase number, phases ascending.
    A date is "12 March 2024", "March 12, 2024", a month alone, "March 2024" (read as
    its first day), or a year alone, "2024" (read as its first day; the generator
    writes year-only timelines and never mixes forms)."""
    dates: dict[int, list[dt.date]] = {}
    phase = None
    for m in _TIMELINE_TOKEN.finditer(text):
        if m["phase"]:
            phase = int(m["phase"])
            dates.setdefault(phase, [])
            continue
        if m["d1"]:
            day, month, year = m["d1"], m["m1"], m["y1"]
        elif m["d2"]:
            day, month, year = m["d2"], m["m2"], m["y2"]
        elif m["m3"]:
            day, month, year = "1", m["m3"], m["y3"]
        else:
            day, month, year = "1", MONTHS[0], m["y4"]
        if phase is not None:
            dates[phase].append(dt.date(int(year), MONTHS.index(month) + 1, int(day)))
    return [d for p in sorted(dates) for d in dates[p]]


def check_proposal(text: str) -> dict[str, bool]:
    """Re-derive the four labels of a generated proposal from its text alone."""
    listed = {int(k) for k in _LISTED_OBJECTIVE.findall(text)}
    referenced = {int(k) for k in _OBJECTIVE_REFERENCE.findall(text)}
    lowered = text.lower()
    names = set(_PERSON.findall(text))
    sequence = _dates_in_phase_order(text)
    return {
        "crosswalk_error": bool(referenced - listed),
        "banned_phrases": any(phrase in lowered for phrase in BANNED_PHRASES),
        "name_inconsistency": len(names) > 1,
        # a date before the date written before it (a phase that ends before it starts,
        # or a phase that starts before the previous one ends); equal dates are in order
        "date_inconsistency": any(b < a for a, b in zip(sequence, sequence[1:], strict=False)),
    }
