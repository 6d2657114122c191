"""A fingerprint of what the measurement code *does*, not of where it lives (the
evidence folders check it; every record names its digest, ``environment.code.behaviour``).

The first fingerprint hashed files by path: moving a function to another module, or
splitting a module in two, marked every piece of GPU evidence stale although no
measurement could have changed, and cleanups were refused for it. This one hashes
**definitions**:

* every Python file of measurement code is parsed; each top-level function, each
  method (``Class.method``), each class's own statements (its attributes, bases and
  decorators, without its methods) and each module-level statement is a **unit**,
  named by its qualified name inside its module (``TrainingLoop.evaluate``,
  ``MAX_EXTENSION_REGIONS``), never by the module's path;
* a unit's digest is the SHA-256 of its AST with docstrings removed (comments and
  formatting are not in the AST), dumped without positions and without empty fields
  (:func:`stable_dump`: the same text on Python 3.10 to 3.13, where ``ast.dump``
  differs);
* **import statements are left out**: after a move they differ (``from trainbench.x``
  becomes ``from trainbench.run.x``) while binding the same objects; what those
  objects do is fingerprinted where they are defined;
* units of the same name in different modules are kept as the sorted set of their
  digests: moving a definition, renaming or splitting a module, or deleting an exact
  duplicate of a definition that stays elsewhere under the same name changes
  nothing; editing any statement, default or constant does.

Files that are not Python (Snakefile, rules, the schema, the default profile, a
suite's YAML) keep a SHA-256 of their bytes, by path. What this cannot see: an import
that starts binding a *different* object of the same name (a behaviour change made
only in an import line) — the object's own definition is unchanged, so only review
catches that.
"""

from __future__ import annotations

import ast
import contextlib
import fnmatch
import functools
import hashlib
import json
import re
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

from trainbench.common.atomic_files import atomic_write_text

# Code that measures: the package, the entry scripts cells and data sets run through,
# the workflow rules that set a cell's threads and slots, the default config and the
# schema's defaults. Benchmarks are measurement code of their own results. (The
# evidence folders, trainbench.evidence, check theirs against these lists.)
MEASUREMENT_CODE = (
    "scripts/trainbench/**/*.py",
    "scripts/trainbench/config/schemas/config.schema.yaml",
    "scripts/run_cell.py",
    "scripts/run_reference.py",
    "scripts/prepare_data.py",
    "Snakefile",
    "rules/common.smk",
    "rules/data.smk",
    "rules/run.smk",
    "profiles/default/config.yaml",
    "benchmarks/throughput.py",
    "benchmarks/canary_cost.py",
)
# Files under those patterns that only read records (tables, statistics, figures,
# reports), check configs before any job, or package evidence: changing them never
# changes a measurement, and ``render`` remakes their output from the records. The
# parity-power study (bench/parity_*) is a CPU benchmark no evidence folder holds.
ANALYSIS_ONLY = (
    "scripts/trainbench/analysis/stats/*",
    "scripts/trainbench/analysis/figures/*",
    "scripts/trainbench/analysis/aggregate.py",
    "scripts/trainbench/analysis/loss_tables.py",
    "scripts/trainbench/analysis/record_view.py",
    "scripts/trainbench/analysis/setups.py",
    "scripts/trainbench/analysis/software.py",
    "scripts/trainbench/analysis/record_identity.py",
    "scripts/trainbench/analysis/hardware.py",
    "scripts/trainbench/analysis/report.py",
    "scripts/trainbench/analysis/report_tables.py",
    "scripts/trainbench/analysis/html.py",
    "scripts/trainbench/analysis/tables.py",
    "scripts/trainbench/analysis/published.py",
    "scripts/trainbench/analysis/console.py",
    "scripts/trainbench/analysis/redraw.py",
    "scripts/trainbench/config/checks.py",
    "scripts/trainbench/config/files.py",
    "scripts/trainbench/config/entry_check.py",
    "scripts/trainbench/launch/rerun.py",
    "scripts/trainbench/launch/recover.py",
    "scripts/trainbench/common/behaviour.py",  # the fingerprint itself (evidence's, moved)
    "scripts/trainbench/evidence/*",  # packaging and checking (run: its command is recorded)
    "scripts/trainbench/offline/*",
    "scripts/trainbench/bench/parity_*",
    "scripts/trainbench/bench/workers.py",  # the parity-power study's process pool
    # Results files made from published tables or records, never a cell's code.
    "scripts/trainbench/bench/gpu_host.py",
    "scripts/trainbench/bench/gpu_host_noise.py",
    "scripts/trainbench/bench/torch_versions.py",
    "scripts/trainbench/bench/eval_calibration_cost.py",
    # A toy workflow of sleeps, never a cell (its Snakefile applies launch/scheduler_passes,
    # which is measurement code: it changes what runs beside a timed cell).
    "scripts/trainbench/bench/scheduler_timers.py",
    "scripts/trainbench/bench/host_stability.py",  # a host's speed over time, no cell
    # The MPS emulator and make mps-ready: installed only in a cell whose spec asks for
    # it (a readiness check, never a measurement; no evidence folder holds one).
    "scripts/trainbench/measure/mps_emulator/*",
    "scripts/trainbench/launch/readiness.py",
)
BEHAVIOUR_CACHE_PREFIX = "trainbench-behaviour-"
DIGEST_CHARS = 12  # a record's code.behaviour

