"""The benchmark matrix: workload x device x batch size x repeat expanded into cells,
each cell's spec (everything its child process needs), the baseline device."""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from trainbench.config.device_ids import DeviceId
from trainbench.config.names import name_problem
from trainbench.config.schema import ConfigError

# torch.compile compiles on the first call and reduce-overhead records CUDA graphs
# on the next ones: all of that must happen before the timed steps.
MIN_COMPILE_WARMUP_STEPS = 3
FAULTS_ENV = "TRAINBENCH_ALLOW_FAULTS"


@dataclass(frozen=True)
class DeviceVariant:
    """One column of the matrix: a backend with fixed settings (e.g. cpu with 4 threads)."""

    id: str  # path component: cpu, cpu-t4, mps, cuda, cuda-compile, cpu-t4-compile-max-autotune
    backend: str
    threads: int | None = None
    compile: str | None = None  # torch.compile mode; None = eager


def compile_modes(
    config: dict, workload: str | None, backend: str | None = None
) -> list[str | None]:
    """The workload's torch.compile variants on ``backend`` (None = eager):
    ``compile`` is one list for every device, or one list per backend
    ({cuda: [eager, reduce-overhead]} asks for CUDA graphs on CUDA alone);
    microbenchmarks have none."""
    if workload is None:
        return [None]
    modes = config["workloads"][workload].get("compile") or ["eager"]
    if isinstance(modes, dict):
        modes = modes.get(backend) or ["eager"]
    return [None if m == "eager" else m for m in modes]


@dataclass(frozen=True, order=True)
class Cell:
    workload: str
    device: str
    batch_size: int
    rep: int

    def __post_init__(self) -> None:
        # The cell's folder under results/runs/: never a name that leaves it (the
        # config check refuses one before any job; this holds for any other caller).
        problem = name_problem("workloads", self.workload)
        if problem:
            raise ConfigError(problem)
        if (
            not DeviceId.is_valid(self.device)
            or DeviceId.parse(self.device).column.format() != self.device
        ):
            raise ConfigError(
                f"{self.device!r} is not a device column of the matrix (cpu-t4, cuda-compile, ...)"
            )

    @property
    def relpath(self) -> str:
        return f"{self.workload}/{self.device}/bs{self.batch_size}/rep{self.rep}"


def device_variants(
    config: dict, backends: Iterable[str] | None = None, workload: str | None = None
) -> list[DeviceVariant]:
    """The device columns of the matrix. CPU thread counts come from the workload's
    ``cpu_threads`` if set, else ``device_settings.cpu.threads``; several counts
    give one device per count (cpu-t4, cpu-t16); each torch.compile mode of the
    workload gives one more column per device (cuda-compile, cpu-t4-compile)."""
    wanted = list(backends) if backends is not None else config["devices"]
    variants: list[DeviceVariant] = []
    for backend in wanted:
        if backend == "cpu":
            threads = config["device_settings"]["cpu"]["threads"]
            if (
                workload is not None
                and config["workloads"][workload].get("cpu_threads") is not None
            ):
                threads = config["workloads"][workload]["cpu_threads"]
            if isinstance(threads, list) and len(threads) > 1:
                bases = [(f"cpu-t{n}", n) for n in threads]
            else:
                bases = [("cpu", threads[0] if isinstance(threads, list) else threads)]
        else:
            bases = [(backend, None)]
        for _, n in bases:
            for mode in compile_modes(config, workload, backend):
                device = DeviceId(backend, n if len(bases) > 1 else None, mode)
                variants.append(DeviceVariant(device.format(), backend, n, mode))
    return variants


def enabled_workloads(config: dict) -> list[str]:
    return [name for name, wl in config["workloads"].items() if wl.get("enabled", True)]


def batch_sizes_for(config: dict, workload: str, variant: DeviceVariant) -> list[int]:
    """The variant's batch sizes: the workload's list, or its list for the variant's
    backend ({cpu: [16], cuda: [32]}); else device_settings.<backend>.default_batch_size."""
    sizes = config["workloads"][workload].get("batch_sizes")
    if isinstance(sizes, dict):
        sizes = sizes.get(variant.backend)
    if sizes:
        return list(sizes)
    return [config["device_settings"][variant.backend]["default_batch_size"]]


def all_batch_sizes(settings: dict) -> list[int]:
    """Every batch size a workload's settings list (either form of batch_sizes), sorted."""
    sizes = settings.get("batch_sizes") or []
    if isinstance(sizes, dict):
        sizes = [bs for per_backend in sizes.values() for bs in per_backend or []]
    return sorted(set(sizes))


# Keys a workload may set for itself or inherit from the top level of the config.
INHERITED_KEYS = ("repeats",)


