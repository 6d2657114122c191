"""trainbench.bench.workers: benchmark jobs in worker processes deliver their results,
and stop with the benchmark — a SIGTERM to the parent leaves no worker running and
starts no queued job (the parity-power benchmark once left its workers taking jobs
after its parent was killed)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
from helpers import REPO

JOBS = textwrap.dedent(
    """
    import os, time
    from pathlib import Path

    def square(x):
        return x * x

    def sleeper(folder, i):
        Path(folder, f"started-{i}-{os.getpid()}").touch()
        time.sleep(60)
        return i
    """
)

MAIN = textwrap.dedent(
    """
    import sys
    sys.path[:0] = [{scripts!r}, {here!r}]
    from trainbench.bench.workers import run_in_workers
    import jobs

    if __name__ == "__main__":
        if sys.argv[1] == "squares":
            got = []
            run_in_workers(jobs.square, [(i,) for i in range(6)], 2, got.append)
            print(sorted(got))
        else:
            run_in_workers(jobs.sleeper, [({here!r}, i) for i in range(6)], 2, print)
    """
)


def _script(tmp_path: Path) -> Path:
    (tmp_path / "jobs.py").write_text(JOBS)
    main = tmp_path / "main.py"
    main.write_text(MAIN.format(scripts=str(REPO / "scripts"), here=str(tmp_path)))
    return main


def test_results_come_back_to_the_parent(tmp_path):
    proc = subprocess.run([sys.executable, str(_script(tmp_path)), "squares"],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[0, 1, 4, 9, 16, 25]"


def test_a_stopped_benchmark_leaves_no_worker_and_starts_no_queued_job(tmp_path):
    proc = subprocess.Popen([sys.executable, str(_script(tmp_path)), "sleep"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    deadline = time.monotonic() + 60
    while len(list(tmp_path.glob("started-*"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    started = list(tmp_path.glob("started-*"))
    assert len(started) == 2, "the two workers did not start their first jobs"
    workers = [int(p.name.rsplit("-", 1)[1]) for p in started]
    os.kill(proc.pid, signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode != 0 and "KeyboardInterrupt" in err, err[-2000:]
    time.sleep(1)
    alive = [pid for pid in workers if psutil.pid_exists(pid)
             and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]  # fmt: skip
    assert alive == [], f"workers still running after the parent stopped: {alive}"
    assert len(list(tmp_path.glob("started-*"))) == 2, "a queued job started after the stop"
