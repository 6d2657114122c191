"""A deterministic generator of synthetic grant/project proposals.

Each document's four labels are injected by explicit rules, so the ground truth is
exact; :func:`~.proposal_check.check_proposal` re-derives them from the text alone.
Every helper below draws from the one ``numpy`` generator in a fixed order: the same
seed always gives the same documents.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from trainbench.workloads.textdata.dataset import CONFIG_KEY, TextDataset
from trainbench.workloads.textdata.proposal_vocabulary import (
    CROSSWALK_OPENERS,
    CROSSWALK_REFS,
    FIRST_NAMES,
    HONORIFICS,
    INTRO_TEMPLATES,
    MENTION_TEMPLATES,
    OBJECTIVE_EXTRAS,
    OBJECTIVE_INTROS,
    OBJECTIVE_THINGS,
    OBJECTIVE_VERBS,
    PHASE_ACTIVITIES,
    PHASE_TEMPLATES,
    PLACES,
    QUALITY_SLOTS,
    STANDARD_NAMES,
    SURNAME_TYPOS,
    SURNAMES,
    TIMELINE_INTROS,
    TITLE_TEMPLATES,
    TITLE_VERBS,
    TOPICS,
)

PROPOSAL_LABELS = ("crosswalk_error", "banned_phrases", "name_inconsistency", "date_inconsistency")
DEFAULT_LABEL_FREQUENCY = 0.3

_NUMBER_WORDS = {2: "two", 3: "three"}
_N_OBJECTIVES = 3  # every document lists Objectives 1-3
_UNLISTED = (4, 5)  # a wrong citation cites one of these, which no document lists
_MENTIONS = 2
_FIRST_YEAR = 2024  # the timeline starts in 2024 or 2025; every phase lasts one year
_EARLY_YEARS = (2022, 2023)  # a disordered phase ends in one: before any timeline starts


def _pick(rng: np.random.Generator, items: Sequence):
    return items[int(rng.integers(len(items)))]


@dataclass(frozen=True)
class _Subject:
    """The topic and place one proposal is about; templates name them as {topic}, {place}."""

    topic: str
    place: str

    def fill(self, template: str, **kw) -> str:
        return template.format(topic=self.topic, place=self.place, **kw)


def _title(rng: np.random.Generator, subject: _Subject) -> str:
    return _pick(rng, TITLE_TEMPLATES).format(
        verb=_pick(rng, TITLE_VERBS), Topic=subject.topic.title(), Place=subject.place.title()
    )


def _investigator_mentions(rng: np.random.Generator, inconsistent: bool) -> list[str]:
    """The principal investigator as written at each of the two mentions; if
    ``inconsistent``, the second misspells the surname (its one fixed misspelling,
    never the correct spelling of any name)."""
    first, last = _pick(rng, FIRST_NAMES), _pick(rng, SURNAMES)
    n_mentions = _MENTIONS
    names = [(first, last)] * n_mentions
    if inconsistent:
        j = int(rng.integers(1, n_mentions))
        names[j] = (first, _pick(rng, SURNAME_TYPOS[last]))
    return [f"{_pick(rng, HONORIFICS)} {f} {s}" for f, s in names]


def _investigator_sentences(
    rng: np.random.Generator, subject: _Subject, pis: list[str]
) -> tuple[str, list[str]]:
    """(the introduction naming ``pis[0]``, one sentence for each later mention)."""
    intro = subject.fill(_pick(rng, INTRO_TEMPLATES), pi=pis[0])
    mention_idx = rng.permutation(len(MENTION_TEMPLATES))[: len(pis) - 1]
    mentions = [
        subject.fill(MENTION_TEMPLATES[k], pi=pi)
        for k, pi in zip(mention_idx, pis[1:], strict=True)
    ]
    return intro, mentions


def _cited_objectives(rng: np.random.Generator, wrong_reference: bool) -> list[int]:
    """The objective numbers the crosswalk cites: one to three of the listed 1..3; a
    wrong reference replaces one of them by 4 or 5, a number no document lists."""
    n_refs = int(rng.integers(1, _N_OBJECTIVES + 1))
    refs = [int(k) + 1 for k in rng.permutation(_N_OBJECTIVES)[:n_refs]]
    if wrong_reference:
        refs[int(rng.integers(n_refs))] = int(_pick(rng, _UNLISTED))
    return refs


def _objective_lines(rng: np.random.Generator, n_obj: int) -> list[str]:
    """The objectives' intro line (none for some documents), then ``n_obj`` numbered
    objectives about distinct things."""
    pool = [f"{v} {t}" for v in OBJECTIVE_VERBS for t in OBJECTIVE_THINGS] + list(OBJECTIVE_EXTRAS)
    chosen, used = [], set()
    while len(chosen) < n_obj:
        text = _pick(rng, pool)
        thing = text.split(" ", 1)[1]
        if thing not in used:
            used.add(thing)
            chosen.append(text)
    objectives = [f"Objective {k}: {text}." for k, text in enumerate(chosen, 1)]
    obj_intro = _pick(rng, OBJECTIVE_INTROS)
    return [obj_intro, *objectives] if obj_intro else objectives


def _crosswalk(rng: np.random.Generator, refs: list[int]) -> str:
    """The sentence citing objectives ``refs`` against lettered standards."""
    parts = [_pick(rng, CROSSWALK_REFS).format(k=k, std=_pick(rng, STANDARD_NAMES)) for k in refs]
    joined = parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]
    return _pick(rng, CROSSWALK_OPENERS).format(refs=joined)


def _phase_years(rng: np.random.Generator, n_phases: int, disorder: bool) -> list[tuple]:
    """(start, end) year per phase, in phase order. Each phase runs one year and the next
    starts in the year it ends, so in order no year comes before the year written
    before it. Disordered: one phase ends in 2022 or 2023, before any timeline starts
    ("from 2026 to 2023"): a year only a disordered document writes."""
    start = _FIRST_YEAR + int(rng.integers(0, 2))
    phases = [[start + i, start + i + 1] for i in range(n_phases)]
    if disorder:
        phases[int(rng.integers(n_phases))][1] = int(_pick(rng, _EARLY_YEARS))
    return [tuple(p) for p in phases]


def _timeline_sentences(rng: np.random.Generator, disorder: bool) -> list[str]:
    """An optional intro, then one sentence per phase with its start and end years."""
    n_phases = int(rng.integers(2, 4))
    phase_years = _phase_years(rng, n_phases, disorder)
    timeline = [_pick(rng, TIMELINE_INTROS).format(count=_NUMBER_WORDS[n_phases])]
    activities = rng.permutation(len(PHASE_ACTIVITIES))
    for i, (y1, y2) in enumerate(phase_years, 1):
        timeline.append(
            _pick(rng, PHASE_TEMPLATES).format(
                i=i, d1=y1, d2=y2, activity=PHASE_ACTIVITIES[activities[i - 1]]
            )
        )
    return [s for s in timeline if s]


def _quality_sentence(rng: np.random.Generator, subject: _Subject, banned: bool) -> str:
    """The one "quality" sentence: a banned phrase if ``banned``, else a plain phrase of
    the same kind, so the sentence itself is no cue."""
    templates, banned_phrases, plain_phrases = _pick(rng, QUALITY_SLOTS)
    phrase = _pick(rng, banned_phrases if banned else plain_phrases)
    return subject.fill(_pick(rng, templates), x=phrase)


@dataclass(frozen=True)
class _Layout:
    """Every sentence of one proposal and where the quality sentence goes."""

    title: str
    intro: str
    mentions: list[str]
    objective_lines: list[str]
    crosswalk: str
    timeline: list[str]
    quality: str
    quality_early: bool
    closing_order: np.ndarray  # a permutation of the closing paragraph's sentences

    def render(self) -> str:
        head = [self.intro] + ([self.quality] if self.quality_early else [])
        tail = self.mentions + ([] if self.quality_early else [self.quality])
        tail = [tail[i] for i in self.closing_order]
        return "\n".join(
            [
                self.title,
                " ".join(head),
                *self.objective_lines,
                self.crosswalk,
                " ".join(self.timeline),
                " ".join(tail),
            ]
        )


def _proposal(rng: np.random.Generator, flags: dict[str, bool]) -> str:
    subject = _Subject(topic=_pick(rng, TOPICS), place=_pick(rng, PLACES))
    title = _title(rng, subject)
    pis = _investigator_mentions(rng, flags["name_inconsistency"])
    intro, mentions = _investigator_sentences(rng, subject, pis)
    refs = _cited_objectives(rng, flags["crosswalk_error"])
    objective_lines = _objective_lines(rng, _N_OBJECTIVES)
    crosswalk = _crosswalk(rng, refs)
    timeline = _timeline_sentences(rng, flags["date_inconsistency"])
    quality = _quality_sentence(rng, subject, flags["banned_phrases"])
    quality_early = bool(rng.random() < 0.5)
    n_closing = len(mentions) + (0 if quality_early else 1)
    layout = _Layout(
        title=title,
        intro=intro,
        mentions=mentions,
        objective_lines=objective_lines,
        crosswalk=crosswalk,
        timeline=timeline,
        quality=quality,
        quality_early=quality_early,
        closing_order=rng.permutation(n_closing),
    )
    return layout.render()


def _label_frequencies(label_frequencies: dict | None) -> dict[str, float]:
    given = dict(label_frequencies or {})
    unknown = sorted(set(given) - set(PROPOSAL_LABELS))
    if unknown:
        raise ValueError(
            f"{CONFIG_KEY}.label_frequencies: unknown label(s) {unknown}; "
            f"use only {list(PROPOSAL_LABELS)}"
        )
    out = {}
    for label in PROPOSAL_LABELS:
        p = given.get(label, DEFAULT_LABEL_FREQUENCY)
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p <= 1.0:
            raise ValueError(
                f"{CONFIG_KEY}.label_frequencies.{label} = {p!r}; set a probability in [0, 1]"
            )
        out[label] = float(p)
    return out


def generate_proposals(
    n: int, seed: int, label_frequencies: dict[str, float] | None = None
) -> TextDataset:
    """``n`` synthetic proposals from ``numpy.random.default_rng(seed)``.

    Each label is injected independently with probability ``label_frequencies[label]``
    (labels missing from the dict, or a None/empty dict, get 0.3).
    """
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
        raise ValueError(f"number of proposals must be a non-negative integer, got {n!r}")
    freqs = _label_frequencies(label_frequencies)
    rng = np.random.default_rng(seed)
    probs = np.array([freqs[label] for label in PROPOSAL_LABELS])
    labels = (rng.random((int(n), len(PROPOSAL_LABELS))) < probs).astype(np.uint8)
    texts = [
        _proposal(rng, dict(zip(PROPOSAL_LABELS, map(bool, row), strict=True))) for row in labels
    ]
    return TextDataset(texts=texts, labels=labels, label_names=list(PROPOSAL_LABELS))
