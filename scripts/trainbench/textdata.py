"""Text data sources for the multi-label text workload (seed report 000).

Three sources, all returning :class:`TextDataset` (texts plus a 0/1 label matrix):

* ``proposals``: a deterministic generator of synthetic grant/project proposals
  whose four labels are injected by explicit rules, so the ground truth is exact.
  :func:`check_proposal` re-derives every label from the text alone (regexes over
  names, dates, objective numbers and banned phrases) and is what the tests use to
  prove that the labels are right.
* ``goemotions``: the GoEmotions TSV files (``original``: 28 labels, ``ekman``: 7).
* ``table``: any CSV/TSV with a text column and named 0/1 label columns.

:func:`load_splits` turns the workload's ``data`` settings into a train and a dev split.
"""

from __future__ import annotations

import csv
import datetime as dt
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

CONFIG_KEY = "workloads.text_multilabel.data"

PROPOSAL_LABELS = ("crosswalk_error", "banned_phrases", "name_inconsistency", "date_inconsistency")
DEFAULT_LABEL_FREQUENCY = 0.3
# Proposals' dev split is generated from a derived seed so it shares no document with train.
DEV_SEED_OFFSET = 1_000_003
DEFAULT_DEV_FRACTION = 0.2
GOEMOTIONS_SPLITS = ("train", "dev", "test")


@dataclass
class TextDataset:
    texts: list[str]
    labels: np.ndarray  # (n, n_labels) uint8, values 0/1
    label_names: list[str]

    def __post_init__(self) -> None:
        self.texts = list(self.texts)
        self.label_names = list(self.label_names)
        self.labels = np.asarray(self.labels, dtype=np.uint8).reshape(
            len(self.texts), len(self.label_names)
        )
        if self.labels.size and self.labels.max() > 1:
            raise ValueError("labels must be 0/1")

    def __len__(self) -> int:
        return len(self.texts)

    def subset(self, indices) -> TextDataset:
        """Rows by position (a sequence of ints or a boolean mask), in the given order."""
        index = np.asarray(indices)
        if index.dtype == bool:
            index = np.flatnonzero(index)
        index = index.astype(np.int64).reshape(-1)
        return TextDataset(
            texts=[self.texts[i] for i in index.tolist()],
            labels=self.labels[index],
            label_names=list(self.label_names),
        )


# ============================================================================ proposals

BANNED_PHRASES: tuple[str, ...] = (
    "guaranteed results",
    "world-class",
    "cutting-edge",
    "best in the nation",
    "state-of-the-art",
    "best-in-class",
    "groundbreaking",
    "revolutionary",
    "unparalleled",
    "game-changing",
    "second to none",
    "unprecedented success",
)

# Every name belongs to a spelling pair and both members are ordinary base names, so a
# variant spelling alone (Smyth, Katherine) says nothing: only the comparison does.
_FIRST_NAME_PAIRS = (
    ("Jon", "John"),
    ("Catherine", "Katherine"),
    ("Steven", "Stephen"),
    ("Sara", "Sarah"),
    ("Ann", "Anne"),
    ("Geoffrey", "Jeffrey"),
    ("Philip", "Phillip"),
    ("Eric", "Erik"),
    ("Carl", "Karl"),
    ("Teresa", "Theresa"),
    ("Alan", "Allan"),
    ("Marc", "Mark"),
    ("Rachel", "Rachael"),
    ("Brian", "Bryan"),
    ("Isabel", "Isobel"),
    ("Lindsay", "Lindsey"),
)
_SURNAME_PAIRS = (
    ("Smith", "Smyth"),
    ("Reid", "Reed"),
    ("Thompson", "Thomson"),
    ("Clark", "Clarke"),
    ("Anderson", "Andersen"),
    ("Stewart", "Stuart"),
    ("Myers", "Meyers"),
    ("Gray", "Grey"),
    ("Hanson", "Hansen"),
    ("Peterson", "Petersen"),
    ("Mathews", "Matthews"),
    ("Lowe", "Low"),
    ("Nielsen", "Nilsen"),
    ("Fischer", "Fisher"),
)


def _variant_map(pairs) -> dict[str, str]:
    out = {}
    for a, b in pairs:
        out[a], out[b] = b, a
    return out


