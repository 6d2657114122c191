"""Config files as given: config.yaml, each ``--configfile`` and the command line's
``--config``, each checked on its own before they are merged, so that every problem
is named with its file, line and key path and the fix, before any job runs.

A file must exist, be UTF-8 text and valid YAML (or JSON, which Snakemake tries
first), hold a mapping of settings (not a list, a number or nothing), name each key
once (PyYAML would silently keep the last of two), with string keys only (YAML reads
``1:``, ``null:``, ``yes:`` as a number, null, a boolean) and no alias that contains
itself; and what it sets must have the schema's structure and values. What a file
need not hold on its own (required keys, an entry's ``entry``) and what only the
merged config can tell (paths, imports, cross-references) trainbench.config checks
after the merge."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from trainbench.config.schema import (
    describe_error,
    key_path,
    kind_of,
    schema_errors,
    shape_problems,
)

# Every refusal line starts so; the logger plugin shows such an error without
# Snakemake's frame lines around it.
REFUSAL_PREFIX = "trainbench: "
MERGE_TAG = "tag:yaml.org,2002:merge"
STR_TAG = "tag:yaml.org,2002:str"
YAML_FIX = (
    "Fix: correct the syntax there (spaces, not tabs; a closing bracket or quote for "
    "every opening one)."
)


@dataclass
class ConfigLayer:
    """One source of the config: its name (a file, or ``--config``), what it holds,
    the line of each key path (1-based; files read as YAML only) and its problems."""

    name: str
    data: Any = None
    lines: dict[tuple, int] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    def where(self, path: tuple = ()) -> str:
        """``configs/x.yaml line 4`` for the nearest line known of ``path``."""
        for end in range(len(path), -1, -1):
            if path[:end] in self.lines:
                return f"{self.name} line {self.lines[path[:end]]}"
        return self.name

    def refuse(self, path: tuple, text: str) -> None:
        self.problems.append(f"{self.where(path)}: {text}")


def read_config_file(path: str | Path) -> ConfigLayer:
    """The file's content, or its problems (each one line: file, line, key, fix)."""
    layer = ConfigLayer(str(path))
    text = _read_text(Path(path), layer)
    if text is None:
        return layer
    try:
        layer.data = json.loads(text, object_pairs_hook=_json_pairs(layer))
    except ValueError:
        layer.problems.clear()
        _load_yaml(text, layer)
    except RecursionError:
        layer.refuse((), "nested too deeply to read. Fix: flatten the file.")
    if not layer.problems:
        _check_content(layer)
    return layer


class ConfigRefused(Exception):
    """The config cannot be used; ``lines``: the refusal, one ``trainbench:`` line
    per problem, as rules/setup.smk and rules/common.smk print it."""

    def __init__(self, lines: list[str]):
        super().__init__("\n".join(lines))
        self.lines = lines


def config_file_problems(paths: list[str | Path]) -> list[str]:
    """Every problem of every file in ``paths``, each one line naming the file."""
    return [problem for path in paths for problem in read_config_file(path).problems]


def workflow_layers(configfiles: Iterable[str | Path], command_line: Any) -> list[ConfigLayer]:
    """Every source of a workflow's config in reading order: config.yaml, each
    ``--configfile``, then ``--config`` (``command_line``: Snakemake's parsed
    values, or None)."""
    layers = [read_config_file(name) for name in workflow_config_files(configfiles)]
    command_line = ConfigLayer("--config", dict(command_line or {}))
    _check_content(command_line)
    return layers + [command_line]


def refusal_text(message: str, layers: list[ConfigLayer] = ()) -> str:
    """A ConfigError's message (``invalid config:`` and one ``  - problem`` line each)
    as the refusal's lines: ``trainbench: <file> line <n>: <problem>``, each problem
    on one line, with the file (and line) of the last layer that sets the problem's
    key where one does."""
    problems = message.split("\n  - ")
    if len(problems) > 1 and problems[0].rstrip().endswith(":"):
        problems = problems[1:]
    return "\n".join(REFUSAL_PREFIX + _located(p, layers) for p in problems)


