"""Your own model's ``entry``, checked before any job: its ``python_path`` folders
exist, the module it names imports, and the module has the function, callable.

The check imports the module, which runs the module's top-level code, but never
calls the function (that would train). It imports in a child process of its own:
top-level code may print, take seconds (torch), change ``sys.path`` or the
environment, start threads or even exit, and none of that may touch the process
that checks (Snakemake's, which goes on to run the workflow). The child sees what a
cell sees: the working directory, ``python_path`` first on ``sys.path``, this
checkout's trainbench. Relative ``python_path`` folders are read from the working
directory, as the cells read them (not from the config file's folder)."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

# An import that takes longer is refused: slow work belongs in the function.
IMPORT_TIMEOUT_S = 120
SCRIPTS_DIR = Path(__file__).resolve().parents[2]

# Runs in the child: import, look the function up, write what happened as JSON.
_CHILD = r"""
import importlib, json, sys, traceback
entry, result_path, folders = sys.argv[1], sys.argv[2], sys.argv[3:]
sys.path[:0] = folders
module_name, _, function = entry.partition(":")
facts = {}
try:
    module = importlib.import_module(module_name)
except BaseException as error:
    frames = [f for f in traceback.extract_tb(error.__traceback__) if "<frozen" not in f.filename]
    own = [f for f in frames if any(f.filename.startswith(d) for d in folders)] or frames
    facts = {
        "status": "raised",
        "error": ": ".join(filter(None, [type(error).__name__, *str(error).splitlines()[:1]])),
        "missing": getattr(error, "name", None) if isinstance(error, ImportError) else None,
        "where": f"{own[-1].filename}, line {own[-1].lineno}" if own else None,
    }
    if isinstance(error, SyntaxError) and error.filename:
        facts["error"] = f"SyntaxError: {error.msg}"
        facts["where"] = f"{error.filename}, line {error.lineno}"
else:
    found = getattr(module, function, None)
    facts = {"status": "ok", "file": getattr(module, "__file__", None)}
    if not hasattr(module, function):
        names = [n for n in vars(module) if not n.startswith("_") and callable(vars(module)[n])]
        facts.update(status="missing", functions=names[:8])
    elif not callable(found):
        facts.update(status="not callable", kind=type(found).__name__)
with open(result_path, "w") as fh:
    json.dump(facts, fh)
"""


def entry_problems(name: str, entry: str, python_path: list[str] | None) -> list[str]:
    """Why ``workloads.<name>.entry`` cannot give a function, one sentence each naming
    the key and the fix; [] when it can."""
    folders = python_path or ["."]
    missing = [
        f"`workloads.{name}.python_path[{i}]` = {folder!r} is not a folder{_relative(folder)}. "
        f"Fix: name the folder holding {entry.partition(':')[0].split('.')[0]}.py, or "
        "remove the key to search the working directory."
        for i, folder in enumerate(folders)
        if not _is_dir(folder)
    ]
    if missing:
        return missing
    resolved = tuple(str(Path(f).resolve()) for f in folders)
    problem = _import_problem_once(name, entry, resolved, _sources_stamp(resolved))
    return [problem] if problem else []


def _sources_stamp(folders: tuple[str, ...]) -> tuple:
    """What the import could depend on in the entry's folders: every Python file's
    path, size and modification time (a changed module is checked again)."""
    stamp = []
    for folder in folders:
        for path in sorted(Path(folder).rglob("*.py")):
            try:
                info = path.stat()
            except OSError:
                continue
            stamp.append((str(path), info.st_size, info.st_mtime_ns))
    return tuple(stamp)


@functools.lru_cache(maxsize=64)
def _import_problem_once(
    name: str, entry: str, folders: tuple[str, ...], stamp: tuple
) -> str | None:
    """:func:`_import_problem`, once per process for the same entry and unchanged
    sources: a config is validated several times while Snakemake parses the workflow,
    and each check imports the model in a child process (seconds with torch)."""
    return _import_problem(name, entry, list(folders))


def _is_dir(folder: str) -> bool:
    try:
        return Path(folder).is_dir()
    except (OSError, ValueError):
        return False


def _relative(folder: str) -> str:
    return (
        "" if Path(folder).is_absolute() else f" (relative to the working directory {Path.cwd()})"
    )


def _import_problem(name: str, entry: str, folders: list[str]) -> str | None:
    module, _, function = entry.partition(":")
    key = f"`workloads.{name}.entry` {entry!r}"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SCRIPTS_DIR), env.get("PYTHONPATH")]))
    with tempfile.TemporaryDirectory(prefix="trainbench-entry-") as tmp:
        result = Path(tmp) / "result.json"
        try:
            proc = subprocess.run(
                [sys.executable, "-c", _CHILD, entry, str(result), *folders],
                env=env,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=IMPORT_TIMEOUT_S,
            )
        except subprocess.TimeoutExpired:
            return (
                f"{key}: importing {module} did not finish within {IMPORT_TIMEOUT_S} s (the "
                f"check imports your module; it never calls {function}). Fix: move slow work "
                f"from the module's top level into {function}."
            )
        facts = json.loads(result.read_text()) if result.exists() else None
    if facts is None:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return (
            f"{key}: importing {module} ended the process (exit status {proc.returncode}: "
            f"{last}). Fix: make `python -c 'import {module}'` work from {folders[0]}."
        )
    return _describe(key, name, module, function, folders, facts)


def _describe(
    key: str, name: str, module: str, function: str, folders: list[str], facts: dict
) -> str | None:
    status = facts["status"]
    if status == "raised":
        missing = facts.get("missing")
        if missing and (module == missing or module.startswith(missing + ".")):
            return (
                f"`workloads.{name}.entry` names module {module!r}, which is not importable "
                f"from {folders} or the installed packages. Fix: point "
                f"`workloads.{name}.python_path` at the folder holding {module}.py, or "
                "install your package."
            )
        where = f" ({facts['where']})" if facts.get("where") else ""
        return (
            f"{key}: importing {module} raised {facts['error']}{where} (the check imports "
            f"your module; it never calls {function}). Fix: make the module import cleanly: "
            f"`python -c 'import {module}'` from {folders[0]} shows the whole error."
        )
    if status == "missing":
        defined = facts.get("functions") or []
        has = f"; it defines {', '.join(defined)}" if defined else ""
        return (
            f"{key}: {module} ({facts.get('file')}) has no {function!r}{has}. Fix: name one "
            f"of its functions after the colon, or define {function}(ctx) returning "
            "TrainingParts (see examples/my_model.py)."
        )
    if status == "not callable":
        return (
            f"{key}: {module}.{function} ({facts.get('file')}) is not callable (its type is "
            f"{facts['kind']}). Fix: name a "
            "function build(ctx) returning TrainingParts (see examples/my_model.py)."
        )
    return None
