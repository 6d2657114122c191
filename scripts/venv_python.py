"""Is .venv's Python one the pins install on? Run by the Makefile as $(PYTHON), before
.venv is made or used (issue 51).

- No .venv: PYTHON must lie in pyproject.toml's requires-python, or this stops with the
  command that fixes it (make then makes .venv).
- A .venv whose Python lies outside that range, whose interpreter is gone, or (PYTHON
  given on the command line or in the environment) whose Python differs from PYTHON's
  (major.minor): emptied, with one line saying so; make makes it anew and installs again.
  Without this, a first `make report` with a stock Mac's python3 (3.9) left a 3.9 .venv
  that `python -m venv` never replaces, whatever PYTHON a second run named.
- Otherwise .venv is left alone (the default python3 may differ from it: nothing said).

It runs on the Pythons it refuses (3.6 and later): no syntax or library newer than 3.6,
annotations quoted. Standard library only.
"""

import argparse
import os
import re
import shutil
import sys
from typing import NamedTuple

OFFLINE_RECORD = ".trainbench-offline.json"  # trainbench.offline.venv's record
_REQUIRES = re.compile(r"""^requires-python\s*=\s*["']([^"']+)["']""", re.M)
_CLAUSE = re.compile(r"^\s*(>=|<)\s*(\d+)\.(\d+)\s*$")
_CFG_VERSION = re.compile(r"^\s*(?:version|version_info)\s*=\s*(\d+)\.(\d+)", re.M)

KEEP, MAKE, REMAKE, STOP = "keep", "make", "remake", "stop"


class Decision(NamedTuple):
    """What to do with the venv folder, and the line that says so (empty for keep)."""

    action: str
    message: str = ""


def read_requires_python(pyproject_text: str) -> str:
    """The requires-python text of pyproject.toml, e.g. ``>=3.11,<3.14``."""
    match = _REQUIRES.search(pyproject_text)
    if match is None:
        raise ValueError("pyproject.toml has no requires-python line")
    return match.group(1)


def parse_range(requires: str) -> "list[tuple[str, tuple[int, int]]]":
    """``>=3.11,<3.14`` -> [(">=", (3, 11)), ("<", (3, 14))]; only >= and < on X.Y."""
    clauses = []
    for text in requires.split(","):
        match = _CLAUSE.match(text)
        if match is None:
            raise ValueError(
                f"requires-python {requires!r}: this check reads only >=X.Y and <X.Y clauses"
            )
        clauses.append((match.group(1), (int(match.group(2)), int(match.group(3)))))
    return clauses


def in_range(version: "tuple[int, int]", clauses: "list[tuple[str, tuple[int, int]]]") -> bool:
    for operator, bound in clauses:
        if operator == ">=" and version < bound:
            return False
        if operator == "<" and version >= bound:
            return False
    return True


def suggested_minor(clauses: "list[tuple[str, tuple[int, int]]]") -> "tuple[int, int]":
    """The newest X.Y the range allows (the floor where it has no ceiling)."""
    ceilings = [bound for operator, bound in clauses if operator == "<"]
    floors = [bound for operator, bound in clauses if operator == ">="]
    if ceilings:
        top = min(ceilings)
        return (top[0], top[1] - 1)
    return max(floors) if floors else (3, 12)


def venv_python_version(venv: str) -> "tuple[int, int] | None":
    """major.minor from ``venv/pyvenv.cfg`` (venv writes version, virtualenv and uv
    version_info); None where the file names none."""
    with open(os.path.join(venv, "pyvenv.cfg")) as cfg:
        match = _CFG_VERSION.search(cfg.read())
    return (int(match.group(1)), int(match.group(2))) if match else None


def dotted(version: "tuple[int, int] | None") -> str:
    return f"{version[0]}.{version[1]}" if version else "an unknown version"


def make_command(goals: str, python: str) -> str:
    return " ".join(["make", *goals.split(), "PYTHON=" + python])


def decide(
    venv: str,
    python: str,
    python_version: "tuple[int, int]",
    python_given: bool,
    requires: str,
    goals: str = "",
    platform: str = sys.platform,
) -> Decision:
    """Keep, make, remake (after emptying) or stop, for ``venv`` and the interpreter
    ``python`` (the Makefile's PYTHON) at ``python_version``."""
    clauses = parse_range(requires)
    rule = f"{requires} (pyproject.toml requires-python)"
    good = dotted(suggested_minor(clauses))
    fix = make_command(goals, f"python{good}")
    where = (
        f" (python.org's installer, or brew install python@{good})" if platform == "darwin" else ""
    )
    python_ok = in_range(python_version, clauses)
    refused = f"{python} is Python {dotted(python_version)}, outside {rule}"
    if python_given and not python_ok:
        return Decision(STOP, f"PYTHON={refused}: {fix}{where}")
    if not os.path.isdir(venv) or not os.listdir(venv):
        return Decision(MAKE) if python_ok else Decision(STOP, f"{refused}: {fix}{where}")
    if not os.path.isfile(os.path.join(venv, "pyvenv.cfg")):
        return Decision(
            STOP, f"{venv} is not a venv (no pyvenv.cfg): move it away or pass VENV=another-folder"
        )
    have = venv_python_version(venv)
    if have is None or not in_range(have, clauses):
        reason = f"has Python {dotted(have)}, outside {rule}"
    elif not os.path.exists(os.path.join(venv, "bin", "python")):
        reason = f"has lost its interpreter ({venv}/bin/python does not exist)"
    elif python_given and have != python_version:
        reason = f"has Python {dotted(have)}, PYTHON={python} is {dotted(python_version)}"
    else:
        return Decision(KEEP)
    if not python_ok:
        return Decision(STOP, f"{venv} {reason}; {refused}: {fix} makes it anew{where}")
    if os.path.exists(os.path.join(venv, OFFLINE_RECORD)):
        return Decision(
            STOP,
            f"{venv} {reason}; it was made by make offline-setup: run make offline-setup "
            "RECREATE=1 with a wheelhouse for this Python (docs/offline-install.md)",
        )
    return Decision(
        REMAKE,
        f"{venv} {reason}: emptying it; make makes it anew with {python} "
        f"(Python {dotted(python_version)}) and installs again",
    )


def empty_folder(folder: str) -> None:
    """Remove what ``folder`` holds (the folder stays, as with ``venv --clear``, so a
    .venv that is a link to elsewhere stays one)."""
    for entry in os.listdir(folder):
        path = os.path.join(folder, entry)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.remove(path)


def main(argv: "list[str] | None" = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--venv", default=".venv")
    parser.add_argument("--python", default="python3", help="PYTHON as the Makefile names it")
    parser.add_argument("--python-given", action="store_true", help="PYTHON was set by the user")
    parser.add_argument("--goals", default="", help="the make goals, for the command it prints")
    parser.add_argument("--pyproject", default="pyproject.toml")
    args = parser.parse_args(argv)
    with open(args.pyproject) as pyproject:
        requires = read_requires_python(pyproject.read())
    decision = decide(
        args.venv, args.python, tuple(sys.version_info[:2]), args.python_given, requires, args.goals
    )
    if decision.action == STOP:
        print(f"venv_python: {decision.message}", file=sys.stderr)
        return 2
    if decision.action == REMAKE:
        print(f"venv_python: {decision.message}")
        sys.stdout.flush()
        empty_folder(args.venv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
