"""A typed, read-only view of a metrics record (schema version 2): the parts the record
tables read, as frozen dataclasses with one field per key.

The record schema (``schemas/record.schema.json``) validates a record's structure;
this view names what the tables take from it, in one place, so a reader sees
``view.result.warmup.first_step_seconds`` instead of a path of string keys, and a
type checker sees a misspelt field. A key absent from the record (a failed run has no
result; a CPU cell no device memory) reads as None, a section as an empty view.
Sections whose keys are open-ended (per-domain energy, placement lists) stay
mappings.

``view_record(record)`` builds the view; the record dict itself is never changed.
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

T = TypeVar("T")
_EMPTY: Mapping[str, Any] = {}


@dataclass(frozen=True)
class Cell:
    workload: str
    device: str
    batch_size: int
    rep: int


@dataclass(frozen=True)
class Error:
    class_: str | None = field(default=None, metadata={"key": "class"})
    message: str | None = None


@dataclass(frozen=True)
class DeviceInfo:
    name: str | None = None


@dataclass(frozen=True)
class CoreLevels:
    """A Mac's kinds of cores (trainbench.measure.macos_host.core_levels)."""

    levels: int | None = None
    performance_cores: int | None = None
    efficiency_cores: int | None = None


@dataclass(frozen=True)
class Power:
    """The power the machine ran on (trainbench.measure.macos_host.power_facts)."""

    source: str | None = None  # "AC" or "battery"
    battery_percent: float | None = None
    low_power_mode: bool | None = None


@dataclass(frozen=True)
class Environment:
    host: str | None = None
    os: str | None = None
    cpu_model: str | None = None
    logical_cores: int | None = None
    cpu_core_levels: CoreLevels = CoreLevels()
    power: Power = Power()
    gpu_models: list | None = None
    device: DeviceInfo = DeviceInfo()
    python: str | None = None
    torch_version: str | None = None
    packages: Mapping[str, str] = field(default_factory=dict)
    git_commit: str | None = None
    code: Mapping[str, Any] = field(default_factory=dict)  # trainbench.common.code_identity
    slurm_job_id: str | int | None = None
    config_hash: str | None = None
    run_seed: int | None = None
    # Variables that change how torch behaves, as the cell's child had them (None: not recorded).
    behaviour_variables: Mapping[str, str] | None = None

    @property
    def behaviour(self) -> str | None:
        """The measuring code's behaviour digest (``code.behaviour``, 12 hex characters,
        trainbench.common.code_identity.behaviour_digest); None in records made before it."""
        value = self.code.get("behaviour") if isinstance(self.code, Mapping) else None
        return str(value) if value else None

    @property
    def source_sha256(self) -> str | None:
        """The SHA-256 of the code's source files (``code.source_sha256``), where recorded."""
        value = self.code.get("source_sha256") if isinstance(self.code, Mapping) else None
        return str(value) if value else None

    @property
    def code_label(self) -> str | None:
        """The code that made the record (a record written before it was named: its
        commit, where it had one)."""
        label = self.code.get("label") if isinstance(self.code, Mapping) else None
        if label:
            return str(label)
        return f"git {self.git_commit[:10]}" if self.git_commit not in (None, "unknown") else None


@dataclass(frozen=True)
class Stalls:
    """The window's stalls (trainbench.measure.stalls.stall_facts)."""

    count: int | None = None
    seconds: float | None = None
    share: float | None = None
    largest_share: float | None = None  # the largest stall's share of the window
    over_limit: int | None = None  # stalls alone above timing.max_stall_share
    excluded: bool | None = None  # True: those left out of samples_per_s


@dataclass(frozen=True)
class Timed:
    samples_per_s: float | None = None  # published: stalls excluded where the rule says so
    samples_per_s_all_steps: float | None = None  # every step (None: older records)
    steps: int | None = None
    samples: int | None = None
    seconds: float | None = None
    short_window: bool | None = None
    stalls: Stalls | None = None  # None: a record written before the stall rule


@dataclass(frozen=True)
class SteadyState:
    classification: str | None = None
    start_step: int | None = None


@dataclass(frozen=True)
class Warmup:
    seconds: float | None = None
    first_step_seconds: float | None = None


@dataclass(frozen=True)
class StepLatency:
    p50: float | None = None
    p90: float | None = None
    cv: float | None = None
    robust_cv: float | None = None


@dataclass(frozen=True)
class Outliers:
    high_mild: int | None = None
    high_severe: int | None = None
    high_seconds_share: float | None = None


@dataclass(frozen=True)
class DataWait:
    per_step_mean_s: float | None = None


@dataclass(frozen=True)
class EvalWarm:
    seconds: float | None = None
    passes: int | None = None


@dataclass(frozen=True)
class Eval:
    samples_per_s: float | None = None
    warm: EvalWarm = EvalWarm()
    cold_seconds: float | None = None
    short_window: bool | None = None


@dataclass(frozen=True)
class Host:
    other_cpu_cores: float | None = None
    load_avg_start: list | None = None
    load_avg_end: list | None = None
    disturbed: bool | None = None
    logical_cores: int | None = None
    # Since the disturbance rule judged the cell's own cores (records before it: None).
    cell_cpus: list | None = None
    cell_cpu_others_share: float | None = None
    disturbed_reason: str | None = None


@dataclass(frozen=True)
class Amp:
    dtype: str | None = None
    scaler: bool | None = None


@dataclass(frozen=True)
class OptimizerOptions:
    lr: float | None = None


