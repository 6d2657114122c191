"""How the analysis jobs start their worker processes: fork on Linux, spawn elsewhere.

The statistics job (:func:`trainbench.analysis.stats.publish`) and the figures job
(:func:`trainbench.analysis.figures.draw_figures`) hand work to a
:class:`concurrent.futures.ProcessPoolExecutor`. The start method is chosen here, once:

* **Linux: fork.** When the job forks, its one Python thread is the only thread but
  for OpenBLAS's worker pools (numpy's and scipy's), which OpenBLAS shuts down before
  a fork (its pthread_atfork handler, OpenBLAS #294/#343); nothing else has started a
  thread or an OpenMP pool. The child inherits the imports already paid (matplotlib,
  pandas, scipy: about 1 s a process on a 2-core machine), which spawn would pay again
  in every worker.
* **macOS (and anything else): spawn.** Python's docs: "On macOS, the spawn start
  method is now the default. The fork start method should be considered unsafe as it
  can lead to crashes of the subprocess" (multiprocessing, "Contexts and start
  methods"; the default changed in 3.8, bpo-33725), since system libraries such as
  Apple's frameworks and the Objective-C runtime are not fork-safe. Python 3.12 also
  warns when a process with threads forks, and 3.14 made forkserver Linux's default.

With spawn, each worker imports the task's module again and re-runs the main script
as ``__mp_main__``: the functions and arguments handed over must pickle, and an entry
script must keep its work under ``if __name__ == "__main__":``. Those imports are paid
in every worker; where they cost more than the work the workers take over, a job asks
for no workers on a platform that spawns (``spawn_pays=False``). Measured over the
1,000 synthetic records of benchmarks/overhead on a 2-core VM (medians): the figures
take 6.5 s in one process, 3.6 s with 2 forked workers, 5.1 s with 2 spawned ones;
the statistics 1.4 s in one process, 1.0 s with a forked side process, 2.3 s with a
spawned one, so the statistics run in one process where workers would be spawned.
"""

from __future__ import annotations

import logging
import multiprocessing
import sys
from multiprocessing.context import BaseContext

log = logging.getLogger(__name__)


def worker_start_method() -> str:
    """``"fork"`` on Linux, ``"spawn"`` on macOS and every other platform."""
    return "fork" if sys.platform.startswith("linux") else "spawn"


def worker_context(job: str, workers: int, *, spawn_pays: bool = True) -> BaseContext | None:
    """The multiprocessing context of ``job``'s ``workers`` processes, or None: do the
    work in this process, where the workers would be spawned and ``spawn_pays`` is
    False (their imports cost more than the work they take over). Logs the choice (the
    entry scripts send the log to the job's Snakemake log)."""
    method = worker_start_method()
    if method == "spawn" and not spawn_pays:
        log.info(
            "%s: one process (%s: spawned workers cost more than they save)", job, sys.platform
        )
        return None
    log.info("%s: %d worker process(es), start method %s (%s)", job, workers, method, sys.platform)
    return multiprocessing.get_context(method)