_FIRST_VARIANT = _variant_map(_FIRST_NAME_PAIRS)
_SURNAME_VARIANT = _variant_map(_SURNAME_PAIRS)
_FIRST_NAMES = sorted(_FIRST_VARIANT)
_SURNAMES = sorted(_SURNAME_VARIANT)
_HONORIFICS = ("Dr.", "Professor")

_TOPICS = (
    "groundwater monitoring",
    "early childhood literacy",
    "urban heat resilience",
    "pollinator habitat restoration",
    "rural broadband adoption",
    "coastal flood forecasting",
    "community health outreach",
    "soil carbon measurement",
    "adult numeracy instruction",
    "river sediment tracking",
    "school meal programs",
    "wildfire smoke exposure",
    "small farm irrigation",
    "public library digitization",
    "youth mentoring networks",
    "bridge inspection methods",
    "wetland bird surveys",
    "microgrid planning",
)
_PLACES = (
    "rural counties",
    "the northern watershed",
    "three partner districts",
    "coastal towns",
    "the metropolitan region",
    "mountain valleys",
    "island schools",
    "the river basin",
    "older urban neighborhoods",
    "the eastern highlands",
)
_TITLE_VERBS = (
    "Improving",
    "Strengthening",
    "Expanding",
    "Measuring",
    "Rethinking",
    "Scaling",
    "Sustaining",
    "Understanding",
)
_TITLE_TEMPLATES = (
    "Title: {verb} {Topic} in {Place}",
    "Title: {verb} {Topic} Across {Place}",
    "Title: {Topic} for {Place}: A Field Study",
    "Project Title: {verb} {Topic}",
)
_INTRO_TEMPLATES = (
    "The principal investigator is {pi}, who has led several earlier studies of {topic}.",
    "This proposal is submitted by {pi} on behalf of a team of practitioners and researchers.",
    "{pi} will serve as principal investigator and coordinate all partner activities.",
    "Leadership rests with {pi}, whose prior work examined {topic} in {place}.",
    "The project is led by {pi}, who has worked with partners in {place} for many years.",
)
_MENTION_TEMPLATES = (
    "{pi} will supervise data collection and review every quarterly report.",
    "Budget decisions will be approved by {pi} in consultation with the advisory board.",
    "Field staff will report weekly to {pi} during the active periods of work.",
    "Any change to the study protocol requires written approval from {pi}.",
    "{pi} will present the findings at two regional meetings.",
    "The final report will be prepared by {pi} together with the partner sites.",
    "Questions about data access should be addressed to {pi}.",
    "Hiring of the project coordinator will be overseen by {pi}.",
)
_OBJECTIVE_INTROS = (
    "The project pursues the following objectives.",
    "Specific objectives are listed below.",
    "The work is organized around {count} objectives.",
    "We propose {count} objectives.",
    "Objectives:",
)
_OBJECTIVE_VERBS = (
    "Measure",
    "Map",
    "Compare",
    "Document",
    "Assess",
    "Evaluate",
    "Pilot",
    "Describe",
)
_OBJECTIVE_THINGS = (
    "baseline conditions at each partner site",
    "changes in {topic} over two seasons",
    "the costs of each intervention",
    "outcomes against a comparison group",
    "staff adoption of the new procedures",
    "barriers reported by participating households",
    "the reliability of low-cost sensors",
    "long-term effects on {topic}",
    "differences between {place} and nearby areas",
    "the training needs of partner organizations",
)
_OBJECTIVE_EXTRAS = (
    "Train local staff in standard data collection procedures",
    "Build a shared database of site observations",
    "Publish open teaching materials for partner schools",
    "Share practical guidance with regional agencies",
)
_CROSSWALK_OPENERS = (
    "In the standards crosswalk, {refs}.",
    "The crosswalk to the state framework is as follows: {refs}.",
    "Alignment with the regional standards: {refs}.",
    "For reviewers, {refs}.",
)
_CROSSWALK_REFS = (
    "Objective {k} aligns with Standard {std}",
    "Objective {k} maps to Standard {std}",
    "Objective {k} supports Standard {std}",
    "Standard {std} is addressed by Objective {k}",
)
_TIMELINE_INTROS = (
    "",
    "The timeline has {count} phases.",
    "Work proceeds in {count} phases.",
    "The schedule is summarized below.",
)
_PHASE_TEMPLATES = (
    "Phase {i} begins on {d1} and ends on {d2}.",
    "Phase {i} runs from {d1} to {d2}.",
    "Phase {i} starts on {d1} and is completed by {d2}.",
    "Phase {i}, {activity}, runs from {d1} to {d2}.",
    "Phase {i} ({activity}) opens on {d1} and closes on {d2}.",
)
_PHASE_ACTIVITIES = (
    "site recruitment",
    "baseline data collection",
    "the main intervention",
    "follow-up visits",
    "analysis and reporting",
    "instrument testing",
)
# The single "quality" sentence every document has: a banned phrase in positives, a plain
# phrase of the same kind in negatives, so the sentence itself is no cue.
_QUALITY_SLOTS = (
    (
        (
            "The team brings {x} expertise in {topic}.",
            "The partner sites offer {x} facilities for this work.",
            "Our approach relies on {x} methods adapted to local conditions.",
        ),
        (
            "world-class",
            "cutting-edge",
            "state-of-the-art",
            "best-in-class",
            "groundbreaking",
            "revolutionary",
            "unparalleled",
            "game-changing",
        ),
        (
            "established",
            "practical",
            "long-standing",
            "complementary",
            "well-documented",
            "relevant",
            "hands-on",
            "field-tested",
        ),
    ),
    (
        (
            "The project is designed to deliver {x} for partner communities.",
            "Funders can expect {x} from this investment in {topic}.",
        ),
        ("guaranteed results", "unprecedented success"),
        ("measurable improvements", "useful evidence", "practical guidance", "reliable estimates"),
    ),
    (
        (
            "Our laboratory is {x} for research on {topic}.",
            "The host department is {x} in this field.",
        ),
        ("the best in the nation", "second to none"),
        ("well equipped", "a regional partner", "the natural home", "an experienced host"),
    ),
)
_FILLERS = (
    "Previous pilots in {place} showed that {topic} can be sustained with modest local support.",
    "Partner organizations have committed staff time and meeting space for the full award.",
    "Data will be stored in an open repository with documentation for each variable.",
    "An advisory board of practitioners will meet twice a year to review progress.",
    "The evaluation combines site visits, short surveys and administrative records.",
    "Results will be shared through plain-language briefs and a public dashboard.",
    "The budget prioritizes local hiring and training over equipment purchases.",
    "Community members in {place} helped shape the questions addressed here.",
    "Risks include staff turnover and weather delays, and each has a mitigation plan.",
    "The work builds on a decade of collaboration between the university and {place}.",
    "Sampling sites were chosen to represent a range of conditions across {place}.",
    "Students will gain research experience through paid summer positions.",
    "All instruments will be tested with a small group before full deployment.",
    "Findings on {topic} will inform guidance issued by regional agencies.",
    "Ethical review has been requested and consent procedures are drafted.",
    "A review at the midpoint will decide whether to expand to additional sites.",
    "Local schools and clinics have written letters describing their interest in {topic}.",
    "Travel costs are kept low by training staff who already live in {place}.",
)
_MONTHS = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)
_NUMBER_WORDS = {1: "one", 2: "two", 3: "three", 4: "four", 5: "five", 6: "six"}
_MAX_OBJECTIVE = 6  # listed objectives and cited numbers both stay within 1..6
_TARGET_MAX_WORDS = 180


