"""Run every later command of the README and of docs/*.md, copied from their text,
after the Quick start.

    python .ci/readme_commands.py README.md docs/*.md

Every ```bash block of each file named (README.md when none is) is read line by line
(backslash continuations joined, comments dropped), and every command runs from the
repository's root whatever the file's folder. The Quick start's own commands
(`make report`, `make test`, ...) already ran in .ci/run and are skipped here, in any
file; Snakemake commands
that would train get `--dry-run` (the scheduling, config checks and input functions
all run; no cell trains), `make report`/`make rerun-failed` get
`SNAKEMAKE_ARGS=--dry-run`; every other command runs as written. A block preceded
by `<!-- ci: skip (reason) -->` is skipped and its reason printed: the cluster and
GPU commands need what CI does not have.

Exit status 1 when any command fails; every failure is printed with its output.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

SETUP_TARGETS = {"setup", "report", "test", "test-slow", "test-cluster", "lint", "clean"}
NO_TRAINING = ("--report", "--unlock", "--lint", "--dry-run", "-n", "--list-rules", "--dag")
SKIP_MARK = re.compile(r"<!--\s*ci:\s*skip\s*\((?P<reason>[^)]*)\)\s*-->")
FENCE = re.compile(r"^\s*```(?P<lang>\w*)\s*$")
ROOT = Path(__file__).resolve().parent.parent  # every command runs here


@dataclass(frozen=True)
class Command:
    line: int
    text: str
    skip_reason: str | None = None


def read_commands(readme: Path) -> list[Command]:
    """A Markdown file's bash commands in order, with a skip reason where marked."""
    lines = readme.read_text(encoding="utf-8").splitlines()
    commands: list[Command] = []
    in_block, lang, skip, pending = False, "", None, ""
    last_text = ""
    for number, line in enumerate(lines, start=1):
        fence = FENCE.match(line)
        if fence and not in_block:
            in_block, lang = True, fence.group("lang")
            mark = SKIP_MARK.search(last_text)
            skip = mark.group("reason") if mark else None
            continue
        if fence and in_block:
            in_block = False
            continue
        if not in_block:
            if line.strip():
                last_text = line
            continue
        if lang not in ("bash", "sh", "shell"):
            continue
        stripped = line.split(" #")[0].rstrip() if not line.lstrip().startswith("#") else ""
        if not stripped.strip():
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        commands.append(Command(number, (pending + stripped).strip(), skip))
        pending = ""
    return commands


def as_run_in_ci(text: str) -> str | None:
    """The command as CI runs it, or None when the Quick start already ran it."""
    words = shlex.split(text)
    if words[:1] == ["make"]:
        targets = [w for w in words[1:] if "=" not in w and not w.startswith("-")]
        if targets and all(t in SETUP_TARGETS - {"report"} for t in targets):
            return None
        if targets in (["report"], ["rerun-failed"]):
            if targets == ["report"] and len(words) == 2:
                return None  # the Quick start's own command
            return f"{text} SNAKEMAKE_ARGS=--dry-run"
        return text
    if any(Path(w).name == "snakemake" for w in words[:1]):
        if any(flag in words for flag in NO_TRAINING):
            return text
        return f"{text} --dry-run"
    return text


def main(argv: list[str]) -> int:
    files = [Path(a) for a in argv[1:]] or [Path("README.md")]
    failures = 0
    for path in files:
        failures += run_file(path)
    print(f"{failures} command(s) failed" if failures else "every command ran")
    return 1 if failures else 0


def run_file(path: Path) -> int:
    """Run one file's commands from the repository's root; the number that failed."""
    failures = 0
    for command in read_commands(path):
        where = f"{path}:{command.line}"
        if command.skip_reason is not None:
            print(f"skip  {where}  {command.text}  ({command.skip_reason})")
            continue
        run = as_run_in_ci(command.text)
        if run is None:
            print(f"done  {where}  {command.text}  (the Quick start ran it)")
            continue
        result = subprocess.run(["bash", "-c", run], capture_output=True, text=True, cwd=ROOT)
        status = "ok  " if result.returncode == 0 else "FAIL"
        print(f"{status}  {where}  {run}", flush=True)
        if result.returncode != 0:
            failures += 1
            print(result.stdout[-4000:] + result.stderr[-4000:])
    return failures


if __name__ == "__main__":
    sys.exit(main(sys.argv))
