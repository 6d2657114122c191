"""What a wheelhouse holds: the resolved closure less torch (the machine's own, with
its CUDA stack; with ``--with-torch``, for a machine without one, the pinned torch is
in it) and less what the target already has at exactly the resolved version.

Two steps around pip's resolution (trainbench.offline.wheelhouse runs pip):
``plan`` turns the pins into what pip resolves (torch pinned to the target's own
version, ``--keep-target`` packages pinned to the target's versions), and ``select``
sorts pip's report into what is downloaded, used from the target, or dropped.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from urllib.parse import unquote, urlparse

from packaging.requirements import Requirement
from packaging.version import InvalidVersion, Version
from trainbench.offline.requirements import Installed, RequirementsError, canonical, exact_version

TORCH = "torch"
# torch's CUDA companions: the machine's torch was built against its own CUDA stack
# (cuDNN, cuBLAS, NCCL, Triton...), so a wheel of another build would shadow it. Never
# downloaded; the pins themselves (nvidia-ml-py, NVML's Python binding) are exempt.
TORCH_COMPANIONS = ("nvidia-*", "cuda-*", "triton", "pytorch-triton*")
# Packages whose commands the Makefile runs as $(BIN)/NAME: they go into .venv even
# where the target has the same version, or .venv/bin would lack the command.
VENV_COMMANDS = ("snakemake", "pytest", "ruff", "snakefmt")
# The local version label of the stand-in for the machine's torch during resolution.
STUB_LABEL = "machine"

DOWNLOAD, FROM_TARGET, DROPPED = "download", "target", "dropped"
WITH_TORCH_SOURCE = "--with-torch: the pinned torch, in the wheelhouse for a machine without one"


@dataclass(frozen=True)
class Deviation:
    """A package used at the target's version instead of the pinned/resolved one."""

    name: str
    pinned: str | None
    used: str
    reason: str


@dataclass(frozen=True)
class Plan:
    """What pip resolves: requirement lines, constraint lines, and why they differ
    from pyproject.toml's pins."""

    requirements: list[str]
    constraints: list[str]
    torch_version: str
    torch_source: str
    deviations: list[Deviation] = field(default_factory=list)
    pinned: dict[str, str] = field(default_factory=dict)
    # Unpinned packages held at the target's version: name -> (target's, newest).
    preferred: dict[str, tuple[str, str]] = field(default_factory=dict)
    # --with-torch: the pinned torch (and its own dependencies) goes into the wheelhouse,
    # for a machine without its own torch (a Mac); else the machine's torch is used.
    torch_in_wheelhouse: bool = False


@dataclass(frozen=True)
class Resolved:
    """One distribution of pip's installation report."""

    name: str
    version: str
    url: str
    sha256: str | None

    @property
    def filename(self) -> str:
        return unquote(Path(urlparse(self.url).path).name)


@dataclass(frozen=True)
class Decision:
    name: str
    version: str
    action: str
    reason: str
    filename: str | None = None
    sha256: str | None = None


def same_version(a: str | None, b: str | None) -> bool:
    if a is None or b is None:
        return False
    try:
        return Version(a) == Version(b)
    except InvalidVersion:
        return a == b


def public_version(version: str) -> str:
    """``2.11.0`` for ``2.11.0+cu130``: the version pip can pin a stand-in to."""
    return Version(version).public


def _torch_version(
    pins: Mapping[str, str], installed: Mapping[str, Installed] | None
) -> tuple[str, str]:
    if installed is None:
        return pins[TORCH], "no target freeze given: the pinned version is assumed on the machine"
    entry = installed.get(TORCH)
    if entry is None or entry.version is None:
        raise RequirementsError(
            "the target freeze lists no torch (with a version): this install keeps the "
            "machine's own torch and CUDA stack; install torch there first, then take the "
            "freeze again"
        )
    return entry.version, "the machine's own torch (in the target freeze)"


def _keep_target_version(name: str, installed: Mapping[str, Installed] | None) -> str:
    entry = (installed or {}).get(name)
    if entry is None or entry.version is None:
        raise RequirementsError(
            f"--keep-target {name}: the target freeze has no {name} with a version; "
            "drop it from --keep-target or pass the target's freeze with --target-freeze"
        )
    return entry.version


