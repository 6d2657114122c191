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

# The investigators' names, and for each surname its one misspelling (a transposed or
# a dropped letter). A misspelling is never the correct spelling of any name, so the
# name_inconsistency evidence is local: a name form that only an inconsistent document
# writes, at a later mention of the same person. One form per surname, and first names
# always right, so each form is in about 1 in 13 documents at the default frequency
# (with two forms for each of the eight names, a from-scratch model did not learn them).
FIRST_NAMES_LIST: tuple[str, ...] = ("Catherine", "John", "Sarah", "Stephen")
SURNAME_TYPOS: dict[str, tuple[str, ...]] = {
    "Smith": ("Smtih",),
    "Reid": ("Ried",),
    "Thompson": ("Thomspon",),
    "Clark": ("Clakr",),
}
FIRST_NAMES = sorted(FIRST_NAMES_LIST)
SURNAMES = sorted(SURNAME_TYPOS)
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
    "We propose three objectives.",
    "The work has three objectives.",
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
