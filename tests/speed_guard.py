"""The fast suite guards its own speed (issue 42).

A pytest plugin (loaded by ``conftest.py``) times every test; with ``--durations-file
PATH`` it writes what it found at the end of the session. ``python tests/speed_guard.py
PATH`` then fails (exit 1) when a test without the ``slow`` mark took longer than
:data:`TEST_LIMIT_S` of its own, or a shared fixture (scope module, class or session: its
cost is paid once, by whichever test first asks for it) longer than
:data:`SHARED_LIMIT_S`. ``make test`` runs both: the check is outside the timed tests.

A test's own time is its setup, call and teardown, less the set-up of the shared
fixtures it happened to start first (that time is the fixture's). What is too slow
moves to ``make test-slow`` (``@pytest.mark.slow``; CI runs both suites) or shares
one session-scoped run with the other tests that read it.

Calibrated on the project's 2-core VM with another engineer's workflow running beside
the suite (load 3.5-4): the slowest fast test took 4.6 s there, the shared one-cell
workflow run 41-52 s; a quiet machine takes about half. The limits leave 1.7x over
that; a real cell (8-25 s loaded) or workflow (40-60 s) in a test of its own exceeds
them.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

TEST_LIMIT_S = 8.0
SHARED_LIMIT_S = 90.0
SHARED_SCOPES = ("module", "class", "package", "session")
WORKER_KEY = "trainbench_speed_guard"  # what an xdist worker hands its controller


class SpeedGuard:
    """The plugin: per test, the seconds of each phase and of the shared fixtures it
    set up; per shared fixture, the seconds of its set-up."""

    def __init__(self, path: Path | None):
        self.path = path
        self.tests: dict[str, dict] = {}
        self.shared: dict[str, float] = {}
        self._depth = 0  # shared fixtures being set up (one inside another counts once)
        self._current: dict | None = None
        self.started = time.perf_counter()

    def _entry(self, item: pytest.Item) -> dict:
        return self.tests.setdefault(
            item.nodeid,
            {"setup": 0.0, "call": 0.0, "teardown": 0.0, "shared": 0.0,
             "slow": item.get_closest_marker("slow") is not None, "outcome": "passed"},
        )  # fmt: skip

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_setup(self, item: pytest.Item):
        self._current = self._entry(item)
        yield

    @pytest.hookimpl(hookwrapper=True)
    def pytest_fixture_setup(self, fixturedef, request):
        if fixturedef.scope not in SHARED_SCOPES:
            yield
            return
        self._depth += 1
        started = time.perf_counter()
        try:
            yield
        finally:
            self._depth -= 1
            seconds = time.perf_counter() - started
            name = f"{fixturedef.baseid or '<conftest>'}::{fixturedef.argname}"
            self.shared[name] = self.shared.get(name, 0.0) + seconds
            if self._depth == 0 and self._current is not None:
                self._current["shared"] += seconds

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        entry = self.tests.get(report.nodeid)
        if entry is None:
            return
        entry[report.when] += report.duration
        if report.skipped:
            entry["outcome"] = "skipped"
        elif report.failed:
            entry["outcome"] = "failed"

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node, error) -> None:
        """pytest-xdist's controller: a worker's tests and shared fixtures join the
        controller's (each worker sets up its own shared fixtures; a fixture set up by
        two workers is listed once per worker, by the worker's name)."""
        found = getattr(node, "workeroutput", {}).get(WORKER_KEY)
        if not found:
            return
        found = json.loads(found)
        self.tests.update(found["tests"])
        worker = node.gateway.id
        for name, seconds in found["shared"].items():
            self.shared[f"{name} [{worker}]"] = seconds

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        for entry in self.tests.values():
            total = entry["setup"] + entry["call"] + entry["teardown"]
            entry.setdefault("own", max(0.0, total - entry["shared"]))
        workeroutput = getattr(session.config, "workeroutput", None)
        if workeroutput is not None:  # an xdist worker: the controller writes the file
            workeroutput[WORKER_KEY] = json.dumps({"tests": self.tests, "shared": self.shared})
            return
        if self.path is None:
            return
        self.path.write_text(json.dumps(
            {"test_limit_s": TEST_LIMIT_S, "shared_limit_s": SHARED_LIMIT_S,
             "wall_s": time.perf_counter() - self.started,
             "tests": self.tests, "shared": self.shared}, indent=1, sort_keys=True))  # fmt: skip


def too_slow(
    found: dict, test_limit: float = TEST_LIMIT_S, shared_limit: float = SHARED_LIMIT_S
) -> list[str]:
    """One line per test without the ``slow`` mark over ``test_limit`` seconds of its own,
    and per shared fixture over ``shared_limit``, slowest first."""
    tests = [(entry["own"], f"{name}: {entry['own']:.1f} s of its own > {test_limit:g} s")
             for name, entry in found["tests"].items()
             if not entry["slow"] and entry["outcome"] != "skipped"
             and entry["own"] > test_limit]  # fmt: skip
    shared = [(seconds, f"{name} (shared fixture): {seconds:.1f} s > {shared_limit:g} s")
              for name, seconds in found["shared"].items() if seconds > shared_limit]  # fmt: skip
    return [line for _, line in sorted(tests + shared, reverse=True)]


def summary(found: dict, top: int = 5) -> str:
    """The suite's own seconds and its slowest tests, for the log."""
    tests = found["tests"]
    ran = {n: e for n, e in tests.items() if e["outcome"] != "skipped"}
    own = sum(e["own"] for e in ran.values())
    shared = sum(found["shared"].values())
    slowest = sorted(ran.items(), key=lambda kv: kv[1]["own"], reverse=True)[:top]
    wall = f" in {found['wall_s']:.0f} s of wall time" if "wall_s" in found else ""
    lines = [f"{len(ran)} tests ran{wall}: {own:.0f} s of their own, {shared:.0f} s of "
             f"shared fixtures; slowest:"]  # fmt: skip
    lines += [f"  {e['own']:6.1f} s  {n}" for n, e in slowest]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python tests/speed_guard.py DURATIONS.json", file=sys.stderr)
        return 2
    found = json.loads(Path(argv[0]).read_text())
    print(summary(found))
    offenders = too_slow(found, found.get("test_limit_s", TEST_LIMIT_S),
                         found.get("shared_limit_s", SHARED_LIMIT_S))  # fmt: skip
    if offenders:
        print(
            "The fast suite is for fast tests. Mark these @pytest.mark.slow (make test-slow;"
            " CI runs both) or let them share one session-scoped run (tests/speed_guard.py):",
            *offenders,
            sep="\n  ",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
