"""Build a wheelhouse where the network is: pip resolves the pins for the target
(``pip install --dry-run --report`` with the target's Python and platform tags), the
selection keeps what the target lacks, pip downloads those (hash-checked), and a
manifest says what is in it and why."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import parse_wheel_filename
from trainbench.common.atomic_files import atomic_write_text, current_umask
from trainbench.offline import OfflineError, check, selection
from trainbench.offline import requirements as reqs

MANIFEST = "manifest.json"
MANIFEST_FORMAT = 1
# manylinux_2_28: glibc 2.28 or newer (RHEL 8, Debian 10, Ubuntu 18.10 and later).
DEFAULT_GLIBC_MINOR = 28
# The legacy names of manylinux_2_17/2_12/2_5; some wheels carry only those.
_LEGACY_MANYLINUX = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}
# Packages published only as source: each is built here into a pure-Python wheel (one
# pip run each), at most this many per wheelhouse.
MAX_SOURCE_BUILDS = 20
_NOT_FOUND = re.compile(r"No matching distribution found for (\S+)")


class WheelhouseError(OfflineError):
    """pip could not resolve, build or download."""


@dataclass(frozen=True)
class Target:
    """The interpreter and platform the wheels are for."""

    python_version: str
    platforms: tuple[str, ...]
    implementation: str = "cp"

    def environment(self) -> dict[str, str]:
        """The marker values of the target (its Python, system and machine)."""
        return reqs.target_environment(self.python_version, self.platforms)

    def pip_options(self) -> list[str]:
        options = ["--only-binary=:all:", "--python-version", self.python_version]
        options += ["--implementation", self.implementation]
        for platform in self.platforms:
            options += ["--platform", platform]
        return options


def manylinux_platforms(
    arch: str = "x86_64", glibc_minor: int = DEFAULT_GLIBC_MINOR
) -> tuple[str, ...]:
    """Every manylinux tag a machine with glibc 2.<glibc_minor> accepts, newest first."""
    tags = []
    for minor in range(glibc_minor, 4, -1):
        tags.append(f"manylinux_2_{minor}_{arch}")
        if minor in _LEGACY_MANYLINUX:
            tags.append(f"{_LEGACY_MANYLINUX[minor]}_{arch}")
    return tuple(tags)


def _pip(python: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([python, "-m", "pip", *args], capture_output=True, text=True)


def _pip_error(done: subprocess.CompletedProcess) -> str:
    lines = [line for line in done.stderr.splitlines() if line.startswith("ERROR")]
    return "\n".join(lines[-6:] or done.stderr.strip().splitlines()[-6:])


def write_stub_wheel(folder: Path, name: str, version: str, requires: Sequence[str] = ()) -> Path:
    """A wheel of ``name`` at ``version`` with no files and only ``requires`` (none: the
    machine's torch, whose dependencies are the machine's): it stands for torch while pip
    resolves the rest against that version."""
    folder.mkdir(parents=True, exist_ok=True)
    info = f"{name}-{version}.dist-info"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    metadata += "".join(f"Requires-Dist: {line}\n" for line in requires)
    files = {
        f"{info}/METADATA": metadata,
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: trainbench.offline\n"
        "Root-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = ""
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=")
        record += f"{path},sha256={digest.decode()},{len(text.encode())}\n"
    files[f"{info}/RECORD"] = record + f"{info}/RECORD,,\n"
    wheel = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, text in files.items():
            archive.writestr(path, text)
    return wheel


def is_pure(wheel: Path) -> bool:
    tags = parse_wheel_filename(wheel.name)[3]
    return all(tag.abi == "none" and tag.platform == "any" for tag in tags)


def build_pure_wheel(python: str, requirement: str, folder: Path) -> Path:
    """A package the index has only as source, built here; refused unless the wheel
    is pure Python (a compiled one would be for this machine, not the target)."""
    with tempfile.TemporaryDirectory() as scratch:
        done = _pip(python, "wheel", "--quiet", "--no-deps", "-w", scratch, requirement)
        wheels = list(Path(scratch).glob("*.whl"))
        if done.returncode != 0 or len(wheels) != 1:
            raise WheelhouseError(
                f"{requirement}: no wheel for the target and none could be built here:\n"
                f"{_pip_error(done)}"
            )
        if not is_pure(wheels[0]):
            raise WheelhouseError(
                f"{requirement}: the index has no wheel for the target, and the one pip "
                f"gives here ({wheels[0].name}) is for this machine; build it on a "
                "machine like the target and put it in a --find-links folder"
            )
        folder.mkdir(parents=True, exist_ok=True)
        return Path(shutil.move(str(wheels[0]), folder / wheels[0].name))


def pinned_torch(python: str, version: str, target: Target, workdir: Path) -> dict:
    """pip's report entry for the torch wheel of the target (``--with-torch``): its file,
    hash and dependencies. pip is not asked to resolve those: it would judge torch's
    markers by this machine (its CUDA packages are for Linux only)."""
    report = workdir / "torch.json"
    args = ["install", "--dry-run", "--ignore-installed", "--no-deps", "--quiet"]
    args += ["--report", str(report), *target.pip_options(), f"{selection.TORCH}=={version}"]
    done = _pip(python, *args)
    if done.returncode != 0:
        raise WheelhouseError(
            f"--with-torch: torch {version} has no wheel for Python {target.python_version} "
            f"on {target.platforms[0]}:\n{_pip_error(done)}"
        )
    return json.loads(report.read_text())["install"][0]


def torch_requirements(torch: dict, target: Target) -> list[str]:
    """The requirements of the torch wheel that hold on the target, markers dropped."""
    requires = [Requirement(text) for text in torch["metadata"].get("requires_dist", [])]
    return [str(r) for r in reqs.for_target(requires, target.environment())]


def with_real_torch(report: dict, torch: dict) -> dict:
    """The report with the torch wheel of ``pinned_torch`` in place of its stand-in."""
    others = [
        i for i in report["install"] if reqs.canonical(i["metadata"]["name"]) != selection.TORCH
    ]
    return {**report, "install": [*others, torch]}


def resolve(
    python: str,
    plan: selection.Plan,
    target: Target,
    workdir: Path,
    torch_requires: Sequence[str] = (),
) -> dict:
    """pip's installation report for the plan on the target; packages that exist
    only as source are built into pure wheels and the resolution is tried again."""
    stub = write_stub_wheel(
        workdir / "stub",
        selection.TORCH,
        f"{selection.public_version(plan.torch_version)}+{selection.STUB_LABEL}",
        torch_requires,
    )
    built = workdir / "built"
    built.mkdir(exist_ok=True)
    (workdir / "requirements.txt").write_text("\n".join(plan.requirements) + "\n")
    (workdir / "constraints.txt").write_text("\n".join(plan.constraints) + "\n")
    report = workdir / "report.json"
    args = ["install", "--dry-run", "--ignore-installed", "--quiet", "--report", str(report)]
    args += [*target.pip_options(), "--find-links", str(stub.parent), "--find-links", str(built)]
    args += ["-r", str(workdir / "requirements.txt"), "-c", str(workdir / "constraints.txt")]
    tried: set[str] = set()
    while True:
        done = _pip(python, *args)
        if done.returncode == 0:
            return json.loads(report.read_text())
        if "Can not use any platform or abi specific options" in done.stderr:
            raise WheelhouseError(
                f"the pip of {python} cannot resolve for another platform with --dry-run; "
                f"upgrade it ({python} -m pip install --upgrade pip) or pass another --pip-python"
            )
        missing = _NOT_FOUND.search(done.stderr)
        if missing is None or missing[1] in tried or len(tried) >= MAX_SOURCE_BUILDS:
            raise WheelhouseError(
                f"pip cannot resolve the pins for the target:\n{_pip_error(done)}"
            )
        tried.add(missing[1])
        build_pure_wheel(python, missing[1], built)


def download(
    python: str, wheels: Sequence[selection.Decision], target: Target, find_links: Path, dest: Path
) -> dict[str, int]:
    """The chosen files, hash-checked by pip: file name -> bytes."""
    lines = []
    for wheel in wheels:
        if not wheel.sha256:
            raise WheelhouseError(f"{wheel.filename}: pip's report gives no sha256 for it")
        lines.append(f"{wheel.name}=={wheel.version} --hash=sha256:{wheel.sha256}")
    with tempfile.TemporaryDirectory() as scratch:
        listing = Path(scratch) / "wheels.txt"
        listing.write_text("\n".join(lines) + "\n")
        done = _pip(
            python, "download", "--quiet", "--no-deps", "-d", str(dest), *target.pip_options(),
            "--find-links", str(find_links), "-r", str(listing),
        )  # fmt: skip
    if done.returncode != 0:
        raise WheelhouseError(f"pip download failed:\n{_pip_error(done)}")
    sizes = {}
    for wheel in wheels:
        path = dest / str(wheel.filename)
        if not path.is_file():
            raise WheelhouseError(f"pip download did not write {wheel.filename} to {dest}")
        sizes[path.name] = path.stat().st_size
    return sizes


def check_destination(dest: Path) -> None:
    """A wheelhouse replaces an earlier one, never a folder of something else."""
    if dest.exists() and any(dest.iterdir()) and not (dest / MANIFEST).is_file():
        raise WheelhouseError(
            f"{dest} exists, is not empty and has no {MANIFEST}: not replacing it; "
            "pass another --dest or empty it"
        )


def _swap_in(staging: Path, dest: Path) -> None:
    """``staging`` becomes ``dest``; an earlier wheelhouse there goes once it has."""
    old = None
    if dest.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{dest.name}.old-", dir=dest.parent))
        os.replace(dest, old / "wheelhouse")
    os.replace(staging, dest)
    if old is not None:
        shutil.rmtree(old)


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _header(
    repo: Path, target: Target, freeze: Path | None, extras: Sequence[str], report: dict
) -> dict:
    environment = report.get("environment", {})
    header = {
        "format": MANIFEST_FORMAT,
        "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "pyproject_sha256": _sha256(repo / "pyproject.toml"),
        "extras": list(extras),
        "target": {
            "python_version": target.python_version,
            "implementation": target.implementation,
            "platforms": list(target.platforms),
            "freeze": str(freeze) if freeze else None,
            "freeze_sha256": _sha256(freeze) if freeze else None,
        },
        "resolved_with": {
            "pip": report.get("pip_version"),
            "python": environment.get("python_full_version"),
        },
    }
    if environment.get("python_version") != ".".join(target.python_version.split(".")[:2]):
        header["resolved_with"]["note"] = (
            "the dependencies' environment markers were judged for Python "
            f"{environment.get('python_version')} (the interpreter running pip), not the "
            f"target's {target.python_version}; --pip-python with a {target.python_version} "
            "interpreter avoids that"
        )
    return header


@dataclass(frozen=True)
class Request:
    """What the ``wheelhouse`` sub-command was asked for."""

    repo: Path
    dest: Path
    target: Target
    freeze: Path | None
    extras: tuple[str, ...]
    keep_target: tuple[str, ...]
    pip_python: str = sys.executable
    prefer_target: bool = True
    allow_torch: bool = False
    with_torch: bool = False


def plan_for(request: Request) -> tuple[selection.Plan, dict | None]:
    """The resolution plan and the target's freeze (None where none was given)."""
    pyproject = reqs.read_pyproject(request.repo / "pyproject.toml")
    reqs.check_python_version(pyproject, request.target.python_version)
    environment = request.target.environment()
    pins = reqs.for_target(reqs.pinned_requirements(pyproject, request.extras), environment)
    build = reqs.for_target(reqs.build_requirements(pyproject), environment)
    installed = None
    if request.freeze is not None:
        try:
            text = request.freeze.read_text()
        except OSError as error:
            raise reqs.RequirementsError(
                f"--target-freeze {request.freeze}: {error.strerror}"
            ) from None
        installed = reqs.parse_freeze(text, str(request.freeze))
    plan = selection.plan(pins, build, installed, request.keep_target, request.with_torch)
    return plan, installed


