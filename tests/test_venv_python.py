"""The venv check that `make report`, `make test` and every target through $(RUNTIME) run
first (scripts/venv_python.py, issue 51): a first run with a stock Mac's python3 (3.9)
must not leave a .venv that a second run with PYTHON=python3.12 keeps forever."""

from __future__ import annotations

import ast
import glob
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import venv_python
from helpers import REPO
from packaging.specifiers import SpecifierSet

RANGE = ">=3.11,<3.14"


def fake_venv(folder: Path, cfg_version: str, interpreter: bool = True) -> Path:
    """A folder shaped like a venv: pyvenv.cfg naming ``cfg_version``, bin/python, and
    the Makefile's stamps."""
    (folder / "bin").mkdir(parents=True)
    (folder / "pyvenv.cfg").write_text(
        f"home = /usr/bin\ninclude-system-site-packages = false\nversion = {cfg_version}\n"
    )
    if interpreter:
        (folder / "bin" / "python").symlink_to(sys.executable)
    (folder / ".trainbench-runtime").touch()
    (folder / ".trainbench-dev").touch()
    return folder


def decide(venv: Path, version: tuple[int, int], given: bool, **kwargs) -> venv_python.Decision:
    return venv_python.decide(str(venv), "python3", version, given, RANGE, "report", **kwargs)


def test_no_venv_and_an_old_python_stops_with_the_command_that_fixes_it(tmp_path):
    decision = decide(tmp_path / ".venv", (3, 9), given=False)
    assert decision.action == venv_python.STOP
    assert decision.message == (
        "python3 is Python 3.9, outside >=3.11,<3.14 (pyproject.toml requires-python): "
        "make report PYTHON=python3.13"
    )
    on_a_mac = decide(tmp_path / ".venv", (3, 9), given=False, platform="darwin")
    assert on_a_mac.message.endswith("(python.org's installer, or brew install python@3.13)")
    assert decide(tmp_path / ".venv", (3, 14), given=False).action == venv_python.STOP
    assert decide(tmp_path / ".venv", (3, 12), given=False).action == venv_python.MAKE


def test_a_venv_of_an_old_python_is_made_anew_with_a_good_one(tmp_path):
    venv = fake_venv(tmp_path / ".venv", "3.9.6")
    for given in (True, False):
        decision = decide(venv, (3, 12), given)
        assert decision.action == venv_python.REMAKE
        assert decision.message.startswith(f"{venv} has Python 3.9, outside >=3.11,<3.14")
        assert "makes it anew with python3 (Python 3.12)" in decision.message


def test_an_old_venv_and_an_old_default_python_say_what_to_run(tmp_path):
    venv = fake_venv(tmp_path / ".venv", "3.9.6")
    decision = decide(venv, (3, 9), given=False)
    assert decision.action == venv_python.STOP
    assert decision.message.endswith("make report PYTHON=python3.13 makes it anew")


def test_a_given_python_of_another_version_remakes_the_venv(tmp_path):
    venv = fake_venv(tmp_path / ".venv", "3.12.1")
    decision = decide(venv, (3, 13), given=True)
    assert decision.action == venv_python.REMAKE
    assert "has Python 3.12, PYTHON=python3 is 3.13" in decision.message
    assert decide(venv, (3, 12), given=True).action == venv_python.KEEP


def test_the_default_python3_never_replaces_a_good_venv(tmp_path):
    """A Mac after `make report PYTHON=python3.12`: python3 is still 3.9; make report
    without PYTHON uses the 3.12 .venv as it is."""
    venv = fake_venv(tmp_path / ".venv", "3.12.1")
    for version in ((3, 9), (3, 13)):
        assert decide(venv, version, given=False) == venv_python.Decision(venv_python.KEEP)


def test_a_given_python_outside_the_range_stops_even_beside_a_good_venv(tmp_path):
    venv = fake_venv(tmp_path / ".venv", "3.12.1")
    decision = decide(venv, (3, 9), given=True)
    assert decision.action == venv_python.STOP
    assert decision.message.startswith("PYTHON=python3 is Python 3.9, outside >=3.11,<3.14")


def test_a_venv_whose_interpreter_is_gone_is_made_anew(tmp_path):
    venv = fake_venv(tmp_path / ".venv", "3.12.1", interpreter=False)
    decision = decide(venv, (3, 12), given=False)
    assert decision.action == venv_python.REMAKE
    assert "has lost its interpreter" in decision.message


def test_version_info_lines_of_virtualenv_and_uv_are_read(tmp_path):
    (tmp_path / "pyvenv.cfg").write_text(
        "home = /x\nimplementation = CPython\nversion_info = 3.9.18.final.0\n"
    )
    assert venv_python.venv_python_version(str(tmp_path)) == (3, 9)


def test_a_folder_that_is_not_a_venv_is_never_emptied(tmp_path):
    folder = tmp_path / ".venv"
    folder.mkdir()
    (folder / "notes.txt").write_text("mine")
    decision = decide(folder, (3, 12), given=True)
    assert decision.action == venv_python.STOP
    assert "is not a venv (no pyvenv.cfg)" in decision.message


