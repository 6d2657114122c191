"""Names that become paths and Snakemake wildcards: a workload's name is a folder of
``results/runs/``, ``results/data/``, ``results/logs/`` and ``reports/``, and a
wildcard value; the run name is the folder under ``results/``. Only names that stay
one plain path component, and match themselves as a regular expression, are allowed
(the schema's ``propertyNames`` of ``workloads`` holds the same pattern)."""

from __future__ import annotations

import re

SAFE_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,63}$")
SAFE_NAME_WORDS = (
    "a letter followed by at most 63 letters, digits, `_` or `-` (no `/`, `.`, "
    "spaces or other characters: the name becomes a results folder and a Snakemake wildcard)"
)


def is_safe_name(name: object) -> bool:
    return isinstance(name, str) and SAFE_NAME.match(name) is not None


def safe_suggestion(name: str) -> str:
    """A safe name close to ``name`` (``my/model`` -> ``my_model``)."""
    words = re.sub(r"[^A-Za-z0-9_-]+", "_", str(name)).strip("_-")
    if not words or not words[0].isalpha():
        words = "w_" + words
    return words[:64]


def name_problem(key: str, name: object) -> str | None:
    """The refusal of an unsafe name at ``key`` (``workloads``), or None."""
    if is_safe_name(name):
        return None
    return (
        f"`{key}` has the name {name!r}, which is not {SAFE_NAME_WORDS}. "
        f"Fix: rename it, e.g. to {safe_suggestion(str(name))!r}."
    )