def _pick(rng: np.random.Generator, items: Sequence):
    return items[int(rng.integers(len(items)))]


def _format_date(day: dt.date, style: int) -> str:
    if style == 0:
        return f"{day.day} {_MONTHS[day.month - 1]} {day.year}"
    return f"{_MONTHS[day.month - 1]} {day.day}, {day.year}"


def _timeline(rng: np.random.Generator, n_phases: int, disorder: bool) -> list[tuple]:
    """(start, end) per phase, in phase order. In order: every date strictly after the
    previous one. Disordered: one phase ends before it starts, or a later phase starts
    before the earlier one ends."""
    start = dt.date(2024, 1, 1) + dt.timedelta(days=int(rng.integers(0, 3 * 365)))
    phases = []
    for _ in range(n_phases):
        end = start + dt.timedelta(days=int(rng.integers(60, 400)))
        phases.append([start, end])
        start = end + dt.timedelta(days=int(rng.integers(1, 45)))
    if disorder:
        i = int(rng.integers(n_phases))
        if i == n_phases - 1 or rng.random() < 0.5:
            phases[i].reverse()  # end date before start date
        else:
            # phase i+1 starts inside phase i (still after phase i starts), then every
            # later date keeps its order relative to the shifted start
            s, e = phases[i]
            back = int(rng.integers(10, max(11, min((e - s).days - 1, 120))))
            phases[i + 1][0] = e - dt.timedelta(days=back)
    return [tuple(p) for p in phases]