def resolve_preferring_target(
    request: Request,
    plan: selection.Plan,
    installed: dict | None,
    work: Path,
    torch_requires: Sequence[str] = (),
) -> tuple[selection.Plan, dict, str | None]:
    """Resolve; then, where the target has an unpinned package at a version that meets
    every requirement on it, resolve again holding it there. The first resolution
    stands (with a note) where the second fails."""
    python, target = request.pip_python, request.target
    report = resolve(python, plan, target, work, torch_requires)
    if not installed or not request.prefer_target:
        return plan, report, None
    preferred = selection.target_preferences(report, installed, plan, target.environment())
    if not preferred:
        return plan, report, None
    preferring = selection.with_preferences(plan, preferred)
    try:
        return preferring, resolve(python, preferring, target, work, torch_requires), None
    except WheelhouseError as error:
        note = f"holding {', '.join(sorted(preferred))} at the target's versions failed ({error}); the newest are used"
        return plan, report, note


def resolve_for_target(
    request: Request, plan: selection.Plan, installed: dict | None, work: Path
) -> tuple[selection.Plan, dict, str | None]:
    """``resolve_preferring_target``; with --with-torch, torch's stand-in carries the
    real wheel's requirements for the target and the real wheel takes its place in the
    report. Refused where pip left out what the target needs."""
    torch, torch_requires = None, []
    if plan.torch_in_wheelhouse:
        torch = pinned_torch(request.pip_python, plan.torch_version, request.target, work)
        torch_requires = torch_requirements(torch, request.target)
    plan, report, note = resolve_preferring_target(request, plan, installed, work, torch_requires)
    if torch is not None:
        report = with_real_torch(report, torch)
    left_out = selection.left_out_for_target(report, request.target.environment())
    if left_out:
        raise WheelhouseError(
            "pip judged the dependencies' markers for this machine and left out what the "
            f"target needs: {'; '.join(left_out)}. Build the wheelhouse on a machine of "
            "the target's system, or pin those in pyproject.toml"
        )
    return plan, report, note


