"""The throughput benchmark's suite files and variants (benchmarks/suites/*.yaml).

A suite names one device, the rounds, and per training workload the batch sizes, the
settings and the variants to compare: ``harness``, ``bare`` and ``hf_trainer``,
optionally ``:compile`` or ``:compile-<mode>`` (harness and bare), or a named mapping
with device-setting overrides. This module reads and checks a suite and turns one of
its cases into the trainbench config and the cell spec each variant runs.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path

import yaml
from trainbench import config as tbconfig
from trainbench import workloads
from trainbench.config.device_ids import BACKENDS, COMPILE_MODES, DeviceId


class SuiteError(ValueError):
    """A benchmark suite file is wrong; the message names the key."""


@dataclass(frozen=True)
class Variant:
    runner: str  # harness, bare, hf_trainer
    compile: str | None = None  # torch.compile mode
    label: str | None = None  # a name for a variant with device-setting overrides
    device_settings: tuple = ()  # (key, value) pairs over the suite's device settings

    @classmethod
    def parse(cls, entry: str | dict) -> Variant:
        """``"harness"``, ``"bare:compile-reduce-overhead"``, or a mapping
        ``{name: ..., variant: harness, device_settings: {prefetch_to_device: false}}``."""
        if isinstance(entry, dict):
            unknown = set(entry) - {"name", "variant", "device_settings"}
            if unknown or "name" not in entry or "variant" not in entry:
                raise SuiteError(
                    f"variant {entry!r}: a mapping takes name, variant and device_settings"
                )
            base = cls.parse(entry["variant"])
            overrides = tuple(sorted((entry.get("device_settings") or {}).items()))
            return cls(base.runner, base.compile, str(entry["name"]), overrides)
        runner, _, mode = str(entry).partition(":")
        if runner not in ("harness", "bare", "hf_trainer"):
            raise SuiteError(
                f"variant {entry!r}: runner must be harness, bare or hf_trainer "
                "(optionally :compile or :compile-<mode>)"
            )
        if not mode:
            return cls(runner)
        if runner == "hf_trainer" or not mode.startswith("compile"):
            raise SuiteError(f"variant {entry!r}: only harness/bare take :compile[-<mode>]")
        compile_mode = mode.removeprefix("compile").removeprefix("-") or "default"
        if compile_mode not in COMPILE_MODES:
            raise SuiteError(
                f"variant {entry!r}: unknown compile mode; known: {', '.join(COMPILE_MODES)}"
            )
        return cls(runner, compile_mode)

    @property
    def name(self) -> str:
        if self.label:
            return self.label
        # the compile part of a device id: "cuda-compile-reduce-overhead" -> "compile-reduce-overhead"
        suffix = DeviceId("cuda", compile=self.compile).format().removeprefix("cuda-")
        return self.runner + (f":{suffix}" if self.compile else "")


# ----------------------------------------------------------------------------- suite


def load_suite(path: str | Path) -> dict:
    """Read and check a suite file (see benchmarks/suites/*.yaml)."""
    suite = yaml.safe_load(Path(path).read_text())
    if not isinstance(suite, dict):
        raise SuiteError(f"{path}: a suite is a mapping with device, rounds and cases")
    for key in ("name", "device", "cases"):
        if key not in suite:
            raise SuiteError(f"{path}: `{key}` is missing")
    if suite["device"] not in BACKENDS:
        raise SuiteError(f"{path}: `device` must be one of {', '.join(BACKENDS)}")
    # rounds: the interleaved harness/bare rounds; run_rounds: the whole-run rounds of
    # the other variants; block_seconds: an interleaved block's target length.
    suite.setdefault("rounds", 20)
    suite.setdefault("run_rounds", 3)
    suite.setdefault("block_seconds", 0.2)
    affinity = suite.setdefault("cpu_affinity", None)
    if affinity is not None and (isinstance(affinity, bool) or not isinstance(affinity, int)
                                 or affinity < 1):  # fmt: skip
        raise SuiteError(f"{path}: `cpu_affinity` is a number of logical CPUs (>= 1) or null")
    suite.setdefault("device_settings", {})
    for name, case in suite["cases"].items():
        if name not in workloads.WORKLOADS or workloads.info(name).kind != "training":
            raise SuiteError(f"{path}: `cases.{name}` is not a training workload")
        for key in ("batch_sizes", "variants", "settings"):
            if key not in case:
                raise SuiteError(f"{path}: `cases.{name}.{key}` is missing")
        case["variants"] = [Variant.parse(v) for v in case["variants"]]
        if any(v.runner == "hf_trainer" for v in case["variants"]) and name != "text_multilabel":
            raise SuiteError(f"{path}: `cases.{name}`: hf_trainer runs text_multilabel only")
        if case["settings"].get("gradient_accumulation", 1) != 1:
            raise SuiteError(
                f"{path}: `cases.{name}.settings.gradient_accumulation` must be 1 "
                "(the bare loop steps the optimizer every batch)"
            )
    return suite


def trainbench_config(suite: dict, workload: str) -> dict:
    """A validated trainbench config holding this case's settings and every compile
    mode its variants use."""
    case = suite["cases"][workload]
    settings = copy.deepcopy(case["settings"])
    modes = sorted({v.compile for v in case["variants"] if v.compile})
    settings["compile"] = ["eager", *modes]
    settings["batch_sizes"] = list(case["batch_sizes"])
    config = {
        "seed": int(suite.get("seed", 0)),
        "repeats": 1,
        "devices": [suite["device"]],
        "device_settings": {suite["device"]: copy.deepcopy(suite["device_settings"])},
        "launcher": {"progress": "never"},
        # Every variant times the harness's steps: no extension past the last epoch.
        "timing": {"extend_short_windows": False},
        "workloads": {workload: settings},
    }
    if workload != "image_cnn":
        config["workloads"]["image_cnn"] = {"enabled": False}
    return tbconfig.validate_config(config)


def cell_spec(config: dict, workload: str, variant: Variant, batch_size: int, data: str) -> dict:
    """The cell a variant runs: the harness's compiled variants use their own device
    column (cuda-compile...); the bare loop and the Trainer use the eager column's
    settings and compile (or not) themselves."""
    mode = variant.compile if variant.runner == "harness" else None
    columns = [v for v in tbconfig.device_variants(config, None, workload) if v.compile == mode]
    if len(columns) != 1:
        raise SuiteError(
            f"cases.{workload}: {len(columns)} device columns for {variant.name}; give the CPU "
            "one thread count (device_settings.threads) in a suite"
        )
    cell = tbconfig.Cell(workload, columns[0].id, batch_size, 0)
    spec = tbconfig.cell_spec(config, cell, data)
    spec["device_settings"].update(dict(variant.device_settings))
    spec["launcher"]["progress"] = "never"
    return spec