def plan(
    pins: Sequence[Requirement],
    build: Sequence[Requirement],
    installed: Mapping[str, Installed] | None,
    keep_target: Iterable[str] = (),
    with_torch: bool = False,
) -> Plan:
    """Pins for pip: torch at the machine's version, or the pin with ``with_torch`` (a
    stand-in wheel of that version answers for it), each ``--keep-target`` package at
    the target's version, build requirements at the target's version where it
    satisfies them."""
    pinned = {canonical(r.name): exact_version(r) or str(r.specifier) for r in pins}
    if TORCH not in pinned:
        raise RequirementsError("pyproject.toml pins no torch: nothing to keep from the machine")
    if with_torch:
        torch_version, torch_source = pinned[TORCH], WITH_TORCH_SOURCE
    else:
        torch_version, torch_source = _torch_version(pinned, installed)
    keep = {canonical(name) for name in keep_target}
    if TORCH in keep:
        raise RequirementsError("--keep-target torch: torch is always the machine's; drop it")
    deviations = (
        [Deviation(TORCH, pinned[TORCH], torch_version, torch_source)]
        if not same_version(torch_version, pinned[TORCH])
        else []
    )
    requirements, constraints = [f"{TORCH}=={public_version(torch_version)}+{STUB_LABEL}"], []
    for requirement in pins:
        name = canonical(requirement.name)
        if name == TORCH:
            continue
        if name in keep:
            used = _keep_target_version(name, installed)
            requirements.append(f"{name}=={used}")
            if not same_version(used, pinned[name]):
                deviations.append(Deviation(name, pinned[name], used, "--keep-target"))
        else:
            requirements.append(str(requirement))
    for name in sorted(keep - set(pinned)):
        used = _keep_target_version(name, installed)
        constraints.append(f"{name}=={used}")
        deviations.append(Deviation(name, None, used, "--keep-target (not pinned)"))
    for requirement in build:
        name = canonical(requirement.name)
        entry = (installed or {}).get(name)
        if (
            entry
            and entry.version
            and requirement.specifier.contains(entry.version, prereleases=True)
        ):
            requirements.append(f"{name}=={entry.version}")
        else:
            requirements.append(str(requirement))
    return Plan(
        requirements,
        constraints,
        torch_version,
        torch_source,
        deviations,
        pinned,
        torch_in_wheelhouse=with_torch,
    )


def resolved_from_report(report: Mapping) -> list[Resolved]:
    """The distributions of ``pip install --dry-run --report``."""
    found = []
    for item in report["install"]:
        info = item["download_info"]
        hashes = info.get("archive_info", {}).get("hashes", {})
        found.append(
            Resolved(
                canonical(item["metadata"]["name"]),
                item["metadata"]["version"],
                info["url"],
                hashes.get("sha256"),
            )
        )
    return found


def is_torch_companion(name: str, pinned: Iterable[str]) -> bool:
    if name in set(pinned):
        return False
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in TORCH_COMPANIONS)


def decide(resolved: Resolved, installed: Mapping[str, Installed] | None, plan_: Plan) -> Decision:
    """Download it, use the target's copy, or drop it (the machine's torch and its CUDA
    companions; with --with-torch, torch and its dependencies are downloaded)."""
    name, version, pinned = resolved.name, resolved.version, plan_.pinned
    if name == TORCH and plan_.torch_in_wheelhouse:
        return Decision(
            name, version, DOWNLOAD, plan_.torch_source, resolved.filename, resolved.sha256
        )
    if name == TORCH:
        return Decision(name, plan_.torch_version, DROPPED, plan_.torch_source)
    if is_torch_companion(name, pinned) and not plan_.torch_in_wheelhouse:
        return Decision(name, version, DROPPED, "part of the machine's CUDA stack for its torch")
    entry = (installed or {}).get(name)
    have = entry.version if entry else None
    if same_version(have, version) and name not in VENV_COMMANDS:
        reason = "the target has this version"
        if name in plan_.preferred:
            reason += (
                f" (preferred over the newest, {plan_.preferred[name][1]}: it meets every "
                "requirement on it)"
            )
        return Decision(name, version, FROM_TARGET, reason)
    if same_version(have, version):
        reason = "the target has this version, but the Makefile runs its command from .venv/bin"
    elif entry is None:
        reason = "missing on the target"
    else:
        reason = f"the target has {have or 'an unknown version'}"
    return Decision(name, version, DOWNLOAD, reason, resolved.filename, resolved.sha256)