def _located(problem: str, layers: list[ConfigLayer]) -> str:
    """``problem`` prefixed by where its first `key` is set (the last layer that sets
    the longest known part of it), unless it names a place already."""
    if not problem.startswith("`"):
        return problem
    path = _parse_key_path(problem[1 : problem.find("`", 1)])
    for end in range(len(path), 0, -1):
        for layer in reversed(list(layers)):
            if path[:end] in layer.lines or (
                layer.name == "--config" and isinstance(layer.data, dict) and path[0] in layer.data
            ):
                return f"{layer.where(path)}: {problem}"
    return problem


def _parse_key_path(text: str) -> tuple:
    """``workloads.a.batch_sizes[0]`` -> ("workloads", "a", "batch_sizes", 0)."""
    parts: list = []
    for piece in text.split("."):
        name, *indices = piece.split("[")
        if name:
            parts.append(name)
        parts += [int(i.rstrip("]")) for i in indices if i.rstrip("]").isdigit()]
    return tuple(parts)


def workflow_config_files(configfiles: Iterable[str | Path]) -> list[str]:
    """The files a workflow's config is read from, in order: config.yaml, then each
    ``--configfile`` (Snakemake's absolute paths, shown relative to the working
    directory where inside it; config.yaml given again is read once)."""
    names = ["config.yaml"]
    for path in map(Path, configfiles):
        if path.resolve() == Path("config.yaml").resolve():
            continue
        try:
            names.append(str(path.relative_to(Path.cwd())))
        except ValueError:
            names.append(str(path))
    return names


def _read_text(path: Path, layer: ConfigLayer) -> str | None:
    if not path.exists():
        layer.problems.append(
            f"config file {str(path)!r} does not exist. Fix: check the path (relative to "
            f"{Path.cwd()})."
        )
        return None
    if path.is_dir():
        layer.problems.append(
            f"config file {str(path)!r} is a folder, not a file. Fix: name the YAML file."
        )
        return None
    try:
        raw = path.read_bytes()
    except OSError as error:
        layer.problems.append(
            f"config file {str(path)!r} cannot be read ({error.strerror}). Fix: check its "
            "permissions."
        )
        return None
    try:
        return raw.decode("utf-8")  # as Snakemake opens it
    except UnicodeDecodeError as error:
        line = raw[: error.start].count(b"\n") + 1
        layer.problems.append(
            f"{path} line {line}: byte 0x{raw[error.start]:02x} is not UTF-8 text. "
            "Fix: save the file as UTF-8."
        )
        return None


def _json_pairs(layer: ConfigLayer):
    def pairs(items: list[tuple[str, Any]]) -> dict:
        seen: set[str] = set()
        for key, _ in items:
            if key in seen:
                layer.problems.append(
                    f"{layer.name}: the key {key!r} appears twice in one object; JSON "
                    "readers keep only the last. Fix: remove one of them."
                )
            seen.add(key)
        return dict(items)

    return pairs


def _load_yaml(text: str, layer: ConfigLayer) -> None:
    """Parse ``text`` as PyYAML's safe_load does, after checking its node tree for
    duplicate and non-string keys and recording the line of every key path."""
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is not None:
            _walk(node, (), layer, set())
        if not layer.problems:
            layer.data = loader.construct_document(node) if node is not None else None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        what = getattr(error, "problem", None) or str(error).splitlines()[0]
        layer.problems.append(f"{layer.name}{where}: not valid YAML ({what}). {YAML_FIX}")
    except RecursionError:
        layer.refuse((), "nested too deeply to read. Fix: flatten the file.")
    finally:
        loader.dispose()


