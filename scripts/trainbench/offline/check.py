"""What an offline-installed .venv must show before a run: every package of the
wheelhouse manifest at its version (the wheel's, or the target's where the manifest
says the target's copy is used), every pin importable, and a torch in the supported
range. Runs inside the new venv (``offline_install.py check``)."""

from __future__ import annotations

import importlib
import importlib.metadata as metadata
import json
from collections.abc import Iterable, Mapping
from pathlib import Path

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version
from trainbench.offline import OfflineError
from trainbench.offline.requirements import canonical

# The torch versions trainbench runs on. Tested: 2.13.0 (the pin; CPU wheel, the
# full test suite on the development machine) and 2.11.0+cu130 (the lent H100's own
# torch, Python 3.12: scripts/gpu_preflight.py ran the harness's CUDA training loop).
# 2.12 lies in the range untested. Outside it, `--allow-torch` runs anyway; the
# records carry the torch that ran (environment.torch_version).
SUPPORTED_TORCH = SpecifierSet(">=2.11,<2.14")
TESTED_TORCH = ("2.13.0", "2.11.0")
# Import names of the pins whose module is not their canonical name with "_".
IMPORT_NAMES = {
    "scikit-learn": "sklearn",
    "pillow": "PIL",
    "pyyaml": "yaml",
    "faiss-cpu": "faiss",
    "nvidia-ml-py": "pynvml",
    "zeus-apple-silicon": "zeus_apple_silicon",
    "pytest-xdist": "xdist",
}


class CheckError(OfflineError):
    """The venv is not what the manifest says."""


def torch_problem(version: str, allow: bool = False) -> str | None:
    """None when ``version`` is supported (or allowed); else one line naming it and
    the way to override."""
    try:
        supported = Version(version).public in SUPPORTED_TORCH
    except InvalidVersion:
        supported = False
    if supported or allow:
        return None
    return (
        f"torch {version} is outside the supported range {SUPPORTED_TORCH} "
        f"(tested: {', '.join(TESTED_TORCH)}); pass --allow-torch to use it anyway "
        "(the records carry the torch that ran)"
    )


def torch_tested(version: str) -> bool:
    return Version(Version(version).public) in {Version(v) for v in TESTED_TORCH}


def torch_support(version: str) -> str:
    """How far ``version`` is vouched for, in words for the install's last line."""
    if torch_tested(version):
        return "tested"
    if torch_problem(version) is None:
        return "in the supported range, not itself tested"
    return f"outside the supported range {SUPPORTED_TORCH}, allowed by --allow-torch"


def expected_versions(manifest: Mapping) -> dict[str, str]:
    """Canonical name -> the version the venv must show (wheels and target copies)."""
    rows = [*manifest["wheels"], *manifest["from_target"]]
    return {canonical(row["name"]): row["version"] for row in rows}


def import_name(distribution: str) -> str:
    name = canonical(distribution)
    return IMPORT_NAMES.get(name, name.replace("-", "_"))


def version_problems(expected: Mapping[str, str]) -> list[str]:
    problems = []
    for name, want in sorted(expected.items()):
        try:
            have = metadata.version(name)
        except metadata.PackageNotFoundError:
            problems.append(f"{name}: not installed (expected {want})")
            continue
        if Version(have) != Version(want):
            where = metadata.distribution(name).locate_file("")
            problems.append(f"{name}: {have} from {where} (expected {want})")
    return problems


def import_problems(distributions: Iterable[str]) -> list[str]:
    problems = []
    for distribution in sorted(distributions):
        module = import_name(distribution)
        try:
            importlib.import_module(module)
        except Exception as error:  # noqa: BLE001 - any failure is the answer
            problems.append(
                f"{distribution}: import {module} failed: {type(error).__name__}: {error}"
            )
    return problems


def torch_facts() -> dict:
    import torch

    facts = {
        "version": torch.__version__,
        "cuda": torch.version.cuda,
        "cuda_available": torch.cuda.is_available(),
        "location": str(Path(torch.__file__).parent),
    }
    if facts["cuda_available"]:
        facts["device"] = torch.cuda.get_device_name(0)
    return facts


def read_manifest(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise CheckError(f"{path}: cannot read the wheelhouse manifest ({error})") from None


def run_check(manifest: Mapping, allow_torch: bool = False) -> dict:
    """The torch facts when everything holds; CheckError listing every problem else."""
    pins = [name for name in manifest["pinned"] if name != "torch"]
    problems = version_problems(expected_versions(manifest)) + import_problems(pins)
    facts = torch_facts()
    problem = torch_problem(facts["version"], allow_torch)
    if problem:
        problems.append(problem)
    if problems:
        raise CheckError(
            "the offline venv is not as the manifest says:\n  " + "\n  ".join(problems)
        )
    return {**facts, "support": torch_support(facts["version"])}