def select(
    resolved: Iterable[Resolved], installed: Mapping[str, Installed] | None, plan_: Plan
) -> list[Decision]:
    return sorted((decide(r, installed, plan_) for r in resolved), key=lambda d: d.name)


def _holds(requirement: Requirement, environment: Mapping[str, str], extras: Iterable[str]) -> bool:
    if requirement.marker is None:
        return True
    return any(requirement.marker.evaluate({**environment, "extra": e}) for e in ("", *extras))


def requirement_specifiers(report: Mapping, environment: Mapping[str, str]) -> dict[str, list]:
    """Canonical name -> the version specifiers that the resolved distributions put
    on it (markers judged for the target, with the extras asked of each)."""
    items = [(canonical(i["metadata"]["name"]), i) for i in report["install"]]
    extras = {name: set(i.get("requested_extras") or ()) for name, i in items}
    specifiers: dict[str, list] = {}
    for _ in range(2):  # the second pass sees extras that a later item asked for
        specifiers = {}
        for name, item in items:
            for text in item["metadata"].get("requires_dist", []):
                requirement = Requirement(text)
                if not _holds(requirement, environment, extras[name]):
                    continue
                target = canonical(requirement.name)
                specifiers.setdefault(target, []).append(requirement.specifier)
                extras.setdefault(target, set()).update(requirement.extras)
    return specifiers


def left_out_for_target(report: Mapping, environment: Mapping[str, str]) -> list[str]:
    """Requirements of the resolved distributions that hold on the target but that pip
    left out ("name (of requirer)"): pip judges the dependencies' markers by the machine
    it runs on, so for another system it can miss what only that system needs."""
    items = report["install"]
    present = {canonical(i["metadata"]["name"]) for i in items}
    missing = []
    for item in items:
        extras = set(item.get("requested_extras") or ())
        for text in item["metadata"].get("requires_dist", []):
            requirement = Requirement(text)
            if canonical(requirement.name) in present:
                continue
            if _holds(requirement, environment, extras):
                missing.append(f"{requirement.name} (of {item['metadata']['name']})")
    return sorted(set(missing))


def target_preferences(
    report: Mapping, installed: Mapping[str, Installed], plan_: Plan, environment: Mapping[str, str]
) -> dict[str, tuple[str, str]]:
    """Unpinned packages the target has at another version that meets every
    requirement on them: name -> (the target's version, the newest pip chose). Pinning
    them there keeps the machine's tested copies and the wheelhouse small."""
    specifiers = requirement_specifiers(report, environment)
    preferred = {}
    for resolved in resolved_from_report(report):
        name = resolved.name
        entry = installed.get(name)
        if name in plan_.pinned or name in VENV_COMMANDS or is_torch_companion(name, plan_.pinned):
            continue
        if entry is None or entry.version is None or same_version(entry.version, resolved.version):
            continue
        try:
            fits = all(
                s.contains(entry.version, prereleases=True) for s in specifiers.get(name, [])
            )
        except InvalidVersion:
            fits = False
        if fits:
            preferred[name] = (entry.version, resolved.version)
    return preferred


def with_preferences(plan_: Plan, preferred: Mapping[str, tuple[str, str]]) -> Plan:
    lines = [f"{name}=={have}" for name, (have, _) in sorted(preferred.items())]
    return replace(plan_, constraints=[*plan_.constraints, *lines], preferred=dict(preferred))


def manifest_sections(decisions: Iterable[Decision], plan_: Plan) -> dict:
    """The manifest's lists: wheels, used from the target, dropped, deviations."""
    decisions = list(decisions)

    def rows(action: str) -> list[dict]:
        return [
            {k: v for k, v in asdict(d).items() if v is not None and k != "action"}
            for d in decisions
            if d.action == action
        ]

    return {
        "wheels": rows(DOWNLOAD),
        "from_target": rows(FROM_TARGET),
        "dropped": rows(DROPPED),
        "deviations": [asdict(d) for d in plan_.deviations],
        "pinned": dict(sorted(plan_.pinned.items())),
        "torch": {"version": plan_.torch_version, "source": plan_.torch_source},
        "preferred_target_versions": {
            name: {"target": have, "newest": newest}
            for name, (have, newest) in sorted(plan_.preferred.items())
        },
    }
