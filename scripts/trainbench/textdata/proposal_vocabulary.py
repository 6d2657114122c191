"""The word lists the proposals generator draws from, and the banned phrases.

:data:`BANNED_PHRASES` is the specification of the ``banned_phrases`` label: the
generator writes one of them into a positive document and the checker looks for any of
them. Every other list here is material for the generator only.
"""

from __future__ import annotations

# The superlatives a "quality" sentence may carry; ordered as the generator draws them.
BANNED_ADJECTIVES: tuple[str, ...] = (
    "world-class",
    "cutting-edge",
    "state-of-the-art",
    "best-in-class",
    "groundbreaking",
    "revolutionary",
    "unparalleled",
    "game-changing",
)
BANNED_PHRASES: tuple[str, ...] = (
    "guaranteed results",
    *BANNED_ADJECTIVES,
    "best in the nation",
    "second to none",
    "unprecedented success",
)

# Every name belongs to a spelling pair and both members are ordinary base names, so a
# variant spelling alone (Smyth, Katherine) says nothing: only the comparison does.
# Four pairs each: a few name tokens, each seen often, so that "both spellings of one
# pair occur" is a pattern a small model trained from scratch can meet many times.
FIRST_NAME_PAIRS = (
    ("Jon", "John"),
    ("Catherine", "Katherine"),
    ("Steven", "Stephen"),
    ("Sara", "Sarah"),
)
SURNAME_PAIRS = (
    ("Smith", "Smyth"),
    ("Reid", "Reed"),
    ("Thompson", "Thomson"),
    ("Clark", "Clarke"),
)


def _variant_map(pairs) -> dict[str, str]:
    out = {}
    for a, b in pairs:
        out[a], out[b] = b, a
    return out


FIRST_NAME_VARIANT = _variant_map(FIRST_NAME_PAIRS)
SURNAME_VARIANT = _variant_map(SURNAME_PAIRS)
FIRST_NAMES = sorted(FIRST_NAME_VARIANT)
SURNAMES = sorted(SURNAME_VARIANT)
HONORIFICS = ("Dr.", "Professor")

TOPICS = (
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
PLACES = (
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
TITLE_VERBS = (
    "Improving",
    "Strengthening",
    "Expanding",
    "Measuring",
    "Rethinking",
    "Scaling",
    "Sustaining",
    "Understanding",
)
TITLE_TEMPLATES = (
    "Title: {verb} {Topic}",
    "Project Title: {verb} {Topic}",
)
# The investigator's first mention (the introduction) and the later ones: every
# template names {pi} once, so each mention is a title and a two-word name.
INTRO_TEMPLATES = (
    "The principal investigator is {pi}.",
    "This proposal is submitted by {pi}.",
    "{pi} will lead the project.",
    "The project is led by {pi}.",
    "Leadership rests with {pi}.",
)
MENTION_TEMPLATES = (
    "{pi} will supervise data collection.",
    "Budget decisions rest with {pi}.",
    "Field staff report to {pi}.",
    "Protocol changes need approval from {pi}.",
    "{pi} will present the findings.",
    "The final report is prepared by {pi}.",
    "Questions should be addressed to {pi}.",
    "Hiring is overseen by {pi}.",
)
OBJECTIVE_INTROS = (
    "",
    "Objectives:",
    "We propose {count} objectives.",
    "The work has {count} objectives.",
)
OBJECTIVE_VERBS = (
    "Measure",
    "Map",
    "Compare",
    "Document",
    "Assess",
    "Evaluate",
    "Pilot",
    "Describe",
)
OBJECTIVE_THINGS = (
    "baseline conditions",
    "seasonal changes",
    "intervention costs",
    "outcomes against controls",
    "staff adoption",
    "household barriers",
    "sensor reliability",
    "long-term effects",
    "regional differences",
    "partner training needs",
)
OBJECTIVE_EXTRAS = (
    "Train local staff",
    "Build a shared database",
    "Publish teaching materials",
    "Share guidance with agencies",
)
CROSSWALK_OPENERS = (
    "Crosswalk: {refs}.",
    "In the standards crosswalk, {refs}.",
    "Alignment with the standards: {refs}.",
    "For reviewers, {refs}.",
)
# Standards are named by letter so that the only numbers near "Objective" are
# objective numbers.
CROSSWALK_REFS = (
    "Objective {k} aligns with Standard {std}",
    "Objective {k} maps to Standard {std}",
    "Objective {k} supports Standard {std}",
    "Standard {std} is met by Objective {k}",
)
STANDARD_NAMES = ("B", "C", "D", "F", "G", "H", "K", "M")
TIMELINE_INTROS = (
    "",
    "The work has {count} phases.",
    "Timeline:",
)
PHASE_TEMPLATES = (
    "Phase {i} runs from {d1} to {d2}.",
    "Phase {i} starts in {d1} and ends in {d2}.",
    "Phase {i}, {activity}, runs from {d1} to {d2}.",
    "Phase {i} ({activity}) lasts from {d1} until {d2}.",
)
PHASE_ACTIVITIES = (
    "recruitment",
    "baseline data collection",
    "the intervention",
    "follow-up visits",
    "analysis",
    "instrument testing",
)
# The single "quality" sentence every document has: a banned phrase in positives, a plain
# phrase of the same kind in negatives, so the sentence itself is no cue.
QUALITY_SLOTS = (
    (
        (
            "The team brings {x} expertise.",
            "The partner sites offer {x} facilities.",
            "Our approach relies on {x} methods.",
        ),
        BANNED_ADJECTIVES,
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
            "The project will deliver {x} for partners.",
            "Funders can expect {x} from this work.",
        ),
        ("guaranteed results", "unprecedented success"),
        ("measurable improvements", "useful evidence", "practical guidance", "reliable estimates"),
    ),
    (
        (
            "Our laboratory is {x} for this research.",
            "The host department is {x} in this field.",
        ),
        ("the best in the nation", "second to none"),
        ("well equipped", "a regional partner", "the natural home", "an experienced host"),
    ),
)
MONTHS = (
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
