"""Run ``scripts/check_config.py`` for many workflow folders in one interpreter start:
the check is imported once, then each folder gets a forked child of its own (a real
process: its own exit status, its own modules, so an own model's ``mod.py`` in one
folder is never the cached one of another), whose stdout and stderr are files.

    python tests/check_config_forks.py < jobs.json > results.json

``jobs.json``: ``{name: {"cwd": folder, "args": [config files]}}``; the answer:
``{name: {"returncode": n, "stdout": text, "stderr": text}}``. An exception the check
does not handle prints its traceback to the child's stderr, as the interpreter would.
Used by tests/test_bad_input.py, whose refusal cases took one interpreter start each
(0.7 s) before.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

from trainbench.config.cli import main_check  # noqa: E402


def _child(cwd: str, args: list[str], out: int, err: int) -> None:
    """In the forked child: the check in ``cwd`` with stdout/stderr on the files; exits."""
    code = 1
    try:
        os.dup2(out, 1)
        os.dup2(err, 2)
        os.chdir(cwd)
        sys.argv = ["scripts/check_config.py", *args]
        code = main_check(args)
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else 1
    except BaseException:  # noqa: BLE001 - printed as the interpreter would, then exit 1
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code or 0)


def run_one(cwd: str, args: list[str]) -> dict:
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        pid = os.fork()
        if pid == 0:
            _child(cwd, args, out.fileno(), err.fileno())
        _, status = os.waitpid(pid, 0)
        texts = []
        for handle in (out, err):
            handle.seek(0)
            texts.append(handle.read().decode("utf-8", "replace"))
    return {"returncode": os.waitstatus_to_exitcode(status), "stdout": texts[0], "stderr": texts[1]}


def main() -> int:
    jobs = json.load(sys.stdin)
    answers = {name: run_one(job["cwd"], job["args"]) for name, job in jobs.items()}
    sys.stdout.write(json.dumps(answers))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
