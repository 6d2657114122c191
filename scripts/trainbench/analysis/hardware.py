"""The hardware a record ran on, and the labels that keep different hardware apart.

Records are grouped by the hardware a cell actually used, not by host name: two
nodes of one type pool (a cluster's identical nodes, two identical laptops), and
records of different hardware are never averaged together."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace

import pandas as pd
from trainbench.analysis.record_view import Environment, view_record
from trainbench.config.device_ids import backend_of


@dataclass(frozen=True)
class Hardware:
    """What a record ran on. CPU cells (and MPS, whose chip is the CPU model): the
    CPU model and core count; CUDA cells also the GPU model. ``host`` stands in
    only where a record does not name its CPU model."""

    cpu: str | None
    cores: int | None
    gpu: str | None  # CUDA cells: the GPU's name, "none" where none was seen, None unknown
    host: str | None = None

    def parts(self, accelerator: bool) -> list[str]:
        """Readable parts, the most telling first (labels use as few as they need)."""
        if self.cpu is None:
            return [str(self.host)]
        cpu = [short_cpu_name(self.cpu), f"{self.cores} cores", self.cpu]
        if not accelerator:
            return cpu
        gpu = {None: "GPU unknown", "none": "no GPU"}.get(self.gpu, self.gpu)
        return [str(gpu), *cpu]


def short_cpu_name(name: str) -> str:
    """'Intel(R) Xeon(R) Platinum 8480+ @ 2.0GHz' -> 'Intel Xeon Platinum 8480+'."""
    text = re.sub(r"\((?:R|TM)\)", "", name, flags=re.I)
    text = re.sub(r"@\s*[\d.]+\s*[GM]Hz", "", text, flags=re.I)
    text = re.sub(r"\b(?:CPU|Processor)\b", "", text)
    return " ".join(text.split()) or name


def _is_cuda(record: Mapping) -> bool:
    backend = record.get("backend") or backend_of(str(record["cell"]["device"]))
    return backend == "cuda"


def record_hardware(record: Mapping, env: Environment | None = None) -> Hardware:
    """The record's hardware (``env``: its environment's view, where already made)."""
    env = view_record(record).environment if env is None else env
    gpu = None
    if _is_cuda(record):
        gpu = env.device.name
        models = sorted(set(env.gpu_models or []))
        if not gpu and len(models) == 1:
            gpu = models[0]  # the child died before naming its GPU; the node has one kind
        elif not gpu and env.gpu_models == []:
            gpu = "none"  # nvidia-smi answered and listed no GPU
    if not env.cpu_model:
        return Hardware(None, None, gpu, env.host)
    return Hardware(env.cpu_model, env.logical_cores, gpu)


def records_hardware(records: list[tuple[str, dict]]) -> dict[str, Hardware]:
    """Each record's hardware. A CUDA record whose GPU is unknown takes the GPU model
    of its host's other CUDA records when they name exactly one."""
    envs = {src: view_record(r).environment for src, r in records}
    found = {src: record_hardware(r, envs[src]) for src, r in records}
    host_gpus: dict[str | None, set[str]] = {}
    for src, r in records:
        gpu = found[src].gpu
        if _is_cuda(r) and gpu not in (None, "none"):
            host_gpus.setdefault(envs[src].host, set()).add(gpu)
    for src, r in records:
        gpus = host_gpus.get(envs[src].host, set())
        if _is_cuda(r) and found[src].gpu is None and len(gpus) == 1:
            found[src] = replace(found[src], gpu=next(iter(gpus)))
    return found


def hardware_labels(
    records: list[tuple[str, dict]], hardware: Mapping[str, Hardware] | None = None
) -> tuple[dict[str, str], bool]:
    """Each record's hardware label, and whether devices must carry it: true when some
    device ran on more than one kind of hardware. A device's labels use as few parts
    as keep its kinds apart ("NVIDIA H100 80GB HBM3"; "Intel Xeon Gold 6148, 40 cores"
    only where two kinds share a CPU model). ``hardware``: :func:`records_hardware`,
    where already found."""
    hardware = records_hardware(records) if hardware is None else hardware
    by_device: dict[str, set[Hardware]] = {}
    cuda: dict[str, bool] = {}
    for src, r in records:
        device = r["cell"]["device"]
        by_device.setdefault(device, set()).add(hardware[src])
        cuda[device] = _is_cuda(r)
    names: dict[tuple[str, Hardware], str] = {}
    for device, kinds in by_device.items():
        ordered = sorted(kinds, key=repr)
        parts = {hw: hw.parts(cuda[device]) for hw in ordered}
        for n in range(1, max(len(p) for p in parts.values()) + 1):
            labels = {hw: ", ".join(dict.fromkeys(p[:n])) for hw, p in parts.items()}
            if len(set(labels.values())) == len(ordered):
                break
        else:  # identical readable parts for different kinds: number them
            labels = {hw: f"{labels[hw]} #{i + 1}" for i, hw in enumerate(ordered)}
        names.update({(device, hw): label for hw, label in labels.items()})
    per_record = {src: names[(r["cell"]["device"], hardware[src])] for src, r in records}
    return per_record, any(len(kinds) > 1 for kinds in by_device.values())


def machine_devices(
    records: list[tuple[str, dict]], hardware: Mapping[str, Hardware] | None = None
) -> dict[str, str]:
    """Each record's device on its machine, the thing a comparison holds fixed: the
    cell's device, ``device@hardware`` where some device ran on several kinds of hardware."""
    labels, split = hardware_labels(records, hardware)
    return {
        src: f"{r['cell']['device']}@{labels[src]}" if split else str(r["cell"]["device"])
        for src, r in records
    }


def label_machines(
    tables: dict[str, pd.DataFrame],
    records: list[tuple[str, dict]],
    software: Mapping[str, str] | None = None,
) -> None:
    """Every table row gets its record's ``hardware`` and ``software`` (``software``:
    each record's software label, trainbench.analysis.software; empty: nothing splits).
    When some device ran on more than one kind of hardware (merged results folders, a
    cluster's node types), every device becomes ``device@hardware``, so different
    hardware is never averaged together while identical nodes pool. When records split
    by software, every device becomes ``device@hardware · software`` (the hardware's
    short readable name where the hardware did not split). Tables with a device also get
    ``machine_device``: the device label without its software part."""
    hardware = records_hardware(records)
    labels, split = hardware_labels(records, hardware)
    software = {src: software.get(src) or "" for src, _ in records} if software else {}
    by_software = any(software.values())
    names = labels
    if by_software and not split:
        names = {src: hardware[src].parts(_is_cuda(r))[0] for src, r in records}
    for frame in tables.values():
        if frame.empty or "record" not in frame.columns:
            continue
        frame["hardware"] = frame["record"].map(labels)
        frame["software"] = frame["record"].map(software).fillna("") if software else ""
        if "device" not in frame.columns:
            continue
        machine = frame["device"].astype(str)
        if split or by_software:
            machine = machine + "@" + frame["record"].map(names).astype(str)
        frame["machine_device"] = machine
        parts = frame["software"].astype(str)
        frame["device"] = machine.where(parts == "", machine + " · " + parts)