@dataclass(frozen=True)
class Settings:
    warmup_steps: int | None = None
    gradient_accumulation: int | None = None
    effective_batch_size: int | None = None
    epochs: int | None = None
    max_length: int | None = None
    optimizer: str | None = None
    optimizer_options: OptimizerOptions = OptimizerOptions()
    dtype: str | None = None
    torch_threads: int | None = None
    amp: Amp = Amp()


@dataclass(frozen=True)
class DeviceMemory:
    initial_bytes: int | None = None
    peak_bytes: int | None = None
    method: str | None = None


@dataclass(frozen=True)
class Memory:
    device: DeviceMemory = DeviceMemory()
    limit_bytes: int | None = None


@dataclass(frozen=True)
class Model:
    name: str | None = None
    parameters: int | None = None


@dataclass(frozen=True)
class Task:
    primary_metric: str | None = None
    higher_is_better: bool | None = None
    final: float | None = None
    best: float | None = None
    best_epoch: int | None = None
    final_loss: float | None = None
    micro_f1: float | None = None
    macro_f1: float | None = None
    per_label: list | None = None


@dataclass(frozen=True)
class Mining:
    seconds: float | None = None


@dataclass(frozen=True)
class EnergyEval:
    total_joules: float | None = None
    status: str | None = None


@dataclass(frozen=True)
class Idle:
    total_watts: float | None = None


@dataclass(frozen=True)
class GpuState:
    temperature_c: float | None = None
    power_limit_w: float | None = None


@dataclass(frozen=True)
class GpuStates:
    before: GpuState = GpuState()
    after: GpuState = GpuState()


@dataclass(frozen=True)
class Energy:
    status: str | None = None
    reason: str | None = None
    window_seconds: float | None = None
    regions: int | None = None
    samples: int | None = None
    total_joules: float | None = None
    joules_per_sample: float | None = None
    samples_per_joule: float | None = None
    mean_watts: float | None = None
    measured: str | None = None
    min_seconds: float | None = None  # timing.min_energy_seconds in force
    domains: Mapping[str, Mapping] = field(default_factory=dict)  # per domain: joules, status
    eval: EnergyEval = EnergyEval()
    idle: Idle = Idle()
    gpu_state: GpuStates = GpuStates()


@dataclass(frozen=True)
class Result:
    kind: str | None = None
    timed: Timed = Timed()
    steady_state: SteadyState = SteadyState()
    # the schedule phase the window is held to (trainbench.measure.measurement.window_phase)
    window_phase: Mapping[str, Any] | None = None
    warmup: Warmup = Warmup()
    step_latency_s: StepLatency = StepLatency()
    outliers: Outliers | None = None  # None: the record has no outlier count
    data_wait: DataWait = DataWait()
    eval: Eval = Eval()
    epochs: list = field(default_factory=list)
    host: Host | None = None  # None: the record has no host activity
    settings: Settings = Settings()
    memory: Memory = Memory()
    model: Model = Model()
    task: Task = Task()
    mining: Mining = Mining()
    verification: Mapping[str, Any] = field(default_factory=dict)
    step_breakdown: Mapping[str, Any] | None = None  # the diagnostic pass (step_breakdown.py)
    eval_parity: Mapping[str, Any] | None = None  # trainbench.measure.eval_parity (None: not run)
    quality: Mapping[str, Any] | None = None  # trainbench.measure.quality (None: older records)
    energy: Energy | None = None  # None: no energy section (microbenchmarks, old runs)
    sizes: list = field(default_factory=list)  # microbenchmark: one entry per matrix size

    @property
    def is_training(self) -> bool:
        return self.kind == "training"


@dataclass(frozen=True)
class RecordView:
    status: str
    cell: Cell
    device_label: str | None = None
    backend: str | None = None
    reason: str | None = None
    error: Error = Error()
    attempts: list = field(default_factory=list)
    result: Result = Result()
    environment: Environment = Environment()
    settings_in_force: Mapping[str, Any] = field(default_factory=dict)
    numerics: Mapping[str, Any] | None = None
    wall_time: Mapping[str, Any] = field(default_factory=dict)  # trainbench.measure.wall_time


def view_record(record: Mapping[str, Any]) -> RecordView:
    """The typed view of ``record`` (a dict read by :func:`trainbench.common.records.read_record`)."""
    return view(RecordView, record)


def view(cls: type[T], data: Mapping[str, Any] | None) -> T:
    """``cls`` filled from ``data``: each field from its key (``metadata["key"]`` where
    the key is a Python keyword), a nested view from a nested mapping; absent keys and
    non-mapping sections keep the field's default."""
    data = data if isinstance(data, Mapping) else _EMPTY
    kwargs = {}
    for name, key, section in _plan(cls):
        value = data.get(key)
        if value is None:
            continue
        if section is not None:
            if not isinstance(value, Mapping):
                continue
            value = view(section, value)
        kwargs[name] = value
    return cls(**kwargs)


@functools.cache
def _plan(cls: type) -> tuple[tuple[str, str, type | None], ...]:
    """Each field of ``cls`` once: (field name, record key, nested view class or None)."""
    return tuple(
        (f.name, f.metadata.get("key", f.name), _view_class(cls, f.name))
        for f in dataclasses.fields(cls)  # type: ignore[arg-type]
    )


def _view_class(cls: type, name: str) -> type | None:
    """The dataclass a field holds (``X`` or ``X | None``), else None."""
    hint = typing.get_type_hints(cls)[name]
    for candidate in (hint, *typing.get_args(hint)):
        if dataclasses.is_dataclass(candidate):
            return candidate  # type: ignore[return-value]
    return None