def _layer_value(layer: Any, workload: str, key: str) -> tuple[str, Any] | None:
    """What one config file says about ``key`` for ``workload``: its own entry, else the
    file's top-level one ("own" / "top level"), else None."""
    if not isinstance(layer, dict):
        return None
    workloads = layer.get("workloads")
    own = workloads.get(workload) if isinstance(workloads, dict) else None
    if isinstance(own, dict) and own.get(key) is not None:
        return "own", own[key]
    if layer.get(key) is not None:
        return "top level", layer[key]
    return None


def settle_inherited_keys(
    config: dict, layers: Sequence[tuple[str, Any]]
) -> dict[str, dict[str, str]]:
    """Which ``repeats`` each workload gets when the config is read from several files
    (config.yaml, then each ``--configfile``, then ``--config``): **the last file that
    sets it at all decides, and within that file the workload's own entry beats the
    top-level one**. So ``repeats: 5`` at the top of your file applies to every
    workload, even one whose entry in config.yaml says 2, unless your file also sets
    that workload's own. (A plain merge would keep config.yaml's per-workload values
    over your top-level one.) ``layers``: (name, parsed content) in reading order.
    The decided value is written into each workload's entry; returns, per workload and
    key, where it came from ("configs/x.yaml (top level)")."""
    origins: dict[str, dict[str, str]] = {}
    workloads = config.get("workloads") if isinstance(config, dict) else None
    if not isinstance(workloads, dict):
        return origins
    for workload, settings in workloads.items():
        if not isinstance(settings, dict):
            continue
        for key in INHERITED_KEYS:
            for name, layer in reversed(layers):
                found = _layer_value(layer, workload, key)
                if found is not None:
                    settings[key] = copy.deepcopy(found[1])
                    origins.setdefault(workload, {})[key] = f"{name} ({found[0]})"
                    break
    return origins


def repeat_settings(config: dict, workload: str) -> dict:
    """``{"min", "max", "target_ci_halfwidth"}`` of a workload: its own ``repeats`` or
    the top-level one; a plain number N means min = max = N (no adaptive rounds)."""
    value = config["workloads"][workload].get("repeats") or config["repeats"]
    if isinstance(value, int):
        return {"min": value, "max": value, "target_ci_halfwidth": None}
    low = int(value["min"])
    return {
        "min": low,
        "max": int(value.get("max") or low),
        "target_ci_halfwidth": value.get("target_ci_halfwidth"),
    }


def expand_matrix(config: dict, reps: str = "min") -> list[Cell]:
    """Every cell of the matrix: the first ``min`` repeats of each (``reps="min"``:
    the cells every run has), or every repeat a cell may get (``reps="max"``)."""
    cells = []
    for workload in enabled_workloads(config):
        wl = config["workloads"][workload]
        count = repeat_settings(config, workload)[reps]
        for variant in device_variants(config, wl.get("devices"), workload):
            for bs in batch_sizes_for(config, workload, variant):
                for rep in range(count):
                    cells.append(Cell(workload, variant.id, bs, rep))
    return sorted(cells)


@dataclass(frozen=True)
class RunOrder:
    """Snakemake priorities that run the cells in rounds (repeat k of every cell before
    repeat k + 1 of any), and within a round one workload and batch size's devices
    one after another: a device's speedup over another is then measured seconds apart,
    not half a round apart, less exposed to a host whose speed changes over minutes
    (benchmarks/results/host-stability-2026-11-29.md). Higher priority runs first."""

    groups: tuple[tuple[str, int], ...]  # (workload, batch size), in run order
    rounds: int  # the most repeats any cell may get

    def priority(self, workload: str, batch_size: int | str, rep: int | str) -> int:
        size = len(self.groups)
        rank = self.groups.index((workload, int(batch_size)))
        return (self.rounds - int(rep)) * size + (size - rank)

    @property
    def top(self) -> int:
        """A priority above every cell's."""
        return (self.rounds + 1) * max(1, len(self.groups)) + 1


def run_order(config: dict) -> RunOrder:
    """The run's :class:`RunOrder`: groups in the matrix's order, rounds up to the
    most repeats any workload may get (adaptive rounds included)."""
    cells = expand_matrix(config, "max")
    groups = tuple(dict.fromkeys((c.workload, c.batch_size) for c in cells))
    return RunOrder(groups=groups, rounds=max((c.rep + 1 for c in cells), default=1))


def workload_devices(config: dict, workload: str) -> list[str]:
    """The workload's device ids in the config's order (the first is the default baseline)."""
    wl = config["workloads"][workload]
    return [v.id for v in device_variants(config, wl.get("devices"), workload)]


def baseline_device(config: dict, workload: str) -> str:
    """The workload's baseline column: ``report.baseline_device`` where it is one of the
    workload's devices, else its first device (the statistics layer's choice)."""
    wanted = config["report"]["baseline_device"]
    devices = workload_devices(config, workload)
    return wanted if wanted in devices else devices[0]