def _proposal(rng: np.random.Generator, flags: dict[str, bool]) -> str:
    topic, place = _pick(rng, _TOPICS), _pick(rng, _PLACES)

    def fill(template: str, **kw) -> str:
        return template.format(topic=topic, place=place, **kw)

    title = _pick(rng, _TITLE_TEMPLATES).format(
        verb=_pick(rng, _TITLE_VERBS), Topic=topic.title(), Place=place.title()
    )

    # ---- principal investigator: 2-3 mentions, each in its own sentence
    first, last = _pick(rng, _FIRST_NAMES), _pick(rng, _SURNAMES)
    n_mentions = int(rng.integers(2, 4))
    names = [(first, last)] * n_mentions
    if flags["name_inconsistency"]:
        j = int(rng.integers(1, n_mentions))  # a later mention, never the first
        if rng.random() < 0.5:
            names[j] = (_FIRST_VARIANT[first], last)
        else:
            names[j] = (first, _SURNAME_VARIANT[last])
    pis = [f"{_pick(rng, _HONORIFICS)} {f} {s}" for f, s in names]
    intro = fill(_pick(rng, _INTRO_TEMPLATES), pi=pis[0])
    mention_idx = rng.permutation(len(_MENTION_TEMPLATES))[: n_mentions - 1]
    mentions = [
        fill(_MENTION_TEMPLATES[k], pi=pi) for k, pi in zip(mention_idx, pis[1:], strict=True)
    ]

    # ---- objectives and the crosswalk
    # A wrong reference is one past the list: either the list stops one short of an
    # objective the crosswalk cites, or the crosswalk cites one past the list. Half each
    # (forced at the ends of the 2..6 range) keeps both the list length and the largest
    # cited number weak cues on their own; only comparing them gives the label.
    full = int(rng.integers(2, _MAX_OBJECTIVE + 1))
    n_refs = int(rng.integers(1, min(3, full) + 1))
    refs = [int(k) + 1 for k in rng.permutation(full)[:n_refs]]
    if full not in refs and rng.random() < 0.8:
        refs[-1] = full
    n_obj = full
    if flags["crosswalk_error"]:
        if full == _MAX_OBJECTIVE or (full > 2 and rng.random() < 0.5):
            n_obj = full - 1
            if full not in refs:
                refs[int(rng.integers(n_refs))] = full
        else:
            refs[int(rng.integers(n_refs))] = full + 1
    pool = [f"{v} {t}" for v in _OBJECTIVE_VERBS for t in _OBJECTIVE_THINGS] + list(
        _OBJECTIVE_EXTRAS
    )
    chosen, used = [], set()
    while len(chosen) < n_obj:
        text = fill(_pick(rng, pool))
        thing = text.split(" ", 1)[1]
        if thing not in used:
            used.add(thing)
            chosen.append(text)
    objectives = [f"Objective {k}: {text}." for k, text in enumerate(chosen, 1)]
    obj_intro = _pick(rng, _OBJECTIVE_INTROS).format(count=_NUMBER_WORDS[n_obj])

    parts = [
        _pick(rng, _CROSSWALK_REFS).format(
            k=k, std=f"{int(rng.integers(1, 9))}.{int(rng.integers(1, 6))}"
        )
        for k in refs
    ]
    joined = parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]
    crosswalk = _pick(rng, _CROSSWALK_OPENERS).format(refs=joined)

    # ---- timeline
    n_phases = int(rng.integers(2, 4))
    style = int(rng.integers(2))
    phase_dates = _timeline(rng, n_phases, flags["date_inconsistency"])
    timeline = [_pick(rng, _TIMELINE_INTROS).format(count=_NUMBER_WORDS[n_phases])]
    activities = rng.permutation(len(_PHASE_ACTIVITIES))
    for i, (d1, d2) in enumerate(phase_dates, 1):
        timeline.append(
            _pick(rng, _PHASE_TEMPLATES).format(
                i=i,
                d1=_format_date(d1, style),
                d2=_format_date(d2, style),
                activity=_PHASE_ACTIVITIES[activities[i - 1]],
            )
        )
    timeline = [s for s in timeline if s]

    # ---- the quality sentence (banned phrase or a plain one of the same kind)
    templates, banned, plain = _pick(rng, _QUALITY_SLOTS)
    phrase = _pick(rng, banned if flags["banned_phrases"] else plain)
    quality = fill(_pick(rng, templates), x=phrase)

    # ---- fillers, then assembly; drop fillers while the document is too long
    n_fill = int(rng.integers(0, 4))
    fillers = [fill(_FILLERS[k]) for k in rng.permutation(len(_FILLERS))[:n_fill]]
    split = int(rng.integers(0, n_fill + 1))  # fillers before the objectives
    quality_early = rng.random() < 0.5
    closing_order = rng.permutation(len(mentions) + 1 + n_fill)

    def assemble(fillers: list[str]) -> str:
        k = min(split, len(fillers))
        head = [intro, *fillers[:k]] + ([quality] if quality_early else [])
        tail = mentions + fillers[k:] + ([] if quality_early else [quality])
        tail = [tail[i] for i in closing_order if i < len(tail)]
        return "\n".join(
            [
                title,
                " ".join(head),
                obj_intro,
                *objectives,
                crosswalk,
                " ".join(timeline),
                " ".join(tail),
            ]
        )

    text = assemble(fillers)
    while len(text.split()) > _TARGET_MAX_WORDS and fillers:
        fillers = fillers[:-1]
        text = assemble(fillers)
    return text


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