def build(request: Request) -> dict:
    """Resolve, select, download into a staging folder, write the manifest, and put
    the folder in place of ``request.dest``. Returns the manifest."""
    check_destination(request.dest)
    plan, installed = plan_for(request)
    problem = check.torch_problem(plan.torch_version, request.allow_torch)
    if problem:
        raise WheelhouseError(f"the target's {problem}")
    with tempfile.TemporaryDirectory() as work:
        plan, report, note = resolve_for_target(request, plan, installed, Path(work))
        decisions = selection.select(selection.resolved_from_report(report), installed, plan)
        manifest = {
            **_header(request.repo, request.target, request.freeze, request.extras, report),
            **selection.manifest_sections(decisions, plan),
            "requirements": plan.requirements,
            "constraints": plan.constraints,
        }
        if note:
            manifest["preference_note"] = note
        request.dest.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(
            tempfile.mkdtemp(prefix=f".{request.dest.name}.new-", dir=request.dest.parent)
        )
        try:
            os.chmod(staging, 0o777 & ~current_umask())
            wheels = [d for d in decisions if d.action == selection.DOWNLOAD]
            sizes = download(
                request.pip_python, wheels, request.target, Path(work) / "built", staging
            )
            for row in manifest["wheels"]:
                row["bytes"] = sizes[row["filename"]]
            manifest["total_bytes"] = sum(sizes.values())
            atomic_write_text(staging / MANIFEST, json.dumps(manifest, indent=1) + "\n")
            _swap_in(staging, request.dest)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                shutil.rmtree(staging)
            raise
    return manifest