def iter_device_ids(config: dict) -> Iterator[str]:
    seen = set()
    for workload in enabled_workloads(config):
        wl = config["workloads"][workload]
        for variant in device_variants(config, wl.get("devices"), workload):
            if variant.id not in seen:
                seen.add(variant.id)
                yield variant.id


def find_variant(config: dict, device_id: str) -> DeviceVariant:
    """The variant a device id names: cpu-t4 is the CPU with 4 threads, cuda-compile
    is CUDA with torch.compile's default mode (trainbench.config.device_ids's grammar)."""
    try:
        parsed = DeviceId.parse(device_id)
    except ValueError as error:
        raise ConfigError(f"device {error}") from None
    if parsed.fallback or parsed.hardware:
        raise ConfigError(f"device {device_id!r} is a record label, not a column of the matrix")
    if parsed.backend != "cpu" or parsed.threads:
        return DeviceVariant(device_id, parsed.backend, parsed.threads, parsed.compile)
    threads = config["device_settings"]["cpu"]["threads"]
    if (
        isinstance(threads, list)
        and len(threads) > 1
        and device_id not in set(iter_device_ids(config))
    ):
        raise ConfigError(
            f"device {device_id!r} is not in this config's matrix: device_settings.cpu.threads "
            f"{threads} makes one device per count (cpu-t<N>)"
        )
    return DeviceVariant(
        device_id, "cpu", threads[0] if isinstance(threads, list) else threads, parsed.compile
    )


def faults_for(config: dict, cell: Cell) -> list[dict]:
    out = []
    for fault in config.get("fault_injection") or []:
        if (
            fault["workload"] == cell.workload
            and fault["device"] == cell.device
            and fault.get("batch_size", cell.batch_size) == cell.batch_size
            and fault.get("rep", cell.rep) == cell.rep
        ):
            out.append(fault)
    return out


# Keys that shape the matrix rather than one run: left out of a cell's spec, so
# adding a batch size or a repeat does not invalidate the cells already run.
MATRIX_KEYS = ("enabled", "devices", "batch_sizes", "repeats", "timeout_s", "compile", "target")
# Workload keys that set the cell's device settings rather than the workload's.
DEVICE_KEYS = ("autocast",)


def launcher_settings(config: dict, workload: str) -> dict:
    """How a cell is run (timeout, attempts...). Not part of what it measures."""
    launcher = copy.deepcopy(config["launcher"])
    timeout = config["workloads"][workload].get("timeout_s")
    if timeout:
        launcher["timeout_s"] = timeout
    return launcher


def cell_spec(
    config: dict, cell: Cell, data_path: str | None = None, include_launcher: bool = True
) -> dict:
    """Everything the child process needs to run one cell, as plain JSON data.

    Snakemake reruns a cell when its spec changes; the launcher settings are left
    out of the rule's copy (``include_launcher=False``) so that raising a timeout
    does not rerun finished cells."""
    variant = find_variant(config, cell.device)
    device_settings = copy.deepcopy(config["device_settings"][variant.backend])
    if variant.backend == "cpu":
        device_settings["threads"] = variant.threads
    autocast = (config["workloads"][cell.workload].get("autocast") or {}).get(variant.backend)
    if autocast is not None:
        device_settings["autocast"] = autocast
    workload_settings = {
        k: copy.deepcopy(v)
        for k, v in config["workloads"][cell.workload].items()
        if k not in MATRIX_KEYS and k not in DEVICE_KEYS
    }
    spec = {
        "cell": {
            "workload": cell.workload,
            "device": cell.device,
            "batch_size": cell.batch_size,
            "rep": cell.rep,
        },
        "backend": variant.backend,
        "device_settings": device_settings,
        "workload_settings": workload_settings,
        "seed": config["seed"],
        "run_seed": config["seed"] + cell.rep,
        "timing": copy.deepcopy(config["timing"]),
        "data_path": data_path,
        "faults": faults_for(config, cell),
        # the final weights evaluated on the device and by the CPU in float64
        # (trainbench.measure.eval_parity): every device but the workload's baseline
        "eval_parity": cell.device != baseline_device(config, cell.workload),
    }
    if variant.compile:  # only compiled cells carry it: eager cells keep their hash
        spec["compile"] = variant.compile
    spec["config_hash"] = config_hash(spec)
    if include_launcher:
        spec["launcher"] = launcher_settings(config, cell.workload)
    return spec


def config_hash(spec: dict) -> str:
    """Hash of the settings that define a cell, excluding the repeat index, so
    repeats of one cell share it and any settings change gives a new one."""
    material = {
        k: v for k, v in spec.items() if k not in ("cell", "run_seed", "config_hash", "launcher")
    }
    material["cell"] = {k: v for k, v in spec["cell"].items() if k != "rep"}
    blob = json.dumps(material, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]
