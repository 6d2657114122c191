"""The offline install's venv (trainbench.offline.venv, .check): the new venv's own
packages come first and the making interpreter's after (where the machine's torch
lives), wheels are hash-checked, a foreign .venv is kept, and the check reads
versions as the venv sees them. Venvs are made in tmp_path; nothing is downloaded."""

from __future__ import annotations

import base64
import hashlib
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from trainbench.offline import check
from trainbench.offline import venv as offline_venv

REPO = Path(__file__).resolve().parents[1]
PATH_ORDER = (
    "import json, sys, sysconfig, shadowmod, onlymachine, extramod\n"
    "print(json.dumps({'shadow': shadowmod.VALUE, 'path': sys.path,"
    " 'purelib': sysconfig.get_paths()['purelib']}))"
)


def _machine(tmp_path: Path) -> tuple[str, Path]:
    """A stand-in for the lent machine's /opt/torch/.venv: a venv (of the test's own
    interpreter, itself a venv) with a module the project venv shadows, one it
    lacks, and a .pth file of its own."""
    root = tmp_path / "machine"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    python = str(root / "bin" / "python")
    site = offline_venv.purelib(python)
    (site / "shadowmod.py").write_text("VALUE = 'machine'\n")
    (site / "onlymachine.py").write_text("")
    extra = tmp_path / "extra"
    extra.mkdir()
    (extra / "extramod.py").write_text("")
    (site / "machine_extra.pth").write_text(f"{extra}\n")
    return python, site


def _run_json(python: Path, code: str) -> dict:
    done = subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def test_the_new_venvs_packages_come_before_the_machine_interpreters(tmp_path):
    machine_python, machine_site = _machine(tmp_path)
    project = tmp_path / "project" / ".venv"
    dirs = offline_venv.create_venv(project, machine_python, with_pip=False)
    assert dirs == [str(machine_site)]
    python = offline_venv.venv_python(project)
    (offline_venv.purelib(str(python)) / "shadowmod.py").write_text("VALUE = 'venv'\n")
    seen = _run_json(python, PATH_ORDER)
    assert seen["shadow"] == "venv"
    assert seen["path"].index(seen["purelib"]) < seen["path"].index(str(machine_site))
    # extramod came through the machine's own .pth file (site.addsitedir, not a path line).
    assert str(tmp_path / "extra") in seen["path"]


def test_only_the_making_interpreters_own_site_dirs_are_added(tmp_path):
    """Not those of the interpreter the machine venv was itself made from (the
    test's own, which has pytest): the chain stops at the machine's interpreter."""
    machine_python, _ = _machine(tmp_path)
    project = tmp_path / "project" / ".venv"
    offline_venv.create_venv(project, machine_python, with_pip=False)
    code = (
        "import importlib.util, json; print(json.dumps(importlib.util.find_spec('pytest') is None))"
    )
    assert _run_json(offline_venv.venv_python(project), code) is True


def test_a_wheel_that_differs_from_the_manifest_is_refused_before_any_install(tmp_path):
    wheel = tmp_path / "a-1.0-py3-none-any.whl"
    wheel.write_bytes(b"wheel bytes")
    good = {
        "wheels": [{"filename": wheel.name, "sha256": hashlib.sha256(b"wheel bytes").hexdigest()}]
    }
    assert offline_venv.wheel_paths(tmp_path, good) == [wheel]
    bad = {"wheels": [{"filename": wheel.name, "sha256": "0" * 64}]}
    with pytest.raises(offline_venv.InstallError, match="a-1.0-py3-none-any.whl: sha256 differs"):
        offline_venv.wheel_paths(tmp_path, bad)
    missing = {"wheels": [{"filename": "b-1.0-py3-none-any.whl", "sha256": "0" * 64}]}
    with pytest.raises(offline_venv.InstallError, match="missing; copy the whole wheelhouse"):
        offline_venv.wheel_paths(tmp_path, missing)


