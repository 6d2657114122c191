"""Snakemake's scheduler passes while jobs wait, with and without
:mod:`trainbench.launch.scheduler_passes`, on a toy workflow.

The toy is `jobs` independent jobs of `seconds` each (``sleep``), one at a time (a
resource of 1, as ``timed_slot`` is here), so every later job waits while one runs.
For each variant: the scheduler's passes (``Ready jobs`` lines of ``--verbose``), the
CPU time of Snakemake's process and what it waited for (the ILP solver's ``cbc``
included; ``getrusage(RUSAGE_CHILDREN)`` around it) and the wall time. With one timer
chain the scheduler passes about once a second while a job runs and once a job; with
one more chain per finished job, the k-th job runs beside k chains.
"""

from __future__ import annotations

import resource
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parents[2]
TOY = """
import sys
sys.path.insert(0, {scripts!r})
if {patch!r}:
    from trainbench.launch.scheduler_passes import coalesce_reevaluations
    coalesce_reevaluations()

rule all:
    input: expand("done/{{i}}.txt", i=range({jobs}))

rule job:
    output: "done/{{i}}.txt"
    resources: slot=1
    shell: "sleep {seconds}; touch {{output}}"
"""


def run_toy(folder: Path, patch: bool, jobs: int = 8, seconds: float = 1.2) -> dict:
    """Run the toy in `folder` (made here) and count its scheduler passes."""
    folder.mkdir(parents=True)
    snakefile = folder / "Snakefile"
    snakefile.write_text(TOY.format(scripts=str(SCRIPTS), patch=patch, jobs=jobs, seconds=seconds))
    command = [sys.executable, "-m", "snakemake", "--cores", "2", "--resources", "slot=1",
               "--verbose", "--directory", str(folder), "--snakefile", str(snakefile)]  # fmt: skip
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    run = subprocess.run(command, capture_output=True, text=True, timeout=60 + 4 * jobs * seconds)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if run.returncode != 0:
        raise RuntimeError(f"the toy workflow failed:\n{run.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {
        "patched": patch,
        "jobs": jobs,
        "job_seconds": seconds,
        "passes": (run.stdout + run.stderr).count("Ready jobs"),
        "cpu_seconds": round(cpu, 3),
        "wall_seconds": round(wall, 3),
    }


def markdown(result: Mapping) -> str:
    lines = [
        f"# Snakemake's scheduler passes while jobs wait: {result['made_at']}",
        "",
        f"Command: `{result['command']}`. Machine: {result['machine']}. Code: {result['code']}.",
        "",
        __doc__.split("\n\n", 1)[1].strip().replace("\n", " "),
        "",
        "| timers | jobs | seconds a job | scheduler passes | CPU s (Snakemake and cbc) | wall s |",
        "|---|---|---|---|---|---|",
    ]
    for row in result["rows"]:
        timers = "one pending (patched)" if row["patched"] else "Snakemake's own"
        lines.append(
            f"| {timers} | {row['jobs']} | {row['job_seconds']} | {row['passes']} | "
            f"{row['cpu_seconds']:.2f} | {row['wall_seconds']:.1f} |"
        )
    return "\n".join(lines) + "\n"
