"""Config validation and the benchmark matrix.

The JSON Schema in ``schemas/config.schema.yaml`` is the single source of keys,
allowed values and defaults. :mod:`.schema` turns its violations into short messages
that name the key and the fix; :mod:`.checks` adds what a schema cannot express
(paths that must exist, optional packages, an own model's entry); :mod:`.files`
reads each config file with its lines; :mod:`.matrix` expands workload x device x
batch size x repeat into cells. This module validates a merged config and re-exports
the matrix's names (``from trainbench import config as tbconfig``).
"""

from __future__ import annotations

from pathlib import Path

from trainbench.config.matrix import (
    FAULTS_ENV,
    INHERITED_KEYS,
    MATRIX_KEYS,
    MIN_COMPILE_WARMUP_STEPS,
    Cell,
    DeviceVariant,
    RunOrder,
    baseline_device,
    batch_sizes_for,
    cell_spec,
    compile_modes,
    config_hash,
    device_variants,
    enabled_workloads,
    expand_matrix,
    faults_for,
    find_variant,
    iter_device_ids,
    launcher_settings,
    repeat_settings,
    run_order,
    settle_inherited_keys,
    workload_devices,
)
from trainbench.config.schema import (
    SCHEMA_PATH,
    ConfigError,
    describe_error,
    load_schema,
    structure_problems,
    validator_with_defaults,
)


def validate_config(config: dict) -> dict:
    """Validate ``config`` in place against the schema, fill defaults, run the
    semantic checks, and return it. Raises ConfigError with every problem found
    (a config of any structure too: not a mapping, keys that are not strings...)."""
    # imported here: a cell imports this package for its matrix, never its checks
    from trainbench.config.checks import semantic_problems, unknown_workload_problems

    structure = structure_problems(config)
    if structure:
        raise ConfigError("invalid config:\n  - " + "\n  - ".join(structure))
    unknown = unknown_workload_problems(config)
    if unknown:
        raise ConfigError("invalid config:\n  - " + "\n  - ".join(unknown))
    validator = validator_with_defaults(load_schema())
    errors = sorted(validator.iter_errors(config), key=lambda e: list(map(str, e.absolute_path)))
    if errors:
        lines = sorted({describe_error(e) for e in errors})
        raise ConfigError("invalid config:\n  - " + "\n  - ".join(lines))
    normalise(config)
    problems = semantic_problems(config)
    if problems:
        raise ConfigError("invalid config:\n  - " + "\n  - ".join(problems))
    return config


def normalise(config: dict) -> None:
    overrides = [w.get("autocast") or {} for w in (config.get("workloads") or {}).values()]
    for settings in [*config.get("device_settings", {}).values(), *overrides]:
        if settings.get("autocast") is False:  # YAML 1.1 reads `off` as false
            settings["autocast"] = "off"
    for override in overrides:
        for backend, value in override.items():
            if value is False:
                override[backend] = "off"


def read_merged_config(paths: list[str | Path]) -> tuple[dict, dict[str, dict[str, str]]]:
    """The config ``paths`` (config.yaml first, then overrides) make, merged as
    Snakemake merges them, validated and with its defaults filled, and where each
    workload's repeats came from; raises ConfigRefused naming every problem."""
    from snakemake.utils import update_config
    from trainbench.config.files import (
        REFUSAL_PREFIX,
        ConfigRefused,
        read_config_file,
        refusal_text,
    )

    layers = [read_config_file(path) for path in paths]
    problems = [problem for layer in layers for problem in layer.problems]
    if problems:
        raise ConfigRefused([REFUSAL_PREFIX + problem for problem in problems])
    merged: dict = {}
    for layer in layers:
        update_config(merged, layer.data)
    origins = settle_inherited_keys(merged, [(layer.name, layer.data) for layer in layers])
    try:
        validate_config(merged)
    except ConfigError as error:
        raise ConfigRefused(refusal_text(str(error), layers).splitlines()) from None
    return merged, origins


__all__ = [
    "FAULTS_ENV", "INHERITED_KEYS", "MATRIX_KEYS", "MIN_COMPILE_WARMUP_STEPS",
    "SCHEMA_PATH", "Cell", "ConfigError", "DeviceVariant", "RunOrder",
    "baseline_device", "batch_sizes_for", "cell_spec", "compile_modes", "config_hash",
    "device_variants", "enabled_workloads", "expand_matrix", "faults_for", "find_variant",
    "iter_device_ids", "launcher_settings", "load_schema", "normalise",
    "read_merged_config", "repeat_settings", "run_order", "settle_inherited_keys",
    "validate_config", "workload_devices",
]  # fmt: skip
