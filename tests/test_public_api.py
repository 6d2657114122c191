"""The public surface (``from trainbench import ...``): every name in ``__all__``
imports in a fresh interpreter; ``import trainbench`` alone loads no torch; the import
paths an earlier README or example used for own models still work, with a
DeprecationWarning naming the new import; examples/ and the docs use nothing else."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import warnings

import pytest
from helpers import REPO

# Every import path an earlier README or examples/ used for an own model, with the
# names imported from it (`git log -p -- README.md docs/ examples/`).
OLD_PATHS = {
    "trainbench.data": ("BatchTensorDataset", "make_loader"),
    "trainbench.training": ("TrainingParts",),
}
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
# `from trainbench.x import` / `import trainbench.x`: an internal path.
INTERNAL_IMPORT = re.compile(r"\b(?:from\s+trainbench\.\w[\w.]*\s+import|import\s+trainbench\.\w)")


def _python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO
    )


def test_every_public_name_imports_in_a_fresh_interpreter():
    code = (
        "import trainbench\n"
        "for name in trainbench.__all__:\n"
        "    assert getattr(trainbench, name) is not None, name\n"
        "from trainbench import *\n"
        "print(trainbench.__version__, len(trainbench.__all__))\n"
    )
    proc = _python(code)
    assert proc.returncode == 0, proc.stderr
    version, count = proc.stdout.split()
    assert re.fullmatch(r"\d+\.\d+\.\d+\S*", version), version
    assert int(count) >= 7


def test_the_public_names_are_what_an_own_model_needs():
    import trainbench

    assert {"TrainingParts", "RunContext", "BatchTensorDataset", "make_loader"} <= set(
        trainbench.__all__
    )
    assert trainbench.TrainingParts.__module__.startswith("trainbench.")
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        _ = trainbench.nothing_here


def test_importing_trainbench_loads_no_torch():
    proc = _python("import sys, trainbench; print('torch' in sys.modules)")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "False"


def test_the_version_comes_from_pyproject_without_installed_metadata(tmp_path, monkeypatch):
    from importlib import metadata

    from trainbench.common.code_identity import package_version

    def not_installed(name):
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "version", not_installed)
    declared = re.search(r'^version = "(.+)"', (REPO / "pyproject.toml").read_text(), re.M)
    assert package_version(REPO) == declared.group(1)
    assert package_version(tmp_path) == "0+unknown"


@pytest.mark.parametrize("path", sorted(OLD_PATHS))
def test_an_old_import_path_still_works_and_names_the_new_import(path):
    names = OLD_PATHS[path]
    code = (
        "import warnings\nwarnings.simplefilter('always')\n"
        f"from {path} import {', '.join(names)}\n"
        "import trainbench\n"
        f"assert all(globals()[n] is getattr(trainbench, n) for n in {names!r})\n"
    )
    proc = _python(code)
    assert proc.returncode == 0, proc.stderr
    assert "DeprecationWarning" in proc.stderr, proc.stderr
    assert f"from trainbench import {', '.join(sorted(names))}" in proc.stderr, proc.stderr
    assert f"{path} is deprecated" in proc.stderr


def test_the_warning_points_at_the_users_import_line(tmp_path):
    (tmp_path / "old_model.py").write_text("from trainbench.training import TrainingParts\n")
    sys.path.insert(0, str(tmp_path))
    sys.modules.pop("trainbench.training", None)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            import old_model  # noqa: F401
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("old_model", None)
    found = [w for w in caught if issubclass(w.category, DeprecationWarning)]
    assert found and found[0].filename.endswith("old_model.py"), [str(w) for w in caught]
    assert "from trainbench import TrainingParts" in str(found[0].message)


def _internal_imports_in_python(path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("trainbench."):
            found.append(f"{path.name}:{node.lineno}: from {node.module}")
        elif isinstance(node, ast.Import):
            found += [
                f"{path.name}:{node.lineno}: import {a.name}"
                for a in node.names
                if a.name.startswith("trainbench.")
            ]
    return found


def test_examples_and_docs_import_only_the_public_surface():
    found = []
    for path in sorted((REPO / "examples").rglob("*.py")):
        found += _internal_imports_in_python(path)
    for path in DOCS:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if INTERNAL_IMPORT.search(line):
                found.append(f"{path.relative_to(REPO)}:{number}: {line.strip()}")
    assert not found, "use `from trainbench import ...` (trainbench.__all__):\n" + "\n".join(found)


def test_the_internal_import_finder_finds_one():
    assert INTERNAL_IMPORT.search("from trainbench.measure.data import make_loader")
    assert INTERNAL_IMPORT.search("import trainbench.measure.training as t")
    assert not INTERNAL_IMPORT.search("from trainbench import TrainingParts")