VERSION = 3
METHOD = (
    "behaviour fingerprint v3: per unit (top-level function, method, class body without "
    "its methods, module-level statement other than an import), SHA-256 of its AST "
    "without docstrings, positions or empty fields, keyed by its qualified name inside its module "
    "(not by path; the set of digests where several modules define the name); non-Python "
    "files by path and SHA-256 of their bytes"
)


def _without_docstring(body: list[ast.stmt]) -> list[ast.stmt]:
    first = body[0] if body else None
    if (
        isinstance(first, ast.Expr)
        and isinstance(first.value, ast.Constant)
        and isinstance(first.value.value, str)
    ):
        return body[1:]
    return body


def _strip(node: ast.AST) -> ast.AST:
    """``node`` with the docstring of every function and class inside it removed."""
    for inner in ast.walk(node):
        if isinstance(inner, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            inner.body = _without_docstring(inner.body) or [ast.Pass()]
    return node


def stable_dump(node: object) -> str:
    """``node`` as text, the same on every Python this project supports: node types
    and their fields, without positions, and without fields that are None or empty
    (``ast.dump``'s text differs between versions: 3.12 added ``type_params=[]`` to
    every function and class)."""
    if isinstance(node, ast.AST):
        fields = []
        for name in node._fields:
            value = getattr(node, name, None)
            if value is None or (isinstance(value, list) and not value):
                continue
            fields.append(f"{name}={stable_dump(value)}")
        return f"{type(node).__name__}({', '.join(fields)})"
    if isinstance(node, list):
        return "[" + ", ".join(stable_dump(item) for item in node) + "]"
    return repr(node)


def digest(node: ast.AST) -> str:
    return hashlib.sha256(stable_dump(_strip(node)).encode()).hexdigest()


def _statement_name(stmt: ast.stmt) -> str:
    """A module- or class-level statement's name: what it assigns, else its kind and
    its own digest (an ``if`` block, a call)."""
    targets: list[ast.expr] = []
    if isinstance(stmt, ast.Assign):
        targets = stmt.targets
    elif isinstance(stmt, ast.AnnAssign | ast.AugAssign):
        targets = [stmt.target]
    names = [ast.unparse(t) for t in targets]
    if names:
        return " = ".join(names)
    return f"<{type(stmt).__name__.lower()}>"


def units(source: str) -> Iterator[tuple[str, str]]:
    """(qualified name, digest) of every unit of one module's ``source``."""
    tree = ast.parse(source)
    for stmt in _without_docstring(tree.body):
        if isinstance(stmt, ast.Import | ast.ImportFrom):
            continue
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef):
            yield stmt.name, digest(stmt)
        elif isinstance(stmt, ast.ClassDef):
            methods = [
                s for s in stmt.body if isinstance(s, ast.FunctionDef | ast.AsyncFunctionDef)
            ]
            for method in methods:
                yield f"{stmt.name}.{method.name}", digest(method)
            own = [s for s in _without_docstring(stmt.body) if s not in methods]
            shell = ast.ClassDef(
                name=stmt.name,
                bases=stmt.bases,
                keywords=stmt.keywords,
                body=own or [ast.Pass()],
                decorator_list=stmt.decorator_list,
                type_params=getattr(stmt, "type_params", []),
            )
            yield f"class {stmt.name}", digest(shell)
        elif isinstance(stmt, ast.If) and "TYPE_CHECKING" in ast.unparse(stmt.test):
            continue  # imports for type checkers only
        else:
            yield _statement_name(stmt), digest(stmt)


