"""An offline wheelhouse for a Mac (Apple silicon) built on Linux (issue 51): the pins'
markers judged for the target's system and machine, torch from the wheelhouse for a
machine without its own (--with-torch), and what pip, judging markers by this machine,
would leave out. No network: pip is not run."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import trainbench.offline
from trainbench.offline import cli, requirements, selection, wheelhouse
from trainbench.offline.requirements import RequirementsError, canonical

REPO = Path(__file__).resolve().parents[1]
MAC = ("macosx_14_0_arm64",)
# torch 2.13.0's Requires-Dist, shortened: CUDA packages for Linux only, the rest anywhere.
TORCH_REQUIRES = [
    "filelock",
    "sympy>=1.13.3",
    'setuptools; python_version >= "3.12"',
    'nvidia-cudnn-cu13==9.20.0.48; platform_system == "Linux"',
    'triton==3.7.1; platform_system == "Linux" and python_version < "3.15"',
    'optree>=0.13.0; extra == "optree"',
]


def _real_pins(*extras: str) -> list:
    pyproject = requirements.read_pyproject(REPO / "pyproject.toml")
    return requirements.pinned_requirements(pyproject, extras)


@pytest.mark.parametrize(
    ("tag", "system", "machine"),
    [
        ("macosx_14_0_arm64", "darwin", "arm64"),
        ("macosx_10_13_x86_64", "darwin", "x86_64"),
        ("manylinux_2_28_x86_64", "linux", "x86_64"),
        ("manylinux2014_aarch64", "linux", "aarch64"),
        ("musllinux_1_2_x86_64", "linux", "x86_64"),
        ("win_amd64", "win32", "AMD64"),
    ],
)
def test_a_platform_tag_gives_the_targets_system_and_machine(tag, system, machine):
    markers = requirements.platform_markers(tag)
    assert (markers["sys_platform"], markers["platform_machine"]) == (system, machine)


@pytest.mark.parametrize("tag", ["macosx_11_0_universal2", "any", "macosx_14_0"])
def test_a_tag_of_no_one_machine_is_refused(tag):
    with pytest.raises(RequirementsError, match="e.g. macosx_14_0_arm64"):
        requirements.platform_markers(tag)


def test_tags_of_two_systems_are_refused():
    with pytest.raises(RequirementsError, match="one wheelhouse per target"):
        requirements.target_environment("3.12", ["macosx_14_0_arm64", "manylinux_2_28_x86_64"])


def test_the_pins_markers_are_judged_for_a_mac_not_for_this_machine():
    """The apple extra's zeus-apple-silicon is a Mac's, the dev extra's intel-openmp this
    Linux machine's: judged by this machine, a Mac's wheelhouse lacked the first and pip
    failed on the second (no macOS wheel)."""
    pins = _real_pins("bench", "apple", "dev")
    on_mac = requirements.for_target(pins, requirements.target_environment("3.12", MAC))
    linux = requirements.target_environment("3.12", wheelhouse.manylinux_platforms())
    on_linux = requirements.for_target(pins, linux)
    assert "zeus-apple-silicon" in [canonical(r.name) for r in on_mac]
    assert "intel-openmp" not in [canonical(r.name) for r in on_mac]
    assert "zeus-apple-silicon" not in [canonical(r.name) for r in on_linux]
    assert "apple" in requirements.DEFAULT_EXTRAS


@pytest.mark.parametrize("version", ["3.10", "3.14"])
def test_a_target_python_outside_the_pins_range_is_refused(version):
    pyproject = requirements.read_pyproject(REPO / "pyproject.toml")
    with pytest.raises(RequirementsError, match=f"--python-version {version}: outside"):
        requirements.check_python_version(pyproject, version)
    requirements.check_python_version(pyproject, "3.12")


def test_with_torch_the_pinned_torch_is_planned_and_no_target_torch_needed():
    pins = _real_pins("bench")
    no_torch_here = {"numpy": requirements.Installed("numpy", "2.4.6", "numpy==2.4.6")}
    plan = selection.plan(pins, [], no_torch_here, with_torch=True)
    assert plan.torch_in_wheelhouse and plan.torch_version == "2.13.0"
    assert plan.requirements[0] == f"torch==2.13.0+{selection.STUB_LABEL}"
    assert plan.deviations == [] and "--with-torch" in plan.torch_source


def test_the_torch_stand_in_carries_the_real_wheels_requirements_for_the_target(tmp_path):
    torch = {"metadata": {"name": "torch", "version": "2.13.0", "requires_dist": TORCH_REQUIRES}}
    target = wheelhouse.Target("3.12", MAC)
    requires = wheelhouse.torch_requirements(torch, target)
    assert requires == ["filelock", "sympy>=1.13.3", "setuptools"]
    wheel = wheelhouse.write_stub_wheel(tmp_path, "torch", "2.13.0+machine", requires)
    with zipfile.ZipFile(wheel) as archive:
        meta = archive.read("torch-2.13.0+machine.dist-info/METADATA").decode()
    assert "Requires-Dist: sympy>=1.13.3\n" in meta and "nvidia" not in meta


def _item(name: str, version: str, requires: list[str], url: str | None = None) -> dict:
    url = url or f"https://x/{name}-{version}-py3-none-any.whl"
    return {
        "metadata": {"name": name, "version": version, "requires_dist": requires},
        "download_info": {"url": url, "archive_info": {"hashes": {"sha256": "ab" * 32}}},
    }


def test_with_torch_the_real_wheel_replaces_the_stand_in_and_is_downloaded():
    stand_in = _item("torch", "2.13.0+machine", ["sympy"], "file:///w/stub/torch-2.13.0+machine-py3-none-any.whl")  # fmt: skip
    real_url = "https://x/torch-2.13.0-cp312-cp312-macosx_14_0_arm64.whl"
    report = {"install": [stand_in, _item("sympy", "1.14.0", [])]}
    report = wheelhouse.with_real_torch(report, _item("torch", "2.13.0", TORCH_REQUIRES, real_url))
    plan = selection.plan(_real_pins(), [], None, with_torch=True)
    decisions = selection.select(selection.resolved_from_report(report), None, plan)
    torch = [d for d in decisions if d.name == "torch"]
    assert len(torch) == 1 and torch[0].action == selection.DOWNLOAD
    assert torch[0].filename == "torch-2.13.0-cp312-cp312-macosx_14_0_arm64.whl"


def test_with_torch_its_cuda_companions_are_kept_too():
    """On a Linux target, --with-torch brings torch's CUDA stack with it: a torch without
    it would not import."""
    plan = selection.plan(_real_pins(), [], None, with_torch=True)
    companion = selection.Resolved("nvidia-cudnn-cu13", "9.20.0.48", "https://x/a.whl", "ab" * 32)
    assert selection.decide(companion, None, plan).action == selection.DOWNLOAD
    machines = selection.plan(_real_pins(), [], None)
    assert selection.decide(companion, None, machines).action == selection.DROPPED


def test_what_pip_left_out_by_this_machines_markers_is_named():
    report = {
        "install": [
            _item(
                "ipython",
                "9.0",
                ["appnope; sys_platform == 'darwin'", "pexpect; sys_platform != 'win32'"],
            ),  # fmt: skip
            _item("pexpect", "4.9", []),
        ]
    }
    mac = requirements.target_environment("3.12", MAC)
    linux = requirements.target_environment("3.12", wheelhouse.manylinux_platforms())
    assert selection.left_out_for_target(report, mac) == ["appnope (of ipython)"]
    assert selection.left_out_for_target(report, linux) == []


def test_the_wheelhouse_step_on_python_3_10_names_the_python_it_needs(
    monkeypatch, capsys, tmp_path
):
    for module in ("wheelhouse", "requirements"):
        monkeypatch.delitem(sys.modules, f"trainbench.offline.{module}")
        monkeypatch.delattr(trainbench.offline, module)
    monkeypatch.setitem(sys.modules, "tomllib", None)  # as on 3.10: no tomllib
    args = ["wheelhouse", "--python-version", "3.12", "--dest", str(tmp_path / "w")]
    assert cli.main(args) == 2
    assert "needs Python 3.11 or later" in capsys.readouterr().err


def test_make_wheelhouse_passes_a_macs_platform_and_torch():
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    done = subprocess.run(
        ["make", "-n", "--no-print-directory", "-C", str(REPO), "wheelhouse", "TARGET_PYTHON=3.12",
         "TARGET_PLATFORM=macosx_14_0_arm64", "WITH_TORCH=1", "EXTRAS=bench apple dev"],
        env=env, capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    command = " ".join(done.stdout.replace("\\\n", " ").split())
    assert "--platform macosx_14_0_arm64 --with-torch --extras bench apple dev" in command
