"""The fast suite's speed guard (tests/speed_guard.py): a test over the limit without
the slow mark fails the check, a shared fixture's set-up is the fixture's, not the test's."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
import speed_guard

pytest_plugins = ["pytester"]


def entry(own: float, slow: bool = False, outcome: str = "passed") -> dict:
    return {"own": own, "slow": slow, "outcome": outcome}


def test_a_slow_test_without_the_mark_fails_the_check(tmp_path, capsys):
    found = {
        "tests": {"t.py::fast": entry(0.1), "t.py::heavy": entry(9.0),
                  "t.py::marked": entry(60.0, slow=True), "t.py::skipped": entry(9.0, outcome="skipped")},
        "shared": {"t.py::workflow": 40.0, "t.py::huge": 500.0},
    }  # fmt: skip
    lines = speed_guard.too_slow(found, test_limit=5.0, shared_limit=75.0)
    assert lines == ["t.py::huge (shared fixture): 500.0 s > 75 s",
                     "t.py::heavy: 9.0 s of its own > 5 s"]  # fmt: skip
    path = tmp_path / "durations.json"
    path.write_text(json.dumps({**found, "test_limit_s": 5.0, "shared_limit_s": 75.0}))
    assert speed_guard.main([str(path)]) == 1
    assert "t.py::heavy" in capsys.readouterr().err
    del found["tests"]["t.py::heavy"], found["shared"]["t.py::huge"]
    path.write_text(json.dumps(found))
    assert speed_guard.main([str(path)]) == 0


def guarded_suite(pytester) -> None:
    """A conftest registering the guard (writing d.json) and three tests: two share a
    session fixture of 0.6 s, one sleeps 0.3 s, one is marked slow."""
    here = str(Path(speed_guard.__file__).parent)
    pytester.makeconftest(
        textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {here!r})
        from speed_guard import SpeedGuard
        def pytest_configure(config):
            config.addinivalue_line("markers", "slow: slow")
            config.pluginmanager.register(SpeedGuard(config.rootpath / "d.json"), "guard")
    """)
    )
    pytester.makepyfile(
        textwrap.dedent("""
        import time, pytest
        @pytest.fixture(scope="session")
        def run():
            time.sleep(0.6)
        def test_first(run):
            pass
        def test_second(run):
            time.sleep(0.3)
        @pytest.mark.slow
        def test_marked():
            pass
    """)
    )


def test_the_plugin_gives_a_shared_fixture_its_own_time(pytester):
    """A session fixture's set-up is not the first test's own time; a test's own
    sleep is; the file records the slow mark."""
    guarded_suite(pytester)
    pytester.runpytest("-p", "no:randomly").assert_outcomes(passed=3)
    found = json.loads((pytester.path / "d.json").read_text())
    tests = {name.split("::")[-1]: e for name, e in found["tests"].items()}
    assert tests["test_first"]["own"] < 0.3 <= tests["test_second"]["own"]
    assert tests["test_first"]["shared"] >= 0.6 and tests["test_marked"]["slow"]
    assert [s for n, s in found["shared"].items() if n.endswith("::run")][0] >= 0.6


@pytest.mark.slow  # pytest in real processes (make test-slow)
def test_the_controller_writes_what_the_xdist_workers_found(pytester):
    """Under pytest-xdist (make test runs two workers) each worker times its own tests;
    the controller writes them all, each shared fixture named with its worker."""
    pytest.importorskip("xdist")
    guarded_suite(pytester)
    pytester.runpytest_subprocess("-n", "2", "--dist", "loadfile").assert_outcomes(passed=3)
    found = json.loads((pytester.path / "d.json").read_text())
    tests = {name.split("::")[-1]: e for name, e in found["tests"].items()}
    assert sorted(tests) == ["test_first", "test_marked", "test_second"]
    assert tests["test_second"]["own"] >= 0.3 and tests["test_marked"]["slow"]
    [(name, seconds)] = [(n, s) for n, s in found["shared"].items() if "::run" in n]
    assert seconds >= 0.6 and name.endswith(("[gw0]", "[gw1]"))
    assert found["wall_s"] > 0.6


@pytest.mark.slow  # pytest in real processes (make test-slow)
def test_make_test_passes_the_durations_file_as_one_argument(pytester, repo_root):
    """`make test` twice in one checkout: the second run finds .test-durations.json. Given
    as two arguments (`--durations-file PATH`), pytest reads an existing PATH as the
    folder to collect before tests/conftest.py has declared the option, and refuses it
    ("unrecognized arguments"); as one (`--durations-file=PATH`) it does not."""
    recipe = (repo_root / "Makefile").read_text()
    assert "--durations-file=$(DURATIONS)" in recipe
    pytester.makeini("[pytest]\ntestpaths = tests\n")
    pytester.mkdir("tests")
    (pytester.path / "tests" / "conftest.py").write_text(
        "def pytest_addoption(parser):\n    parser.addoption('--durations-file')\n"
    )
    (pytester.path / "tests" / "test_one.py").write_text("def test_one():\n    pass\n")
    (pytester.path / "d.json").write_text("{}")
    assert pytester.runpytest_subprocess("--durations-file", "d.json").ret != 0
    pytester.runpytest_subprocess("--durations-file=d.json").assert_outcomes(passed=1)
