"""The config's JSON Schema turned into short messages: each violation one sentence
naming the key, what is wrong and the fix. Also the checks that come before any
schema can run: a config (or one config file) must be a tree of mappings with string
keys, without loops, of a readable size, whatever YAML structure it was read from.

The schema (``schemas/config.schema.yaml``) is the single source of keys, allowed
values and defaults; trainbench.config validates the merged config against it and
fills the defaults. This module only checks, before any job: it never changes a
config."""

from __future__ import annotations

import copy
import math
from collections.abc import Iterable, Iterator
from functools import lru_cache
from pathlib import Path
from typing import Any

import jsonschema
import yaml
from trainbench.config.names import name_problem, safe_suggestion

SCHEMA_PATH = Path(__file__).parent / "schemas" / "config.schema.yaml"


class ConfigError(ValueError):
    """A config problem, phrased for the user: the key, what is wrong, the fix."""


def load_schema() -> dict:
    """The config schema (47 kB of YAML: libyaml's C loader reads it in ~15 ms where the
    pure-Python one takes ~150 ms, paid at every Snakemake start)."""
    with open(SCHEMA_PATH) as fh:
        return yaml.load(fh, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def validator_with_defaults(schema: dict):
    """A validator that also fills in the schema's defaults (as Snakemake's validate does)."""
    base = jsonschema.validators.validator_for(schema)
    validate_properties = base.VALIDATORS["properties"]

    def set_defaults(validator, properties, instance, subschema):
        if isinstance(instance, dict):
            for name, prop in properties.items():
                if "default" in prop and name not in instance:
                    instance[name] = copy.deepcopy(prop["default"])
        yield from validate_properties(validator, properties, instance, subschema)

    return jsonschema.validators.extend(base, {"properties": set_defaults})(schema)


# More values than this (after YAML aliases are expanded) is not a config but an
# accident or an alias bomb: refused before the schema would walk it.
MAX_VALUES = 100_000
TYPE_WORDS = {
    "array": "a list",
    "object": "a mapping",
    "integer": "a whole number",
    "number": "a number",
    "string": "a string",
    "boolean": "true or false",
    "null": "null",
}


def key_path(path: Iterable[Any]) -> str:
    """``workloads.image_cnn.batch_sizes[0]`` from its parts."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _type_fix(path: list, value: Any, expected: str) -> str:
    """How to write ``value`` as the ``expected`` JSON type, as one phrase."""
    name = next((str(p) for p in reversed(path) if not isinstance(p, int)), "it")
    scalar = isinstance(value, (str, int, float, bool)) or value is None
    if expected == "array":
        if scalar and value is not None:
            return f"write it as a list: `{name}: [{value}]`"
        return f"write it as a list: `{name}: [a, b]`, or one `- item` per line under `{name}:`"
    if expected == "object":
        if len(path) == 2 and path[0] == "workloads":
            return (
                f"write its settings as `key: value` lines indented under `{name}:`, or "
                f"`{name}: {{}}` to run it with its defaults"
            )
        return f"write it as a mapping: `key: value` lines indented under `{name}:`"
    if expected == "string":
        return f'quote it: `{name}: "{value}"`' if scalar else "write it as one quoted string"
    if expected in ("integer", "number"):
        return "write a number without quotes"
    if expected == "boolean":
        return "write true or false"
    return "write it as the type named"


def _type_words(expected: Any) -> str:
    kinds = expected if isinstance(expected, list) else [expected]
    return " or ".join(TYPE_WORDS.get(k, str(k)) for k in kinds)


# Keys an earlier release took, and what replaced them: (parent key, old key) -> the fix.
REPLACED_KEYS = {
    ("timing", "disturbed_other_cores"): "`timing.disturbed_other_cores` (cores busy anywhere "
    "on the machine) was replaced by `timing.disturbed_core_share`, a share of the time of "
    "the cores the cell uses (default 0.1): remove it, or write that key instead.",
}


def describe_error(error: jsonschema.ValidationError) -> str:
    """One sentence for one schema violation: the key, what is wrong, the fix."""
    path = list(error.absolute_path)
    key = key_path(path)
    value = error.instance
    validator = error.validator
    if validator == "additionalProperties":
        extra = sorted(set(value) - set(error.schema.get("properties", {})), key=str)
        allowed = ", ".join(sorted(error.schema.get("properties", {})))
        where = f"under `{key}`" if path else "at the top level"
        replaced = [REPLACED_KEYS[(key, e)] for e in extra if (key, e) in REPLACED_KEYS]
        return (
            f"unknown key {', '.join(f'`{e}`' for e in extra)} {where}. "
            f"Allowed keys: {allowed}. Fix: {' '.join(replaced) or 'remove or rename it.'}"
        )
    if validator == "enum":
        allowed = ", ".join(str(v) for v in error.validator_value if v is not False)
        return f"`{key}` is {_short(value)}; allowed values: {allowed}."
    if validator == "type":
        expected = error.validator_value
        return (
            f"`{key}` is {_short(value)} ({type(value).__name__}); it must be "
            f"{_type_words(expected)} (type {expected}). Fix: "
            f"{_type_fix(path, value, expected if isinstance(expected, str) else expected[0])}."
        )
    if validator in ("minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"):
        words = {
            "minimum": "at least",
            "exclusiveMinimum": "greater than",
            "maximum": "at most",
            "exclusiveMaximum": "less than",
        }[validator]
        return f"`{key}` is {value!r}; it must be {words} {error.validator_value}."
    if validator == "required":
        return f"{error.message} (at `{key}`). Fix: add it."
    if validator == "minItems":
        return f"`{key}` is empty; give at least {error.validator_value} item(s)."
    if validator == "uniqueItems":
        return f"`{key}` has repeated items: {_short(value)}."
    if validator == "minProperties":
        return f"`{key}` is empty; name at least one entry."
    if validator == "pattern" and "propertyNames" in error.relative_schema_path:
        return name_problem(key, value) or f"`{key}`: {error.message}"
    if validator == "pattern" and key == "run_name":
        return (
            f"`run_name` is {_short(value)}, not one folder name under results/ (a letter or "
            "digit, then letters, digits, `.`, `_` or `-`). Fix: rename it, e.g. to "
            f"{safe_suggestion(str(value))!r}."
        )
    if validator == "pattern":
        form = error.schema.get("description") or f"the pattern {error.validator_value}"
        return f"`{key}` is {_short(value)}, not of the form {form} Fix: write it in that form."
    if validator == "oneOf":
        # Report the closest alternative's reason rather than jsonschema's dump.
        specific = [e for e in error.context if e.validator != "type"]
        if specific:
            return describe_error(specific[0])
        kinds = []
        for e in error.context:  # each alternative's own type ($ref ones included)
            for kind in (
                e.validator_value if isinstance(e.validator_value, list) else [e.validator_value]
            ):
                if kind not in kinds:
                    kinds.append(kind)
        fix = _type_fix(path, value, kinds[0]) if kinds else "write it as one of those"
        return (
            f"`{key}` is {_short(value)} ({type(value).__name__}); it must be "
            f"{_type_words(kinds)}. Fix: {fix}."
        )
    return f"`{key}`: {error.message}"


def _partial_validator_class(schema: dict):
    """A validator class for one config file of several: a file need not hold every
    required key, nor give a mapping entries another file gives (the merged config is
    checked for those). Fills nothing in."""
    base = jsonschema.validators.validator_for(schema)

    def nothing(validator, value, instance, subschema) -> Iterator:
        return iter(())

    return jsonschema.validators.extend(base, {"required": nothing, "minProperties": nothing})


@lru_cache(maxsize=1)
def _partial_validator() -> jsonschema.protocols.Validator:
    """One validator for every file of a run (the schema takes 0.25 s to read): it
    only reads the schema, never changes it."""
    schema = load_schema()
    return _partial_validator_class(schema)(schema)


def schema_errors(config: dict) -> list[jsonschema.ValidationError]:
    """The schema's violations in one config file of several (see
    _partial_validator_class), sorted by key path. (The merged config is validated,
    and its defaults filled, by trainbench.config.validate_config.)"""
    errors = _partial_validator().iter_errors(config)
    return sorted(errors, key=lambda e: list(map(str, e.absolute_path)))


def kind_of(value: Any) -> str:
    """What a YAML value is, in words: "a list", "the int 42", "nothing (empty)"."""
    if value is None:
        return "nothing (empty)"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, str):
        return f"the string {_short(value, 40)}"
    return f"the {type(value).__name__} {_short(value, 40)}"


def structure_problems(config: Any) -> list[str]:
    """Why ``config`` (merged, or as given to validate_config) is not a tree of
    mappings with string keys that the schema can be run on; [] when it is."""
    if not isinstance(config, dict):
        return [
            f"the config is {kind_of(config)}, not a mapping of settings. Fix: write "
            "`key: value` lines at the top level (`workloads:` and its entries; see "
            "config.yaml)."
        ]
    return [
        f"{f'`{key_path(path)}`' if path else 'the top level'} {problem}."
        for path, problem in shape_problems(config)
    ]


def shape_problems(data: Any) -> list[tuple[tuple, str]]:
    """(key path, problem) for each place where ``data`` is not a plain tree with
    string keys: a key that is not a string (YAML reads ``1:``, ``null:``, ``yes:`` as
    a number, null, a boolean), a value that contains itself, or more than MAX_VALUES
    values. Run before the schema, which would fail on any of them."""
    problems: list[tuple[tuple, str]] = []
    count = 0
    stack = [(data, (), frozenset())]
    while stack:
        value, path, ancestors = stack.pop()
        count += 1
        if count > MAX_VALUES:
            return [((), f"holds more than {MAX_VALUES:,} values (YAML aliases expanded)")]
        if id(value) in ancestors:
            problems.append(
                (
                    path,
                    "contains itself (a YAML alias inside its own anchor). Fix: write the value out",
                )
            )
            continue
        inner = ancestors | {id(value)} if isinstance(value, (dict, list)) else ancestors
        if isinstance(value, dict):
            for key, item in value.items():
                if not isinstance(key, str):
                    problems.append((path, _key_problem(key)))
                    continue
                stack.append((item, (*path, key), inner))
        elif isinstance(value, list):
            stack.extend((item, (*path, i), inner) for i, item in enumerate(value))
        elif isinstance(value, float) and not math.isfinite(value):
            problems.append((path, _non_finite_problem(value)))
    return sorted(problems, key=lambda p: list(map(str, p[0])))


def _non_finite_problem(value: float) -> str:
    return (
        f"is {value}, not a finite number (YAML reads .inf, -.inf, .nan and numbers too "
        "large for a float, such as 1.0e+999, so). Fix: write a finite number"
    )


def _key_problem(key: Any) -> str:
    kind = "null" if key is None else type(key).__name__
    return (
        f"has the key {key!r}, which YAML reads as {kind}, not as a name. "
        f"Fix: quote it ('{key}':) or rename it"
    )