def test_a_finished_venv_the_offline_install_did_not_make_is_kept_unless_recreate(tmp_path):
    (tmp_path / ".venv").mkdir()
    request = offline_venv.InstallRequest(tmp_path, tmp_path / ".venv", tmp_path / ".whl")
    # No runtime marker: an unfinished `make report` setup, replaced.
    assert offline_venv.venv_is_current(request, "abc") is False
    (tmp_path / ".venv" / ".trainbench-runtime").touch()
    with pytest.raises(offline_venv.InstallError, match="--recreate"):
        offline_venv.venv_is_current(request, "abc")
    recreate = offline_venv.InstallRequest(
        tmp_path, tmp_path / ".venv", tmp_path / ".whl", recreate=True
    )
    assert offline_venv.venv_is_current(recreate, "abc") is False


def test_a_wheelhouse_for_another_python_is_refused():
    other = "3.99" if sys.version_info[:2] != (3, 99) else "3.98"
    with pytest.raises(offline_venv.InstallError, match=f"wheelhouse is for Python {other}"):
        offline_venv.check_python({"target": {"python_version": other}}, sys.executable)


def test_the_markers_follow_the_extras_in_the_wheelhouse(tmp_path):
    written = offline_venv.write_markers(tmp_path, ["bench", "dev"], tmp_path / ".whl")
    assert sorted(p.name for p in written) == [".trainbench-dev", ".trainbench-runtime"]


def test_the_check_reports_wrong_and_missing_versions():
    have = check.metadata.version("pytest")
    assert check.version_problems({"pytest": have}) == []
    (wrong,) = check.version_problems({"pytest": "0.0.1"})
    assert wrong.startswith(f"pytest: {have} from ") and "(expected 0.0.1)" in wrong
    assert check.version_problems({"no-such-dist-x": "1"}) == [
        "no-such-dist-x: not installed (expected 1)"
    ]


def _wheel(folder: Path, name: str, version: str, source: str) -> Path:
    info = f"{name}-{version}.dist-info"
    files = {
        f"{name}.py": source,
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = ""
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=")
        record += f"{path},sha256={digest.decode()},{len(text)}\n"
    files[f"{info}/RECORD"] = record + f"{info}/RECORD,,\n"
    path = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        for member, text in files.items():
            archive.writestr(member, text)
    return path


@pytest.mark.slow
def test_install_makes_a_checked_venv_over_the_interpreter_with_torch(tmp_path):
    """The whole install with no index: a one-wheel wheelhouse, a tiny project, and
    the test's own interpreter as the machine's (its torch and numpy are used)."""
    import numpy
    import torch

    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "scripts").symlink_to(REPO / "scripts")
    (repo / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=69"]\nbuild-backend = "setuptools.build_meta"\n'
        '[project]\nname = "fakeproject"\nversion = "0.1"\n[tool.setuptools]\npy-modules = []\n'
    )
    houses = tmp_path / "whl"
    houses.mkdir()
    wheel = _wheel(houses, "tinypkg", "1.0", "VALUE = 1\n")
    manifest = {
        "target": {"python_version": f"{sys.version_info.major}.{sys.version_info.minor}"},
        "extras": ["bench"],
        "wheels": [{"name": "tinypkg", "version": "1.0", "filename": wheel.name, "sha256": offline_venv.sha256_of(wheel)}],
        "from_target": [{"name": "numpy", "version": numpy.__version__}],
        "pinned": {"tinypkg": "1.0", "numpy": numpy.__version__, "torch": "2.13.0"},
        "deviations": [],
    }  # fmt: skip
    (houses / "manifest.json").write_text(json.dumps(manifest))
    request = offline_venv.InstallRequest(repo, repo / ".venv", houses, sys.executable)
    record = offline_venv.install(request)
    assert record["torch"]["version"] == torch.__version__ and not record["reused"]
    assert (repo / ".venv" / ".trainbench-runtime").is_file()
    assert not (repo / ".venv" / ".trainbench-dev").exists()
    code = "import json, tinypkg, numpy; print(json.dumps([tinypkg.__file__, numpy.__file__]))"
    tiny, numpy_file = _run_json(offline_venv.venv_python(repo / ".venv"), code)
    assert tiny.startswith(str(repo / ".venv")) and numpy_file == numpy.__file__
    assert offline_venv.install(request)["reused"] is True