# ---- the independent checker: parses the text, knows nothing of the generator's state

_MONTH_RE = "|".join(_MONTHS)
_TIMELINE_TOKEN = re.compile(
    rf"\bPhase (?P<phase>\d+)\b"
    rf"|\b(?P<d1>\d{{1,2}}) (?P<m1>{_MONTH_RE}) (?P<y1>\d{{4}})\b"
    rf"|\b(?P<m2>{_MONTH_RE}) (?P<d2>\d{{1,2}}), (?P<y2>\d{{4}})\b"
)
_PERSON = re.compile(r"\b(?:Dr\.|Professor) ([A-Z][A-Za-z'-]+) ([A-Z][A-Za-z'-]+)")
_LISTED_OBJECTIVE = re.compile(r"^Objective (\d+):", re.MULTILINE)
_OBJECTIVE_REFERENCE = re.compile(r"\bObjective (\d+)\b(?!:)")


def check_proposal(text: str) -> dict[str, bool]:
    """Re-derive the four labels of a generated proposal from its text alone."""
    listed = {int(k) for k in _LISTED_OBJECTIVE.findall(text)}
    referenced = {int(k) for k in _OBJECTIVE_REFERENCE.findall(text)}

    lowered = text.lower()
    names = set(_PERSON.findall(text))

    dates: dict[int, list[dt.date]] = {}
    phase = None
    for m in _TIMELINE_TOKEN.finditer(text):
        if m["phase"]:
            phase = int(m["phase"])
            dates.setdefault(phase, [])
            continue
        if m["d1"]:
            day, month, year = m["d1"], m["m1"], m["y1"]
        else:
            day, month, year = m["d2"], m["m2"], m["y2"]
        if phase is not None:
            dates[phase].append(dt.date(int(year), _MONTHS.index(month) + 1, int(day)))
    sequence = [d for p in sorted(dates) for d in dates[p]]

    return {
        "crosswalk_error": bool(referenced - listed),
        "banned_phrases": any(phrase in lowered for phrase in BANNED_PHRASES),
        "name_inconsistency": len(names) > 1,
        "date_inconsistency": any(b <= a for a, b in zip(sequence, sequence[1:], strict=False)),
    }


