"""``make mac-selftest``: on a Mac with Apple silicon, the CPU against its GPU (MPS) in a
small matrix with every check (``configs/mac-selftest.yaml``: canary, placement and
autocast checks, training and evaluation parity, memory, time to target), through the
workflow itself, then one file to send back, as ``make gpu-evidence`` makes CUDA's.

The file (``results/mac-selftest/trainbench-mac-selftest-<UTC time>.tgz``) holds
``SELFTEST.json`` (macOS, the chip, its memory, its performance and efficiency cores, the
power source, Low Power Mode and thermal state, Python and torch versions, the commit and
the source fingerprint of the code that measured, the command and its wall time), the
report and its tables, and every record. Nothing is claimed for
MPS until such a file comes back: no Mac exists where this project is developed.
Elsewhere it refuses (exit 2) and points to ``make mps-ready`` (the MPS emulator: would
a workload run on MPS; never a speed).
"""

from __future__ import annotations

import datetime as dt
import io
import json
import platform
import subprocess
import sys
import tarfile
import time
from pathlib import Path

from trainbench.evidence import RECORD_PATTERNS, RENDERED, run_logged
from trainbench.evidence.source import SourceRefused, records_code
from trainbench.launch.environment import git_commit, host_facts

CONFIG = "configs/mac-selftest.yaml"
RUN_NAME = "mac-selftest"
SUMMARY = "SELFTEST.json"
PROBE = (
    "import platform, sys, torch; mps = getattr(torch.backends, 'mps', None); "
    "print(sys.platform, platform.machine(), torch.__version__, "
    "bool(mps and mps.is_built()), bool(mps and mps.is_available()))"
)


def mps_problem() -> str | None:
    """Why this machine cannot run the self-test (None: it can)."""
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True)
    if done.returncode != 0:
        return f"torch does not import: {done.stderr.strip()[-400:]}"
    system, machine, version, built, available = done.stdout.split()
    if system != "darwin" or machine != "arm64":
        return f"this is {system} on {machine}, not macOS on Apple silicon"
    if built != "True":
        return f"torch {version} was built without MPS"
    if available != "True":
        return f"torch {version} sees no MPS device (torch.backends.mps.is_available() is False)"
    return None


def mac_facts() -> dict:
    """The machine as the self-test ran on it (the host facts every record holds: its
    kinds of cores, power and thermal state from trainbench.measure.macos_host)."""
    import psutil
    import torch

    host = host_facts()
    return {
        "macos": platform.mac_ver()[0] or None,
        "chip": host.get("cpu_model"),
        "machine": host.get("machine"),
        "logical_cores": host.get("logical_cores"),
        "cpu_core_levels": host.get("cpu_core_levels"),
        "memory_bytes": int(psutil.virtual_memory().total),
        "power": host.get("power"),
        "thermal": host.get("thermal"),
        "python": host.get("python"),
        "torch": torch.__version__,
        "mps_available": bool(torch.backends.mps.is_available()),
    }


def bundle(results: Path, summary: dict, archive: Path) -> int:
    """One .tgz of ``results``' report, tables, figures and records, and ``summary`` as
    SELFTEST.json (temp file, then rename); the count of files in it."""
    files = sorted(
        {
            p
            for pattern in (*RENDERED, *RECORD_PATTERNS)
            for p in results.glob(pattern)
            if p.is_file()
        }
    )
    archive.parent.mkdir(parents=True, exist_ok=True)
    tmp = archive.with_name(f".{archive.name}.tmp")
    with tarfile.open(tmp, "w:gz") as tar:
        data = json.dumps(summary, indent=2, sort_keys=True).encode()
        info = tarfile.TarInfo(SUMMARY)
        info.size, info.mtime = len(data), int(time.time())
        tar.addfile(info, io.BytesIO(data))
        for path in files:
            tar.add(str(path), arcname=str(path.relative_to(results)))
    tmp.replace(archive)
    return len(files) + 1


def run_selftest(root: Path, cores: int = 1) -> int:
    """The self-test; 0 when the file was written, 2 when this is no Mac with MPS, 1 when
    the workflow failed (its log's tail printed)."""
    problem = mps_problem()
    if problem:
        print(
            f"mac-selftest needs macOS on Apple silicon with MPS: {problem}. Here, `make "
            "mps-ready` checks on the MPS emulator whether a config's workloads would run "
            "on MPS (never a speed).",
            file=sys.stderr,
        )
        return 2
    results = root / "results" / RUN_NAME
    command = [sys.executable, "-m", "snakemake", "--cores", str(cores), "--configfile", CONFIG,
               "--", f"results/{RUN_NAME}/report.md"]  # fmt: skip
    started = dt.datetime.now(dt.UTC)
    try:
        seconds = run_logged(command, results / "selftest.log", root)
    except subprocess.CalledProcessError as error:
        print(f"mac-selftest: the workflow failed; log tail:\n{error.output}", file=sys.stderr)
        return 1
    try:
        code = records_code(results)
    except SourceRefused as error:
        code = {"refused": str(error)}
    summary = {
        "what": "trainbench's Mac self-test: the CPU against MPS, configs/mac-selftest.yaml",
        "made_at": started.isoformat(timespec="seconds"),
        "commit": git_commit(root),
        "code": code,
        "command": " ".join(command),
        "wall_seconds": round(seconds, 1),
        "machine": mac_facts(),
    }
    stamp = started.strftime("%Y%m%dT%H%MZ")
    archive = results / f"trainbench-{RUN_NAME}-{stamp}.tgz"
    count = bundle(results, summary, archive)
    print(
        f"mac-selftest: {seconds:.0f} s; the report: results/{RUN_NAME}/report.md; the file to "
        f"send back ({count} files: records, report, {SUMMARY} with macOS "
        f"{summary['machine']['macos']} and torch {summary['machine']['torch']}): {archive}",
        flush=True,
    )
    return 0