def _walk(node: yaml.Node, path: tuple, layer: ConfigLayer, walked: set[int]) -> None:
    """Duplicate keys, keys that are not strings, and the line of each key path. A
    node reached again through an alias is walked once (its lines stay its first
    path's); shape_problems later catches an alias that contains itself."""
    if id(node) in walked:
        return
    walked.add(id(node))
    if isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            layer.lines.setdefault((*path, i), item.start_mark.line + 1)
            _walk(item, (*path, i), layer, walked)
        return
    if not isinstance(node, yaml.MappingNode):
        return
    seen: dict[str, int] = {}
    for key_node, value_node in node.value:
        line = key_node.start_mark.line + 1
        if key_node.tag == MERGE_TAG:  # `<<: *defaults`: later keys override on purpose
            _walk(value_node, path, layer, walked)
            continue
        under = f"under `{key_path(path)}`" if path else "at the top level"
        if not isinstance(key_node, yaml.ScalarNode) or key_node.tag != STR_TAG:
            kind = key_node.tag.rsplit(":", 1)[-1]
            shown = key_node.value if isinstance(key_node, yaml.ScalarNode) else kind
            layer.problems.append(
                f"{layer.name} line {line}: the key {shown!r} {under} is read by YAML as "
                f"{kind}, not as a name. Fix: quote it ('{shown}':) or rename it."
            )
            continue
        key = key_node.value
        if key in seen:
            layer.problems.append(
                f"{layer.name} line {line}: the key `{key}` {under} appears twice (first on "
                f"line {seen[key]}); YAML would silently keep only the last. Fix: remove "
                "one of them, or merge their settings."
            )
            continue
        seen[key] = line
        layer.lines[(*path, key)] = line
        _walk(value_node, (*path, key), layer, walked)


def _check_content(layer: ConfigLayer) -> None:
    """The layer holds a mapping of settings, plain data of the schema's structure."""
    data = layer.data
    if not isinstance(data, dict):
        what = (
            "is empty (or only comments), which Snakemake refuses"
            if data is None
            else f"holds {kind_of(data)}, not a mapping of settings"
        )
        layer.refuse(
            (),
            f"the file {what}. Fix: write `key: value` lines at the top level (e.g. "
            "`workloads:` with its entries indented under it; see config.yaml), or leave "
            "the file out.",
        )
        return
    for path, problem in shape_problems(data):
        layer.refuse(path, f"{f'`{key_path(path)}`' if path else 'the top level'} {problem}.")
    if layer.problems:
        return
    for error in schema_errors(data):
        path = tuple(error.absolute_path)
        if error.validator == "additionalProperties":
            extra = sorted(set(error.instance) - set(error.schema.get("properties", {})), key=str)
            path = (*path, extra[0]) if extra else path
        elif "propertyNames" in error.relative_schema_path:  # the name's own line
            path = (*path, error.instance)
        layer.refuse(path, describe_error(error))
    # A workload's settings are checked by several parts of the schema (allOf): one
    # wrong type there is one problem, not one per part.
    layer.problems = list(dict.fromkeys(layer.problems))


# What Snakemake itself says when it cannot load a --configfile, before the workflow
# is read: a message that names neither the file nor the line, or (a missing file,
# bytes that are not UTF-8) a traceback through its configfile loader.
SNAKEMAKE_CONFIG_FILE_ERRORS = (
    "Config file must be given as JSON or YAML with keys at top level",
    "Config file is not valid JSON or YAML",
    "in load_configfile",
    "in _load_configfile",
)


def refusal_lines(error_text: str, argv: list[str]) -> list[str] | None:
    """The lines to show instead of an error Snakemake formatted (the logger plugin
    asks): a trainbench refusal without Snakemake's "WorkflowError in file ...,
    line N:" and frame lines around it, so that Snakemake and
    scripts/check_config.py print the same lines; or, for Snakemake's own message
    about a ``--configfile`` of ``argv``, trainbench's lines naming the file, line and
    fix. None: show Snakemake's text as it is."""
    lines = error_text.splitlines()
    first = next((i for i, line in enumerate(lines) if line.startswith(REFUSAL_PREFIX)), None)
    if first is not None:
        kept = []
        for line in lines[first:]:
            if line.lstrip().startswith('File "'):
                break
            kept.append(line)
        return kept
    if not any(message in error_text for message in SNAKEMAKE_CONFIG_FILE_ERRORS):
        return None
    from snakemake.cli import get_argument_parser

    args, _ = get_argument_parser().parse_known_args(argv)
    problems = config_file_problems(list(args.configfile or []))
    return [REFUSAL_PREFIX + problem for problem in problems] or None
