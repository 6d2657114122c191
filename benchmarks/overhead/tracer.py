"""Process tracer for the workflow-overhead benchmark (never used by the workflow itself).

The benchmark copies this file as ``sitecustomize.py`` into a folder it puts first on
PYTHONPATH, and sets TRAINBENCH_TRACE to a log file. Every Python process started
under it (Snakemake, each job's script, each cell's child) then appends JSON lines:

- ``start``: when the process was created (from /proc: 10 ms resolution) and when
  this hook ran (after the interpreter started), with argv;
- ``call`` / ``return``: around a few functions that mark phase boundaries
  (``trainbench.launch.launcher.run_cell``: the launcher is started and imported;
  ``trainbench.measure.devices.get_device``: the child's imports are done;
  ``trainbench.common.records.atomic_write_json``: a result or record is written;
  ``trainbench.config.validate_config``: Snakemake has started and reads the Snakefile;
  ``trainbench.analysis.tables.read_table`` and friends: a downstream script starts work);
- ``exit``: at interpreter exit, with the Snakemake rule of a job's script.

Nothing is changed in what the processes do; the hook costs a dictionary lookup
per import and one short append per event.
"""

from __future__ import annotations

import atexit
import functools
import json
import os
import sys
import time

_PATH = os.environ.get("TRAINBENCH_TRACE")

# module -> functions whose calls mark a phase boundary
WRAPPED = {
    "trainbench.config": ("validate_config",),
    "trainbench.launch.launcher": ("run_cell",),
    "trainbench.measure.devices": ("get_device",),
    "trainbench.common.records": ("atomic_write_json",),
    "trainbench.analysis.tables": ("read_table",),
    "trainbench.analysis.aggregate": ("write_tables",),
    "trainbench.analysis.report": ("render_report", "render_workload_report"),
}


def _emit(event: str, **fields) -> None:
    line = {"event": event, "pid": os.getpid(), "ppid": os.getppid(), "t": time.time(), **fields}
    with open(_PATH, "a") as fh:
        fh.write(json.dumps(line, default=str) + "\n")


def _process_start() -> float | None:
    """Wall-clock time this process was created (Linux /proc; None elsewhere)."""
    try:
        with open("/proc/self/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        ticks = int(fields[19])  # field 22, starttime, in clock ticks since boot
        with open("/proc/uptime") as fh:
            uptime = float(fh.read().split()[0])
        return time.time() - (uptime - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return None


def _wrap(module_name: str, name: str, fn):
    @functools.wraps(fn)
    def traced(*args, **kwargs):
        first = str(args[1]) if name == "run_cell" and len(args) > 1 else None
        _emit("call", what=f"{module_name}.{name}", arg=first)
        try:
            return fn(*args, **kwargs)
        finally:
            _emit("return", what=f"{module_name}.{name}")

    return traced


class _Finder:
    """Wraps WRAPPED functions right after their module is executed, before anything
    binds them with ``from module import name``."""

    def find_spec(self, name, path, target=None):
        if name not in WRAPPED:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        original = loader.exec_module

        def exec_module(module):
            original(module)
            for attr in WRAPPED[name]:
                if callable(getattr(module, attr, None)):
                    setattr(module, attr, _wrap(name, attr, getattr(module, attr)))

        loader.exec_module = exec_module
        return spec


def _at_exit() -> None:
    main = sys.modules.get("__main__")
    job = getattr(main, "snakemake", None)
    _emit("exit", rule=getattr(job, "rule", None))


if _PATH:
    _emit("start", argv=list(sys.argv), created=_process_start())
    sys.meta_path.insert(0, _Finder())
    atexit.register(_at_exit)