def test_an_offline_venv_is_left_to_offline_setup(tmp_path):
    venv = fake_venv(tmp_path / ".venv", "3.12.3")
    (venv / venv_python.OFFLINE_RECORD).write_text("{}")
    decision = decide(venv, (3, 13), given=True)
    assert decision.action == venv_python.STOP
    assert "make offline-setup RECREATE=1" in decision.message


def test_main_empties_an_old_venv_stamps_and_all(tmp_path, capsys):
    venv = fake_venv(tmp_path / ".venv", "3.9.6")
    assert venv_python.main(["--venv", str(venv), "--pyproject", str(REPO / "pyproject.toml")]) == 0
    assert venv.is_dir() and not list(venv.iterdir())
    assert capsys.readouterr().out.startswith(f"venv_python: {venv} has Python 3.9")


def test_main_stops_without_touching_anything(tmp_path, capsys):
    folder = tmp_path / ".venv"
    folder.mkdir()
    (folder / "notes.txt").write_text("mine")
    assert venv_python.main(["--venv", str(folder), "--python-given"]) == 2
    assert (folder / "notes.txt").read_text() == "mine"
    assert "is not a venv" in capsys.readouterr().err


def test_the_range_read_from_pyproject_is_the_one_pip_applies():
    requires = venv_python.read_requires_python((REPO / "pyproject.toml").read_text())
    clauses = venv_python.parse_range(requires)
    for minor in range(6, 16):
        expected = SpecifierSet(requires).contains(f"3.{minor}.0")
        assert venv_python.in_range((3, minor), clauses) is expected, minor
    with pytest.raises(ValueError, match="only >=X.Y and <X.Y"):
        venv_python.parse_range("~=3.11")


SCRIPT = REPO / "scripts" / "venv_python.py"
OLD_PYTHONS = sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.[6-9].*/bin/python3")))


def test_the_script_parses_as_python_3_7():
    ast.parse(SCRIPT.read_text(), feature_version=(3, 7))


@pytest.mark.skipif(not OLD_PYTHONS, reason="no Python 3.6-3.9 here (pyenv's versions)")
def test_the_script_runs_on_the_old_pythons_it_refuses(tmp_path):
    for python in OLD_PYTHONS:
        done = subprocess.run(
            [python, str(SCRIPT), "--venv", str(tmp_path / "v"), "--goals", "report"],
            cwd=REPO, capture_output=True, text=True, timeout=30,
        )  # fmt: skip
        assert done.returncode == 2, (python, done.stderr)
        assert "outside >=3.11" in done.stderr and "make report PYTHON=python3." in done.stderr


def _make(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    env.pop("PYTHON", None)
    return subprocess.run(
        ["make", "--no-print-directory", "-C", str(REPO), *args],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


@pytest.mark.skipif(shutil.which("make") is None, reason="needs GNU make")
def test_make_remakes_an_old_venv_and_installs_into_it_again(tmp_path):
    """The Makefile's own order: the check empties the 3.9 .venv (stamps with it), make
    makes it anew, and $(RUNTIME)'s install runs although its stamp existed when make
    started. The venv is real (this interpreter, no pip: PYTHON is a wrapper that adds
    --without-pip); $(BIN)'s python only logs the install commands."""
    venv = tmp_path / "v"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    cfg = venv / "pyvenv.cfg"
    cfg.write_text(
        cfg.read_text().replace(f"version = {sys.version.split()[0]}", "version = 3.9.6")
    )
    long_ago = time.time() - 3600
    os.utime(cfg, (long_ago, long_ago))
    for stamp in (".trainbench-runtime", ".trainbench-dev"):
        (venv / stamp).touch()  # newer than pyproject.toml and pyvenv.cfg: up to date
    log, fake_bin, python = tmp_path / "installs.log", tmp_path / "bin", tmp_path / "python"
    fake_bin.mkdir()
    (fake_bin / "python").write_text(f'#!/bin/sh\necho "$*" >> {log}\n')
    python.write_text(
        "#!/bin/sh\n"
        f'if [ "$1 $2" = "-m venv" ]; then shift 2; exec {sys.executable} -m venv --without-pip "$@"; fi\n'
        f'exec {sys.executable} "$@"\n'
    )
    for script in (fake_bin / "python", python):
        script.chmod(0o755)
    runtime = f"{venv}/.trainbench-runtime"
    args = (f"VENV={venv}", f"BIN={fake_bin}", f"PYTHON={python}", runtime)

    done = _make(*args, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert f"venv_python: {venv} has Python 3.9, outside >=3.11" in done.stdout
    assert venv_python.venv_python_version(str(venv)) == sys.version_info[:2]
    assert "-m pip install --quiet -e ." in log.read_text()
    assert (venv / ".trainbench-runtime").is_file() and not (venv / ".trainbench-dev").exists()

    log.unlink()
    again = _make(*args, cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert "venv_python" not in again.stdout and not log.exists()
