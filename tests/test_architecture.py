"""The package's shape (docs/architecture.md): its root holds the layers as folders,
each saying in its first docstring line what it holds; imports go down the layers and
never round in a cycle, imports for type checkers included; the analysis side never
imports the run side; the training loop's helpers never import the loop; and no module
or function has outgrown what one reader can hold."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest
from helpers import REPO

SCRIPTS = REPO / "scripts"
PACKAGE = SCRIPTS / "trainbench"
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
MAX_UPWARD_IMPORTS = 0
# The two halves of what runs a cell: the analysis side reads their records, never them.
RUN_SIDE = ("launch", "measure")
# Who may import the training loop's class: its callers, never its helpers (they take
# values, or the state in trainbench.measure.loop_state).
LOOP = "trainbench.measure.training"
LOOP_CALLERS = {"trainbench.measure.reference_run", "trainbench.bench.interleaved"}
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 80


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@functools.cache
def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def scripts_modules() -> dict[str, Path]:
    """Every Python file under scripts/: the package and its thin entry scripts."""
    return {**{module_name(p): p for p in sorted(SCRIPTS.glob("*.py"))}, **modules()}


@functools.cache
def parsed(path: Path) -> ast.Module:
    """``path``'s syntax tree, parsed once for every test here (read-only)."""
    return ast.parse(path.read_text())


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped |= {id(inner) for stmt in node.body for inner in ast.walk(stmt)}
    return skipped


def imports_of(name: str, path: Path, known: dict[str, Path], type_only: bool = False) -> set[str]:
    """The package's modules ``name`` imports, at module level or inside functions
    (those run too); with ``type_only``, also those imported for type checkers only
    (``if TYPE_CHECKING:``), which couple modules as much."""
    tree = parsed(path)
    skipped = set() if type_only else _type_checking_nodes(tree)
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


@functools.cache
def import_graph(type_only: bool = False) -> dict[str, set[str]]:
    known = scripts_modules() if type_only else modules()
    return {name: imports_of(name, path, known, type_only) for name, path in known.items()}


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


def test_every_layer_says_what_it_holds_in_its_first_line():
    for layer in LAYERS:
        init = PACKAGE / layer / "__init__.py"
        doc = ast.get_docstring(ast.parse(init.read_text())) if init.exists() else None
        assert doc and len(doc.splitlines()[0]) > 20, f"{layer}/__init__.py: no first line"


def test_no_import_cycle():
    found = cycles(import_graph())
    assert not found, found


def test_no_import_cycle_even_for_type_checkers():
    """No file under scripts/ imports a module that imports it back, ``if
    TYPE_CHECKING:`` imports included: a type-only circle is a real coupling."""
    found = cycles(import_graph(type_only=True))
    assert not found, found


def test_the_analysis_side_never_imports_the_run_side():
    """Analysis reads records; the names a record is written with are in common/."""
    found = sorted(
        f"{a} -> {b}"
        for a, targets in import_graph(type_only=True).items()
        if a.startswith("trainbench.analysis")
        for b in targets
        if b.split(".")[1:2] and b.split(".")[1] in RUN_SIDE
    )
    assert not found, found


def test_only_the_loops_callers_import_the_training_loop():
    """The loop's helpers (evaluation parity, the quality curve, the step breakdown, the
    result and its facts) take values; only what runs a loop imports its class."""
    importers = set()
    for name, path in scripts_modules().items():
        for node in ast.walk(parsed(path)):
            if (
                isinstance(node, ast.ImportFrom)
                and node.module == LOOP
                and any(alias.name == "TrainingLoop" for alias in node.names)
            ):
                importers.add(name)
    assert importers <= LOOP_CALLERS, sorted(importers - LOOP_CALLERS)


def test_imports_go_down_the_layers():
    upward = sorted(
        f"{a} -> {b}"
        for a, targets in import_graph(type_only=True).items()
        for b in targets
        if layer_of(a) is not None and layer_of(b) is not None and layer_of(b) > layer_of(a)  # type: ignore[operator]
    )
    assert len(upward) <= MAX_UPWARD_IMPORTS, upward


def test_the_cycle_finder_finds_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]


def test_the_graph_sees_imports_for_type_checkers(tmp_path):
    """The circle issue 42 removed, in miniature: a helper importing the loop's type."""
    loop, helper = tmp_path / "loop.py", tmp_path / "helper.py"
    loop.write_text("import helper\n")
    helper.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import loop\n")
    known = {"loop": loop, "helper": helper}
    graph = {n: imports_of(n, p, known, type_only=True) for n, p in known.items()}
    assert cycles(graph) == [["helper", "loop"]]
    assert not cycles({n: imports_of(n, p, known) for n, p in known.items()})


@pytest.mark.parametrize("name", sorted(modules()))
def test_no_module_or_function_has_outgrown_one_reader(name):
    path = modules()[name]
    text = path.read_text()
    assert text.count("\n") <= MAX_MODULE_LINES, f"{path}: {text.count(chr(10))} lines"
    long = [
        f"{node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for node in ast.walk(parsed(path))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
    ]
    assert not long, f"{path}: {long}"
