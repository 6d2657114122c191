"""A fingerprint of what the measurement code *does*, not of where it lives.

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
import functools
import hashlib
from collections.abc import Iterable, Iterator
from pathlib import Path

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