# ============================================================================ real data


def load_goemotions(folder: str | Path, split: str) -> TextDataset:
    """One GoEmotions split from ``folder`` (holding labels.txt and {split}.tsv).

    TSV columns, no header: text, comma-separated label ids, comment id.
    """
    folder = Path(folder)
    if split not in GOEMOTIONS_SPLITS:
        raise ValueError(f"GoEmotions split must be one of {GOEMOTIONS_SPLITS}, got {split!r}")
    labels_file, tsv = folder / "labels.txt", folder / f"{split}.tsv"
    if not labels_file.is_file() or not tsv.is_file():
        hint = ""
        subs = sorted(p.parent.name for p in folder.glob("*/labels.txt"))
        if subs:
            hint = f" (it has label sets {subs}: point at one of them, e.g. {folder / subs[0]})"
        raise FileNotFoundError(
            f"{folder}: no labels.txt and {split}.tsv; point {CONFIG_KEY}.path at a GoEmotions "
            f"folder such as /work/shared/data/goemotions/original{hint}"
        )
    label_names = [line.strip() for line in labels_file.read_text().splitlines() if line.strip()]
    frame = pd.read_csv(
        tsv,
        sep="\t",
        header=None,
        quoting=csv.QUOTE_NONE,
        dtype=str,
        keep_default_na=False,
        names=["text", "labels", "id"],
    )
    labels = np.zeros((len(frame), len(label_names)), dtype=np.uint8)
    for row, ids in enumerate(frame["labels"].tolist()):
        try:
            index = [int(k) for k in ids.split(",")]
        except ValueError:
            raise ValueError(f"{tsv}, row {row + 1}: label ids {ids!r} are not integers") from None
        if min(index) < 0 or max(index) >= len(label_names):
            raise ValueError(
                f"{tsv}, row {row + 1}: label id out of range in {ids!r} "
                f"({len(label_names)} labels in {labels_file})"
            )
        labels[row, index] = 1
    return TextDataset(texts=frame["text"].tolist(), labels=labels, label_names=label_names)


_BINARY = {"0": 0, "1": 1, "0.0": 0, "1.0": 1}


