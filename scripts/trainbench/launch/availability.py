"""A device found unavailable, remembered for the rest of one Snakemake run so that
later cells of that device do not import torch only to find it missing again."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import sys
import time
from pathlib import Path

from trainbench.common.records import atomic_write_json
from trainbench.launch.environment import CellEnvironment
from trainbench.measure import wall_time


def _is_snakemake(cmdline: list[str]) -> bool:
    """``snakemake ...``, ``python .../bin/snakemake ...`` or ``python -m snakemake ...``."""
    head = [os.path.basename(arg) for arg in cmdline[:3]]
    return (
        head[:1] == ["snakemake"] or head[1:2] == ["snakemake"] or head[1:3] == ["-m", "snakemake"]
    )


def _snakemake_run() -> dict | None:
    """The Snakemake process this launcher runs under (pid and start time), or None."""
    import psutil

    try:
        for proc in psutil.Process().parents():
            if _is_snakemake(proc.cmdline()):
                return {"pid": proc.pid, "started": proc.create_time()}
    except psutil.Error:
        return None
    return None


class AvailabilityMemo:
    """What a child found about an unavailable device, kept for the rest of one
    Snakemake run: ``results/availability/<backend>-<key>.json``.

    Only ``unavailable`` is remembered, only for accelerators, and only within the
    Snakemake process that started this launcher (its pid and start time), on this
    host with this Python and the same device settings and environment overrides.
    A new run finds its own answer: a driver or GPU may appear between runs."""

    def __init__(self, path: Path, key: dict, run: dict, cell: str):
        self.path, self.key, self.run, self.cell = path, key, run, cell

    @classmethod
    def for_cell(
        cls, spec: dict, output: str | os.PathLike, environment: CellEnvironment
    ) -> AvailabilityMemo | None:
        if spec["backend"] == "cpu":
            return None
        parents = Path(output).parents
        # results/runs/{workload}/{device}/bs{N}/rep{N}/metrics.json
        if len(parents) < 6 or parents[4].name != "runs":
            return None
        run = _snakemake_run()
        if run is None:
            return None
        key = {
            "backend": spec["backend"],
            "device_settings": spec["device_settings"],
            "env_overrides": environment.overrides,
            "python": sys.executable,
            "host": socket.gethostname(),
        }
        key = json.loads(json.dumps(key, sort_keys=True, default=str))  # as stored
        digest = hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()
        path = parents[5] / "availability" / f"{spec['backend']}-{digest[:12]}.json"
        cell = spec["cell"]
        relpath = f"{cell['workload']}/{cell['device']}/bs{cell['batch_size']}/rep{cell['rep']}"
        return cls(path, key, run, relpath)

    def recall(self) -> dict | None:
        """An attempt outcome for this cell from what an earlier cell's child found."""
        try:
            memo = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return None
        if memo.get("snakemake_run") != self.run or memo.get("key") != self.key:
            return None
        now = time.time()
        return {
            "attempt": 1,
            "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(now)),
            "started_unix": now,
            "ended_unix": now,
            "duration_s": 0.0,
            "returncode": None,
            "signal": None,
            "timed_out": False,
            "child_peak_rss_bytes": None,
            "wall_time": wall_time.without_child(
                "the device was found unavailable by an earlier cell"
            ),
            "status": "unavailable",
            "child": {
                "status": "unavailable",
                "reason": memo["reason"],
                "child_environment": memo["child_environment"],
            },
            "availability": {
                "found_by": "a child of this Snakemake run",
                "cell": memo["cell"],
                "at": memo["at"],
                "file": str(self.path),
            },
        }

    def remember(self, outcome: dict) -> None:
        child = outcome["child"]
        atomic_write_json(
            self.path,
            {
                "snakemake_run": self.run,
                "key": self.key,
                "reason": child.get("reason"),
                "child_environment": child.get("child_environment"),
                "cell": self.cell,
                "at": outcome["started_at"],
            },
        )
