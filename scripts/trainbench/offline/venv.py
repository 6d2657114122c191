"""The install on the machine without network (standard library only: it runs before
anything is installed). Makes the project's .venv over the machine's interpreter,
installs the wheelhouse and the project with ``--no-index``, runs the check inside
the new venv, and writes the Makefile's markers.

Why a .pth file and not ``venv --system-site-packages``: where the machine's
``python3`` is itself a venv (``/opt/torch/.venv``, where torch lives), a venv made
from it with ``--system-site-packages`` sees the *base* interpreter's packages, not
that venv's. A .pth file in the new venv's site-packages that adds the making
interpreter's own site directories puts them after the new venv's site-packages, so
the wheelhouse's versions come first and the machine's torch is still found.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from trainbench.common.atomic_files import atomic_write_text
from trainbench.offline import OfflineError

PTH_NAME = "_trainbench_machine_site.pth"
# What the Makefile's targets wait for (its RUNTIME, DEV, SLURM variables), by the
# extra that brings each; the runtime's comes with every install.
MAKE_MARKERS = {"": ".trainbench-runtime", "dev": ".trainbench-dev", "slurm": ".trainbench-slurm"}
RECORD = ".trainbench-offline.json"
ENTRY_SCRIPT = Path("scripts") / "offline_install.py"


class InstallError(OfflineError):
    """The install cannot go on."""


def _python_json(python: str, code: str) -> object:
    done = subprocess.run([python, "-c", code], capture_output=True, text=True)
    if done.returncode != 0:
        raise InstallError(f"{python} failed to run: {done.stderr.strip()[-500:]}")
    return json.loads(done.stdout)


def site_dirs(python: str) -> list[str]:
    """The interpreter's site directories (its site-packages, and its user site
    where enabled), in its own sys.path order."""
    code = (
        "import json, site, sys\n"
        "dirs = set(site.getsitepackages())\n"
        "if site.ENABLE_USER_SITE: dirs.add(site.getusersitepackages())\n"
        "print(json.dumps([p for p in sys.path if p in dirs]))\n"
    )
    return list(_python_json(python, code))


_VERSION = "import json, sys; print(json.dumps('%d.%d' % sys.version_info[:2]))"
_PURELIB = "import json, sysconfig; print(json.dumps(sysconfig.get_paths()['purelib']))"


def python_version(python: str) -> str:
    return str(_python_json(python, _VERSION))


def venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def purelib(python: str) -> Path:
    """Where ``python`` installs pure-Python packages (a venv's site-packages)."""
    return Path(str(_python_json(python, _PURELIB)))


def pth_text(dirs: Sequence[str]) -> str:
    """addsitedir, not a bare path line: the machine's .pth files (namespace packages,
    editable installs) are processed too."""
    lines = [f"import site; site.addsitedir({d!r})" for d in dirs]
    return (
        "# trainbench offline install: the machine interpreter's packages, after this venv's\n"
        + ("\n".join(lines) + "\n")
    )


def create_venv(venv: Path, base_python: str, with_pip: bool = True) -> list[str]:
    """A venv at ``venv`` (replacing one there) whose sys.path has its own
    site-packages first, then ``base_python``'s site directories. Returns those."""
    dirs = site_dirs(base_python)
    command = [base_python, "-m", "venv", "--clear", str(venv)]
    if not with_pip:
        command.insert(3, "--without-pip")
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise InstallError(
            f"`{' '.join(command)}` failed: {done.stderr.strip()[-500:]} "
            "(a Debian/Ubuntu system python needs the python3-venv package)"
        )
    site = purelib(str(venv_python(venv)))
    atomic_write_text(site / PTH_NAME, pth_text(dirs))
    if with_pip and (site / "setuptools").is_dir():
        _remove_bundled_setuptools(venv_python(venv))
    return dirs


def _remove_bundled_setuptools(python: Path) -> None:
    """ensurepip of Python <= 3.11 puts an old setuptools (65) in every venv, which
    would shadow the one the manifest names (the wheelhouse's or the machine's) and
    cannot build the editable install without ``wheel``."""
    command = [str(python), "-m", "pip", "uninstall", "--isolated", "--yes", "--quiet"]
    command.append("setuptools")
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise InstallError(f"`{' '.join(command)}` failed: {done.stderr.strip()[-500:]}")


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def wheel_paths(wheelhouse: Path, manifest: dict) -> list[Path]:
    """The manifest's wheels, each checked against its sha256 before anything is
    installed."""
    paths = []
    for row in manifest["wheels"]:
        path = wheelhouse / row["filename"]
        if not path.is_file():
            raise InstallError(
                f"{path}: listed in the manifest but missing; copy the whole wheelhouse"
            )
        if sha256_of(path) != row["sha256"]:
            raise InstallError(
                f"{path}: sha256 differs from the manifest's; build the wheelhouse again"
            )
        paths.append(path)
    return paths


def pip_offline(python: Path, *args: str) -> None:
    """pip with no index and no dependency resolution (the manifest is the closure);
    --isolated: no PIP_* variable or user config changes what is installed."""
    command = [str(python), "-m", "pip", "install", "--isolated", "--no-index", "--no-deps", *args]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise InstallError(f"`{' '.join(command[:9])} ...` failed:\n{done.stderr.strip()[-2000:]}")


@dataclass(frozen=True)
class InstallRequest:
    repo: Path
    venv: Path
    wheelhouse: Path
    base_python: str = sys.executable
    allow_torch: bool = False
    recreate: bool = False


def read_manifest(wheelhouse: Path) -> tuple[dict, str]:
    path = wheelhouse / "manifest.json"
    try:
        text = path.read_text()
        return json.loads(text), hashlib.sha256(text.encode()).hexdigest()
    except (OSError, json.JSONDecodeError) as error:
        raise InstallError(
            f"{path}: cannot read the wheelhouse manifest ({error}); "
            "build one with `offline_install.py wheelhouse`"
        ) from None


def venv_is_current(request: InstallRequest, manifest_sha256: str) -> bool:
    """True where .venv is this install of this wheelhouse over this interpreter.
    A .venv without the Makefile's runtime marker is an unfinished setup (a `make
    report` that could not reach the network leaves one) and is replaced; a finished
    one of another kind is refused unless --recreate."""
    if not request.venv.exists():
        return False
    try:
        record = json.loads((request.venv / RECORD).read_text())
    except (OSError, json.JSONDecodeError):
        if request.recreate or not (request.venv / MAKE_MARKERS[""]).exists():
            return False
        raise InstallError(
            f"{request.venv} holds a finished install that the offline install did not make "
            f"({RECORD} missing): pass --recreate (make offline-setup RECREATE=1) to replace it"
        ) from None
    same = (
        record.get("manifest_sha256") == manifest_sha256
        and record.get("base_python") == request.base_python
    )
    return same and venv_python(request.venv).exists() and not request.recreate


def check_python(manifest: dict, base_python: str) -> None:
    want = ".".join(str(manifest["target"]["python_version"]).split(".")[:2])
    have = python_version(base_python)
    if have != want:
        raise InstallError(
            f"{base_python} is Python {have} but the wheelhouse is for Python {want}: "
            f"build it with --python-version {have}, or pass --base-python"
        )


def run_check(request: InstallRequest, facts_path: Path) -> dict:
    command = [str(venv_python(request.venv)), str(request.repo / ENTRY_SCRIPT), "check"]
    command += ["--wheelhouse", str(request.wheelhouse), "--facts", str(facts_path)]
    if request.allow_torch:
        command.append("--allow-torch")
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise InstallError((done.stdout + done.stderr).strip()[-3000:])
    return json.loads(facts_path.read_text())


def write_markers(venv: Path, extras: Sequence[str], wheelhouse: Path) -> list[Path]:
    """The Makefile's markers, written last so they are newer than pyproject.toml
    (the Makefile would otherwise reinstall from the network)."""
    written = []
    for extra, name in MAKE_MARKERS.items():
        if extra == "" or extra in extras:
            atomic_write_text(venv / name, f"installed offline from {wheelhouse}\n")
            written.append(venv / name)
    return written


def forget_install(venv: Path) -> None:
    """Markers and record go before anything changes, and come back only once the
    check has passed: where they are, the last check passed."""
    for name in (*MAKE_MARKERS.values(), RECORD):
        (venv / name).unlink(missing_ok=True)


def install(request: InstallRequest) -> dict:
    """Make (or reuse) .venv, install, check. Returns the record written to .venv."""
    manifest, manifest_sha256 = read_manifest(request.wheelhouse)
    check_python(manifest, request.base_python)
    wheels = wheel_paths(request.wheelhouse, manifest)
    reused = venv_is_current(request, manifest_sha256)
    forget_install(request.venv)
    dirs = site_dirs(request.base_python)
    if not reused:
        dirs = create_venv(request.venv, request.base_python)
        python = venv_python(request.venv)
        if wheels:
            pip_offline(python, "--ignore-installed", *map(str, wheels))
        pip_offline(python, "--no-build-isolation", "-e", str(request.repo))
    with tempfile.TemporaryDirectory() as scratch:
        torch = run_check(request, Path(scratch) / "facts.json")
    record = {
        "manifest_sha256": manifest_sha256,
        "wheelhouse": str(request.wheelhouse),
        "base_python": request.base_python,
        "machine_site_dirs": dirs,
        "reused": reused,
        "torch": torch,
        "deviations": manifest.get("deviations", []),
    }
    atomic_write_text(request.venv / RECORD, json.dumps(record, indent=1) + "\n")
    write_markers(request.venv, manifest.get("extras", []), request.wheelhouse)
    return record