def load_table(
    path: str | Path, text_column: str = "text", label_columns: list[str] | None = None
) -> TextDataset:
    """A CSV/TSV (tab for .tsv/.tab, else comma) with a text column and 0/1 label columns
    (``label_columns`` None: every column except the text column)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"{path}: no such table file; point {CONFIG_KEY}.path (or .dev_path) at a CSV/TSV"
        )
    sep = "\t" if path.suffix.lower() in (".tsv", ".tab") else ","
    frame = pd.read_csv(path, sep=sep, dtype=str, keep_default_na=False)
    columns = [str(c) for c in frame.columns]
    if text_column not in columns:
        raise ValueError(
            f"{path}: no text column {text_column!r} (columns: {columns}); "
            f"set {CONFIG_KEY}.text_column to the column holding the text"
        )
    if label_columns is None:
        label_columns = [c for c in columns if c != text_column]
    else:
        label_columns = list(label_columns)
        missing = [c for c in label_columns if c not in columns]
        if missing:
            raise ValueError(
                f"{path}: label column(s) {missing} not found (columns: {columns}); "
                f"fix {CONFIG_KEY}.label_columns"
            )
    if not label_columns:
        raise ValueError(
            f"{path}: no label columns besides {text_column!r}; add 0/1 label columns "
            f"or set {CONFIG_KEY}.label_columns"
        )
    if text_column in label_columns:
        raise ValueError(f"{path}: {text_column!r} is both the text column and a label column")
    labels = np.zeros((len(frame), len(label_columns)), dtype=np.uint8)
    for j, column in enumerate(label_columns):
        values = frame[column].str.strip()
        bad = ~values.isin(list(_BINARY))
        if bad.any():
            row = int(np.flatnonzero(bad.to_numpy())[0])
            raise ValueError(
                f"{path}: label column {column!r} must hold only 0/1, found "
                f"{frame[column].iloc[row]!r} in data row {row + 1}; fix the file or leave "
                f"the column out of {CONFIG_KEY}.label_columns"
            )
        labels[:, j] = values.map(_BINARY).to_numpy(dtype=np.uint8)
    return TextDataset(texts=frame[text_column].tolist(), labels=labels, label_names=label_columns)


# ============================================================================ splits


def _count(data: dict, key: str, required: bool = False) -> int | None:
    value = data.get(key)
    if value is None:
        if required:
            raise ValueError(
                f"{CONFIG_KEY}.{key} is required for source 'proposals' "
                "(the number of documents to generate); set a positive integer"
            )
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(
            f"{CONFIG_KEY}.{key} = {value!r}; set a positive integer (or null for all rows)"
        )
    return int(value)


def _cap(dataset: TextDataset, n: int | None, seed: int, stream: int) -> TextDataset:
    """The first ``n`` rows of a seeded shuffle (kept in file order); all rows if None."""
    if n is None or n >= len(dataset):
        return dataset
    rng = np.random.default_rng([int(seed), stream])
    return dataset.subset(np.sort(rng.permutation(len(dataset))[:n]))


def _required_path(data: dict, key: str, what: str) -> Path:
    value = data.get(key)
    if not value:
        raise ValueError(f"{CONFIG_KEY}.{key} is required for source {data['source']!r}: {what}")
    return Path(value).expanduser()


def load_splits(data: dict, seed: int) -> dict[str, TextDataset]:
    """{"train": ..., "dev": ...} from the workload's ``data`` settings."""
    source = data.get("source", "proposals")
    n_train, n_dev = (
        _count(data, "n_train", source == "proposals"),
        _count(data, "n_dev", source == "proposals"),
    )
    if source == "proposals":
        freqs = data.get("label_frequencies") or None
        return {
            "train": generate_proposals(n_train, seed, freqs),
            "dev": generate_proposals(n_dev, seed + DEV_SEED_OFFSET, freqs),
        }
    if source == "goemotions":
        folder = _required_path(
            data, "path", "the GoEmotions folder, e.g. /work/shared/data/goemotions/original"
        )
        train, dev = load_goemotions(folder, "train"), load_goemotions(folder, "dev")
    elif source == "table":
        path = _required_path(data, "path", "the CSV/TSV file with the training rows")
        text_column = data.get("text_column") or "text"
        label_columns = data.get("label_columns") or None
        full = load_table(path, text_column, label_columns)
        if data.get("dev_path"):
            train = full
            dev = load_table(Path(data["dev_path"]).expanduser(), text_column, label_columns)
            if dev.label_names != train.label_names:
                raise ValueError(
                    f"{CONFIG_KEY}.dev_path has label columns {dev.label_names} but "
                    f"{CONFIG_KEY}.path has {train.label_names}; make them match or set "
                    f"{CONFIG_KEY}.label_columns"
                )
        else:
            fraction = data.get("dev_fraction")
            fraction = DEFAULT_DEV_FRACTION if fraction is None else fraction
            if isinstance(fraction, bool) or not 0.0 < float(fraction) < 1.0:
                raise ValueError(
                    f"{CONFIG_KEY}.dev_fraction = {fraction!r}; set a number strictly between "
                    f"0 and 1, or give a separate {CONFIG_KEY}.dev_path"
                )
            if len(full) < 2:
                raise ValueError(
                    f"{path}: {len(full)} row(s) cannot be split into train and dev; add rows "
                    f"or give {CONFIG_KEY}.dev_path"
                )
            order = np.random.default_rng([int(seed), 2]).permutation(len(full))
            k = min(max(1, round(len(full) * float(fraction))), len(full) - 1)
            dev, train = full.subset(np.sort(order[:k])), full.subset(np.sort(order[k:]))
    else:
        raise ValueError(
            f"{CONFIG_KEY}.source = {source!r}; use 'proposals', 'goemotions' or 'table'"
        )
    return {"train": _cap(train, n_train, seed, 0), "dev": _cap(dev, n_dev, seed, 1)}
