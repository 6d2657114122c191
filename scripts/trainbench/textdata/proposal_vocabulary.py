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
FIRST_NAME_PAIRS = (
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
SURNAME_PAIRS = (
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
    "Title: {verb} {Topic} in {Place}",
    "Title: {verb} {Topic} Across {Place}",
    "Title: {Topic} for {Place}: A Field Study",
    "Project Title: {verb} {Topic}",
)
INTRO_TEMPLATES = (
    "The principal investigator is {pi}, who has led several earlier studies of {topic}.",
    "This proposal is submitted by {pi} on behalf of a team of practitioners and researchers.",
    "{pi} will serve as principal investigator and coordinate all partner activities.",
    "Leadership rests with {pi}, whose prior work examined {topic} in {place}.",
    "The project is led by {pi}, who has worked with partners in {place} for many years.",
)
MENTION_TEMPLATES = (
    "{pi} will supervise data collection and review every quarterly report.",
    "Budget decisions will be approved by {pi} in consultation with the advisory board.",
    "Field staff will report weekly to {pi} during the active periods of work.",
    "Any change to the study protocol requires written approval from {pi}.",
    "{pi} will present the findings at two regional meetings.",
    "The final report will be prepared by {pi} together with the partner sites.",
    "Questions about data access should be addressed to {pi}.",
    "Hiring of the project coordinator will be overseen by {pi}.",
)
OBJECTIVE_INTROS = (
    "The project pursues the following objectives.",
    "Specific objectives are listed below.",
    "The work is organized around {count} objectives.",
    "We propose {count} objectives.",
    "Objectives:",
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
OBJECTIVE_EXTRAS = (
    "Train local staff in standard data collection procedures",
    "Build a shared database of site observations",
    "Publish open teaching materials for partner schools",
    "Share practical guidance with regional agencies",
)
CROSSWALK_OPENERS = (
    "In the standards crosswalk, {refs}.",
    "The crosswalk to the state framework is as follows: {refs}.",
    "Alignment with the regional standards: {refs}.",
    "For reviewers, {refs}.",
)
CROSSWALK_REFS = (
    "Objective {k} aligns with Standard {std}",
    "Objective {k} maps to Standard {std}",
    "Objective {k} supports Standard {std}",
    "Standard {std} is addressed by Objective {k}",
)
TIMELINE_INTROS = (
    "",
    "The timeline has {count} phases.",
    "Work proceeds in {count} phases.",
    "The schedule is summarized below.",
)
PHASE_TEMPLATES = (
    "Phase {i} begins on {d1} and ends on {d2}.",
    "Phase {i} runs from {d1} to {d2}.",
    "Phase {i} starts on {d1} and is completed by {d2}.",
    "Phase {i}, {activity}, runs from {d1} to {d2}.",
    "Phase {i} ({activity}) opens on {d1} and closes on {d2}.",
)
PHASE_ACTIVITIES = (
    "site recruitment",
    "baseline data collection",
    "the main intervention",
    "follow-up visits",
    "analysis and reporting",
    "instrument testing",
)
# The single "quality" sentence every document has: a banned phrase in positives, a plain
# phrase of the same kind in negatives, so the sentence itself is no cue.
QUALITY_SLOTS = (
    (
        (
            "The team brings {x} expertise in {topic}.",
            "The partner sites offer {x} facilities for this work.",
            "Our approach relies on {x} methods adapted to local conditions.",
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
FILLERS = (
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
