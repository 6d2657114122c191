"""The per-run metrics record: version, validation, atomic write, read.

A record is a fact about one run of one cell. Tables, figures and reports are
computed from records only, so a record that cannot be trusted (truncated,
foreign, or of another schema version) is refused with the file named.
"""

from __future__ import annotations

import functools
import json
import math
import os
from pathlib import Path
from typing import Any

import jsonschema
from trainbench.common.atomic_files import atomic_write_text, current_umask  # noqa: F401 - re-exported

SCHEMA_VERSION = 2
STATUSES = ("ok", "failed", "unavailable")
ERROR_CLASSES = (
    "bad_input",
    "oom",
    "compile_failed",
    "unsupported_op",
    "dtype",
    "placement",
    "accelerator_error",
    "build_failed",
    "signal",
    "timeout",
    "nan_loss",
    "unknown",
)

RECORD_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["schema_version", "status", "cell", "attempts", "environment", "spec"],
    "properties": {
        "schema_version": {"const": SCHEMA_VERSION},
        "status": {"enum": list(STATUSES)},
        "device_label": {"type": "string"},
        "cell": {
            "type": "object",
            "required": ["workload", "device", "batch_size", "rep"],
            "properties": {
                "workload": {"type": "string"},
                "device": {"type": "string"},
                "batch_size": {"type": "integer", "minimum": 1},
                "rep": {"type": "integer", "minimum": 0},
            },
        },
        "attempts": {"type": "array", "minItems": 1},
        "error": {
            "type": ["object", "null"],
            "properties": {"class": {"enum": list(ERROR_CLASSES)}},
        },
        "reason": {"type": ["string", "null"]},
        "result": {"type": ["object", "null"]},
        "environment": {"type": "object"},
        "spec": {"type": "object"},
        # Where the final attempt's time went (trainbench.measure.wall_time); absent in records
        # written before it was measured.
        "wall_time": {
            "type": "object",
            "required": ["attempt_seconds", "phases"],
            "properties": {
                "attempt_seconds": {"type": "number", "minimum": 0},
                "phases": {"type": "object", "additionalProperties": {"type": "number"}},
            },
        },
    },
    "allOf": [
        {
            "if": {"properties": {"status": {"const": "ok"}}},
            "then": {"required": ["result"], "properties": {"result": {"type": "object"}}},
        },
        {
            "if": {"properties": {"status": {"const": "failed"}}},
            "then": {
                "required": ["error"],
                "properties": {"error": {"type": "object", "required": ["class"]}},
            },
        },
        {
            "if": {"properties": {"status": {"const": "unavailable"}}},
            "then": {"required": ["reason"], "properties": {"reason": {"type": "string"}}},
        },
    ],
}


class RecordError(ValueError):
    """A metrics file that cannot be used; the message names the file."""


@functools.cache
def _validator() -> jsonschema.protocols.Validator:
    """One validator for every record: ``jsonschema.validate`` would check the schema
    itself again on each call, ~10 ms a record (10 s for 1,000 records)."""
    cls = jsonschema.validators.validator_for(RECORD_SCHEMA)
    cls.check_schema(RECORD_SCHEMA)
    return cls(RECORD_SCHEMA)


def _json_safe(value: Any) -> Any:
    """NaN/inf are not JSON: store them as null so every reader can parse the file."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


def atomic_write_json(path: str | os.PathLike, data: Any) -> None:
    atomic_write_text(
        path, json.dumps(_json_safe(data), indent=2, sort_keys=True, allow_nan=False) + "\n"
    )


def validate_record(record: Any, source: str = "<record>") -> dict:
    if not isinstance(record, dict):
        raise RecordError(
            f"{source}: not a trainbench metrics record (top level is {type(record).__name__})"
        )
    version = record.get("schema_version")
    if version != SCHEMA_VERSION:
        raise RecordError(
            f"{source}: schema_version {version!r} is not the supported version {SCHEMA_VERSION}; "
            "re-run the cell or use the trainbench release that wrote it"
        )
    # What jsonschema.validate reports: the best match among the errors.
    error = jsonschema.exceptions.best_match(_validator().iter_errors(record))
    if error is not None:
        where = "/".join(map(str, error.absolute_path)) or "(top level)"
        raise RecordError(f"{source}: invalid metrics record at {where}: {error.message}")
    return record


def write_record(path: str | os.PathLike, record: dict) -> None:
    record = _json_safe(record)
    validate_record(record, str(path))
    atomic_write_json(path, record)


def read_record(path: str | os.PathLike) -> dict:
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise RecordError(f"{path}: cannot be read ({exc.strerror})") from None
    try:
        record = json.loads(text)
    except json.JSONDecodeError as exc:
        raise RecordError(f"{path}: not valid JSON (truncated or corrupted?): {exc}") from None
    return validate_record(record, str(path))
