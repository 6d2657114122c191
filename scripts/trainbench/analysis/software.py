"""The software a record measured with, and the labels that keep different software apart.

A record's **software** is what decides its speed besides the hardware: the torch
version (``environment.torch_version``), the behaviour digest of the measuring code
(``environment.code.behaviour``, trainbench.common.code_identity) and the behaviour
variables in force (``environment.behaviour_variables``: ONEDNN_MAX_CPU_ISA, thread
counts ...). Records of one device on one machine that differ in any of these are split
like hardware, never averaged: every device label becomes ``device@hardware · torch
2.5.1`` (only the fields that differ name the split). What does not decide speed —
Python, numpy and the other packages, the code's source where its behaviour is the same
— never splits; every difference is listed in ``software.csv`` with the reason.

A record that does not name a field (older records have no behaviour digest; a cell whose
child died never named its torch) takes the value of its results folder's other records
of that device where they name exactly one, else the folder's, else stays "not recorded"
and adds no part to its label: a missing value never splits on its own.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping

from trainbench.analysis.record_view import Environment, view_record

NOTE_COLUMNS = ["field", "values", "split", "reason"]
NOT_RECORDED = "not recorded"
TORCH, CODE = "torch", "measurement code"
VARIABLE = "variable "  # a behaviour variable's field: "variable ONEDNN_MAX_CPU_ISA"
UNSET = "unset"
CODE_CHARS = 8  # a behaviour digest in a label ("code 31d2e790")


def splitting_facts(env: Environment) -> dict[str, str | None]:
    """The facts that decide speed (None: not recorded): torch, the measuring code's
    behaviour, each behaviour variable ("unset" where the record lists the variables and
    not this one)."""
    facts: dict[str, str | None] = {TORCH: env.torch_version or None, CODE: env.behaviour}
    for name, value in (env.behaviour_variables or {}).items():
        facts[VARIABLE + str(name)] = str(value)
    return facts


def other_facts(env: Environment) -> dict[str, str | None]:
    """Software facts that never split: Python, each tracked package but torch (its
    version string is ``torch``), and the trainbench code's label."""
    facts: dict[str, str | None] = {"python": env.python or None}
    for name, version in sorted(env.packages.items()):
        if name != "torch":
            facts[f"package {name}"] = str(version)
    facts["trainbench code"] = env.code_label
    return facts


def _with_variables_unset(facts: dict[str, dict[str, str | None]], envs: Mapping) -> None:
    """Every behaviour variable any record names, in every record: "unset" where the
    record lists its variables without it, None where it lists none."""
    names = {f for row in facts.values() for f in row if f.startswith(VARIABLE)}
    for src, row in facts.items():
        listed = envs[src].behaviour_variables is not None
        for name in names:
            row.setdefault(name, UNSET if listed else None)


def _fill_missing(
    facts: dict[str, dict[str, str | None]],
    folders: Mapping[str, str],
    machines: Mapping[str, str],
) -> None:
    """A record's missing fact from its results folder's records of its device, else of
    the folder, where those name exactly one value."""
    scopes = (lambda s: (folders.get(s, ""), machines[s]), lambda s: folders.get(s, ""))
    for scope in scopes:
        seen: dict[tuple, set] = defaultdict(set)
        for src, row in facts.items():
            for name, value in row.items():
                if value is not None:
                    seen[(scope(src), name)].add(value)
        for src, row in facts.items():
            for name, value in row.items():
                found = seen.get((scope(src), name), set())
                if value is None and len(found) == 1:
                    row[name] = next(iter(found))


def _part(name: str, value: str) -> str:
    if name == TORCH:
        return f"torch {value}"
    if name == CODE:
        return f"code {value[:CODE_CHARS]}"
    return f"{name.removeprefix(VARIABLE)}={value}"


def software_labels(
    records: list[tuple[str, dict]],
    machines: Mapping[str, str],
    folders: Mapping[str, str] | None = None,
) -> tuple[dict[str, str], list[dict]]:
    """Each record's software label ("torch 2.5.1 · code 31d2e790"; empty for every
    record when no device of one machine, ``machines``: trainbench.analysis.hardware.
    machine_devices, ran with more than one software) and the notes of ``software.csv``
    (:func:`software_notes`). ``folders``: each record's results folder ("" own)."""
    folders = folders or {}
    envs = {src: view_record(r).environment for src, r in records}
    facts = {src: splitting_facts(env) for src, env in envs.items()}
    _with_variables_unset(facts, envs)
    recorded = {src: dict(row) for src, row in facts.items()}  # the notes count these
    _fill_missing(facts, folders, machines)
    by_machine: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for src, row in facts.items():
        for name, value in row.items():
            if value is not None:
                by_machine[machines[src]][name].add(value)
    naming = sorted(
        {name for fields in by_machine.values() for name, v in fields.items() if len(v) > 1},
        key=lambda n: (n != TORCH, n != CODE, n),
    )
    labels = {
        src: " · ".join(_part(n, row[n]) for n in naming if row.get(n) is not None)
        for src, row in facts.items()
    }
    others = {src: other_facts(env) for src, env in envs.items()}
    return labels, software_notes(recorded, others, naming)


def _values_text(values: list[str | None]) -> str:
    """``2.5.1 (6 records); 2.13.0+cpu (6 records); not recorded (1 record)``."""
    counts = Counter(NOT_RECORDED if v is None else v for v in values)
    ordered = sorted(counts, key=lambda v: (v == NOT_RECORDED, v))
    return "; ".join(f"{v} ({counts[v]} record{'s' * (counts[v] != 1)})" for v in ordered)


def _reason(name: str, split: bool, facts: Mapping[str, Mapping]) -> str:
    if split:
        return (
            f"records of one device on one machine differ in {name}, which decides speed: "
            "each value is its own device, never averaged with the others"
        )
    if name in (TORCH, CODE) or name.startswith(VARIABLE):
        return (
            "the values differ only between devices or machines that are apart anyway "
            "(each kept its own label)"
        )
    if name == "trainbench code":
        codes = {row.get(CODE) for row in facts.values()}
        if None in codes:
            return (
                "some records do not record the measuring code's behaviour digest; a "
                "source difference alone does not split"
            )
        if len(codes) == 1:
            return (
                "the source differs but the measuring code's behaviour digest is the same "
                "(analysis code, comments or moves): speed is comparable"
            )
        return "the measuring code's behaviour digest (measurement code) decides instead"
    return "does not decide speed (torch, the measuring code and the behaviour variables do)"


def software_notes(
    facts: Mapping[str, Mapping[str, str | None]],
    others: Mapping[str, Mapping[str, str | None]],
    naming: list[str],
) -> list[dict]:
    """One row per software field with more than one recorded value among the merged
    records: ``field``; ``values``, each value with its count of records ("not recorded"
    for those without it); ``split`` ("split": it names devices apart; "did not split");
    ``reason``. Empty when every record shares one software."""
    rows = []
    for table in (facts, others):
        fields = sorted({name for row in table.values() for name in row})
        for name in fields:
            values = [row.get(name) for row in table.values()]
            if len({v for v in values if v is not None}) < 2:
                continue
            split = name in naming
            rows.append(
                {
                    "field": name,
                    "values": _values_text(values),
                    "split": "split" if split else "did not split",
                    "reason": _reason(name, split, facts),
                }
            )
    return rows
