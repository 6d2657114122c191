"""What the project pins (pyproject.toml, with extras) and what a target has (its
``pip freeze``), both keyed by canonical distribution names."""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

from packaging.markers import default_environment
from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    canonicalize_name,
    parse_sdist_filename,
    parse_wheel_filename,
)
from trainbench.offline import OfflineError

PROJECT = "trainbench-workflow"  # pyproject.toml's name when it has none
# The extras a wheelhouse holds unless told otherwise: the runtime (always), the HF
# Trainer that benchmarks/throughput.py's hf_trainer variant needs, and Apple silicon's
# energy counters (their marker keeps them out of any other target's wheelhouse).
DEFAULT_EXTRAS = ("bench", "apple")
# Marker values of a target platform, by the form of its wheel tag (PEP 425/600/656
# and pip's names for macOS and Windows); the tag's architecture is platform_machine.
_DARWIN = {"sys_platform": "darwin", "platform_system": "Darwin", "os_name": "posix"}
_LINUX = {"sys_platform": "linux", "platform_system": "Linux", "os_name": "posix"}
_WINDOWS = {"sys_platform": "win32", "platform_system": "Windows", "os_name": "nt"}
_PLATFORM_TAGS = (
    (re.compile(r"macosx_\d+_\d+_(?P<machine>\w+)"), _DARWIN),
    (re.compile(r"(?:manylinux(?:\d+|_\d+_\d+)|musllinux_\d+_\d+|linux)_(?P<machine>\w+)"), _LINUX),
    (re.compile(r"win_(?P<machine>amd64|arm64)|win32"), _WINDOWS),
)
# platform_machine where Windows spells the architecture otherwise.
_WINDOWS_MACHINES = {"amd64": "AMD64", "arm64": "ARM64", None: "x86"}
# macOS tags for more than one architecture: the target's own is needed for its markers.
_FAT_MACHINES = ("universal2", "universal", "intel", "fat", "fat3", "fat64", "multiple")


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


def check_python_version(pyproject: dict, python_version: str) -> None:
    """RequirementsError where the target's Python lies outside the project's
    requires-python (the pins' own range: pip would fail later on one of them)."""
    requires = SpecifierSet(pyproject["project"].get("requires-python", ""))
    full = ".".join((python_version.split(".") + ["0"])[:3])
    if not requires.contains(full, prereleases=True):
        raise RequirementsError(
            f"--python-version {python_version}: outside pyproject.toml's requires-python "
            f"{requires} (the pins have no release for it); a target needs a Python in that range"
        )


def build_requirements(pyproject: dict) -> list[Requirement]:
    """What ``pip install -e .`` needs without build isolation (setuptools)."""
    return [Requirement(text) for text in pyproject.get("build-system", {}).get("requires", [])]


def platform_markers(platform: str) -> dict[str, str]:
    """sys_platform, platform_system, os_name and platform_machine of the machines a
    wheel tag such as ``macosx_14_0_arm64`` or ``manylinux_2_28_x86_64`` is for."""
    for pattern, system in _PLATFORM_TAGS:
        match = pattern.fullmatch(platform)
        if match is None:
            continue
        machine = match["machine"]
        if system is _WINDOWS:
            machine = _WINDOWS_MACHINES[machine]
        if machine in _FAT_MACHINES:
            break
        return {**system, "platform_machine": machine}
    raise RequirementsError(
        f"--platform {platform}: not one machine's macOS, Linux or Windows wheel tag "
        "(e.g. macosx_14_0_arm64, manylinux_2_28_x86_64)"
    )


def target_environment(python_version: str, platforms: Sequence[str] = ()) -> dict[str, str]:
    """Marker values for the target: its Python version, and its system and machine from
    ``platforms`` (all must agree); the rest (platform_release, platform_version...) as
    on this machine, as without ``platforms``."""
    parts = python_version.split(".")
    if len(parts) < 2 or not all(part.isdigit() for part in parts):
        raise RequirementsError(
            f"--python-version {python_version!r}: expected MAJOR.MINOR such as 3.12"
        )
    full = ".".join((parts + ["0"])[:3])
    systems = [platform_markers(platform) for platform in platforms]
    if any(system != systems[0] for system in systems):
        raise RequirementsError(
            f"--platform {' '.join(platforms)}: tags of more than one system or machine; "
            "build one wheelhouse per target"
        )
    return {
        **default_environment(),
        **(systems[0] if systems else {}),
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
