"""The package's shape (docs/architecture.md): its root holds the layers as folders,
imports go down the layers and never round in a cycle, and no module or function has
outgrown what one reader can hold."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from helpers import REPO

PACKAGE = REPO / "scripts" / "trainbench"
# Lowest first: a module may import from its own layer and those below it.
LAYERS = {
    "common": 0,
    "config": 1,
    "measure": 2,
    "workloads": 3,
    "launch": 4,
    "analysis": 5,
    "evidence": 6,
    "bench": 6,
    "offline": 6,
}
MAX_ROOT_ENTRIES = 12
# Beside the layers, the root holds the public surface (``__init__.py``: ``from trainbench
# import ...``) and the old own-model import paths, kept as deprecated re-exports.
ROOT_MODULES = {"__init__.py", "data.py", "training.py"}
MAX_UPWARD_IMPORTS = 1
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 80


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped |= {id(inner) for stmt in node.body for inner in ast.walk(stmt)}
    return skipped


def imports_of(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The package's modules ``name`` imports, at module level or inside functions
    (those run too), not those imported for type checkers only."""
    tree = ast.parse(path.read_text())
    skipped = _type_checking_nodes(tree)
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        targets: list[str] = []
        if isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            # ``from pkg import sub`` imports the submodule; ``from mod import name``, mod
            targets = [
                f"{module}.{alias.name}" if f"{module}.{alias.name}" in known else module
                for alias in node.names
            ]
        elif isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        for target in targets:
            while target and target not in known and "." in target:
                target = target.rsplit(".", 1)[0]
            if target in known and target != name:
                found.add(target)
    return found


def import_graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports_of(name, path, known) for name, path in known.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def layer_of(module: str) -> int | None:
    parts = module.split(".")
    return LAYERS.get(parts[1]) if len(parts) > 1 else None


def test_the_package_root_holds_the_layers_as_folders():
    entries = sorted(
        p.name for p in PACKAGE.iterdir() if not p.name.startswith((".", "__pycache__"))
    )
    assert len(entries) <= MAX_ROOT_ENTRIES, entries
    assert set(LAYERS) <= set(entries), sorted(set(LAYERS) - set(entries))
    strays = [e for e in entries if e not in LAYERS and e not in ROOT_MODULES]
    assert not strays, f"{strays}: put them in a layer (docs/architecture.md)"


def test_no_import_cycle():
    found = cycles(import_graph())
    assert not found, found


def test_imports_go_down_the_layers():
    upward = sorted(
        f"{a} -> {b}"
        for a, targets in import_graph().items()
        for b in targets
        if layer_of(a) is not None and layer_of(b) is not None and layer_of(b) > layer_of(a)  # type: ignore[operator]
    )
    assert len(upward) <= MAX_UPWARD_IMPORTS, upward


def test_the_cycle_finder_finds_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]


@pytest.mark.parametrize("name", sorted(modules()))
def test_no_module_or_function_has_outgrown_one_reader(name):
    path = modules()[name]
    text = path.read_text()
    assert text.count("\n") <= MAX_MODULE_LINES, f"{path}: {text.count(chr(10))} lines"
    long = [
        f"{node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for node in ast.walk(ast.parse(text))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
    ]
    assert not long, f"{path}: {long}"
