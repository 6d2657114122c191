"""What the project pins (pyproject.toml, with extras) and what a target has (its
``pip freeze``), both keyed by canonical distribution names."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

from packaging.markers import default_environment
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    canonicalize_name,
    parse_sdist_filename,
    parse_wheel_filename,
)

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

from trainbench.offline import OfflineError

PROJECT = "trainbench-workflow"  # pyproject.toml's name when it has none
# The extras a wheelhouse holds unless told otherwise: the runtime (always) and the
# HF Trainer that benchmarks/throughput.py's hf_trainer variant needs.
DEFAULT_EXTRAS = ("bench",)


class RequirementsError(OfflineError):
    """Bad input: pyproject, extras, freeze file."""


def canonical(name: str) -> str:
    """The PEP 503 form of a distribution name (``Jinja2`` and ``jinja2`` are one)."""
    return str(canonicalize_name(name))


def read_pyproject(path: Path) -> dict:
    try:
        return tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise RequirementsError(f"{path}: cannot read it as TOML ({error})") from None


def pinned_requirements(pyproject: dict, extras: Sequence[str]) -> list[Requirement]:
    """The project's dependencies and those of ``extras``, the project's own
    ``trainbench-workflow[x]`` entries replaced by extra x's requirements (dev names
    bench so)."""
    project = pyproject["project"]
    own_name = canonical(project.get("name", PROJECT))
    optional = project.get("optional-dependencies", {})
    unknown = sorted(set(extras) - set(optional))
    if unknown:
        raise RequirementsError(
            f"unknown extra(s) {', '.join(unknown)}: pyproject.toml defines "
            f"{', '.join(sorted(optional))}"
        )
    found: list[Requirement] = []
    pending = [*project.get("dependencies", [])]
    seen_extras: set[str] = set()
    for extra in extras:
        seen_extras.add(extra)
        pending.extend(optional[extra])
    while pending:
        requirement = Requirement(pending.pop(0))
        if canonical(requirement.name) != own_name:
            found.append(requirement)
            continue
        for extra in sorted(requirement.extras - seen_extras):
            seen_extras.add(extra)
            pending.extend(optional[extra])
    return found


def build_requirements(pyproject: dict) -> list[Requirement]:
    """What ``pip install -e .`` needs without build isolation (setuptools)."""
    return [Requirement(text) for text in pyproject.get("build-system", {}).get("requires", [])]


def target_environment(python_version: str) -> dict[str, str]:
    """Marker values for the target: its Python version; the rest as on this machine
    (pip evaluates the dependencies' markers against this machine too, so a wheelhouse
    is built on Linux x86_64 for a Linux x86_64 target)."""
    parts = python_version.split(".")
    if len(parts) < 2 or not all(part.isdigit() for part in parts):
        raise RequirementsError(
            f"--python-version {python_version!r}: expected MAJOR.MINOR such as 3.12"
        )
    full = ".".join((parts + ["0"])[:3])
    return {
        **default_environment(),
        "python_version": ".".join(parts[:2]),
        "python_full_version": full,
    }


def for_target(
    requirements: Iterable[Requirement], environment: dict[str, str]
) -> list[Requirement]:
    """The requirements whose marker holds on the target, markers dropped (pip would
    judge them by the interpreter running it, not by the target)."""
    kept = []
    for requirement in requirements:
        if requirement.marker is not None and not requirement.marker.evaluate(
            {**environment, "extra": ""}
        ):
            continue
        bare = Requirement(str(requirement))
        bare.marker = None
        kept.append(bare)
    return kept


def exact_version(requirement: Requirement) -> str | None:
    """X for a ``name==X`` pin, else None."""
    specifiers = list(requirement.specifier)
    if len(specifiers) == 1 and specifiers[0].operator in ("==", "==="):
        return specifiers[0].version
    return None


@dataclass(frozen=True)
class Installed:
    """One distribution of a freeze file; version None where the line does not say."""

    name: str
    version: str | None
    line: str


_PIN_LINE = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)\s*===?\s*(?P<version>\S+)$")


def _version_from_url(url: str) -> str | None:
    """The version in a ``name @ URL`` line's file name (wheel or sdist), if any."""
    filename = unquote(Path(urlparse(url).path).name)
    try:
        return str(parse_wheel_filename(filename)[1])
    except InvalidWheelFilename:
        pass
    try:
        return str(parse_sdist_filename(filename)[1])
    except InvalidSdistFilename:
        return None


def parse_freeze_line(line: str) -> Installed | None:
    """One ``pip freeze`` line: None for comments, options and editable installs
    (``-e``: a checkout, not a release); RequirementsError for anything else unknown."""
    text = line.strip()
    if not text or text.startswith("#") or text.startswith("-"):
        return None
    match = _PIN_LINE.match(text)
    if match:
        return Installed(canonical(match["name"]), match["version"], text)
    try:
        requirement = Requirement(text)
    except InvalidRequirement:
        requirement = None
    if requirement is None or requirement.url is None:
        raise RequirementsError(
            f"cannot read {text!r} as a `pip freeze` line (NAME==VERSION or NAME @ URL); "
            "pass the unedited output of `python3 -m pip freeze` on the target"
        )
    return Installed(canonical(requirement.name), _version_from_url(requirement.url), text)


def parse_freeze(text: str, source: str = "<freeze>") -> dict[str, Installed]:
    """Canonical name -> what the target has, from ``python3 -m pip freeze`` output."""
    installed: dict[str, Installed] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        try:
            entry = parse_freeze_line(line)
        except RequirementsError as error:
            raise RequirementsError(f"{source}:{number}: {error}") from None
        if entry is not None:
            installed[entry.name] = entry
    return installed