@functools.lru_cache(maxsize=2048)
def _units_of(source: str) -> tuple[tuple[str, str], ...]:
    """:func:`units` of ``source``, computed once per process (the README's check
    fingerprints the same files once per evidence folder)."""
    return tuple(units(source))


def fingerprint(root: Path, files: Iterable[str]) -> dict:
    """``{"python": {name: [digests]}, "files": {path: sha256}}`` of ``files`` under
    ``root`` (see the module docstring)."""
    python: dict[str, list[str]] = {}
    other: dict[str, str] = {}
    for name in files:
        path = root / name
        if not path.is_file():
            continue
        if path.suffix == ".py":
            for unit, value in _units_of(path.read_text()):
                python.setdefault(unit, []).append(value)
        else:
            other[name] = hashlib.sha256(path.read_bytes()).hexdigest()
    return {
        "version": VERSION,
        "python": {k: sorted(set(v)) for k, v in sorted(python.items())},
        "files": dict(sorted(other.items())),
    }


def changed(then: dict, now: dict) -> list[str]:
    """What differs between two fingerprints: Python units (``def name``) and files
    whose digests changed, appeared or went away."""
    out = []
    for kind, label in (("python", "code "), ("files", "")):
        old, new = then.get(kind, {}), now.get(kind, {})
        out += [f"{label}{k}" for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)]
    return out


def measurement_code_files(root: Path) -> list[str]:
    """Every file of measurement code under ``root`` (:data:`MEASUREMENT_CODE` less
    :data:`ANALYSIS_ONLY`; relative paths, sorted)."""
    found = set()
    for pattern in MEASUREMENT_CODE:
        found.update(p.relative_to(root).as_posix() for p in root.glob(pattern) if p.is_file())
    return sorted(f for f in found if not any(fnmatch.fnmatch(f, a) for a in ANALYSIS_ONLY))


def behaviour_of(found: dict) -> str:
    """The first 12 hex characters of the SHA-256 of a behaviour fingerprint's
    (:func:`fingerprint`) canonical JSON (keys sorted, no spaces)."""
    text = json.dumps(found, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:DIGEST_CHARS]


def _behaviour_key(root: Path, source: str) -> str:
    """What the behaviour digest depends on, cheaply: the fingerprint's version, the
    source fingerprint (every glob of :data:`MEASUREMENT_CODE` lies inside the source,
    trainbench.common.code_identity.SOURCE_PATTERNS) and the bytes of the files named
    one by one (the default profile and the benchmarks lie outside it)."""
    digest = hashlib.sha256(f"v{VERSION}\0{source}".encode())
    for name in MEASUREMENT_CODE:
        if "*" not in name and (root / name).is_file():
            digest.update(f"\0{name}\0".encode() + (root / name).read_bytes())
    return digest.hexdigest()


def behaviour_digest(root: Path, source: str) -> str:
    """:func:`behaviour_of` the measurement code under ``root`` (``source``: its source
    fingerprint, trainbench.common.code_identity.source_fingerprint): the record's
    ``environment.code.behaviour``. Computed once per code: kept in the process and in a
    small file in the temp folder keyed by the code, so a record costs a few small reads;
    the first costs about 0.4 s, when the launcher builds the record after the cell's
    attempts, never in a timed region."""
    return _behaviour_digest(Path(root), source)


@functools.lru_cache(maxsize=8)
def _behaviour_digest(root: Path, source: str) -> str:
    key = _behaviour_key(root, source)
    cache = Path(tempfile.gettempdir()) / f"{BEHAVIOUR_CACHE_PREFIX}{key[:32]}.txt"
    try:
        cached = cache.read_text().strip()
    except OSError:
        cached = ""
    if re.fullmatch(f"[0-9a-f]{{{DIGEST_CHARS}}}", cached):
        return cached
    value = behaviour_of(fingerprint(root, measurement_code_files(root)))
    with contextlib.suppress(OSError):  # a read-only temp folder: computed again next time
        atomic_write_text(cache, value + "\n")
    return value
