"""What a record measured: its workload's setup (model, data set, training settings),
so that tables never compare runs of different setups.

A record's setup is the workload name, the workload settings of its cell spec
(data source and size, model, optimizer, epochs...: batch sizes, repeats and
devices are matrix keys and not part of it) and the base seed, hashed. Records of
one workload with different setups — an MNIST run merged with a synthetic-image
run, a results folder of an older config — are split into separate workloads named
by what differs (``image_cnn [data.source=mnist_idx]``), never averaged or
compared, and the split is listed with its reason.
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict

import pandas as pd


def _flatten(value, prefix: str = "") -> dict[str, str]:
    if isinstance(value, dict):
        out: dict[str, str] = {}
        for key, inner in value.items():
            out.update(_flatten(inner, f"{prefix}{key}."))
        return out
    return {prefix[:-1]: json.dumps(value, sort_keys=True, default=str)}


def setup_of(record: dict) -> tuple[str, dict[str, str]]:
    """(id, flattened settings) of a record's setup."""
    spec = record.get("spec") or {}
    material = {
        "workload": record["cell"]["workload"],
        "settings": spec.get("workload_settings") or {},
        "seed": spec.get("seed"),
    }
    blob = json.dumps(material, sort_keys=True, default=str).encode()
    flat = _flatten(material["settings"]) | {"seed": json.dumps(material["seed"])}
    return hashlib.sha256(blob).hexdigest()[:12], flat


def describe(record: dict) -> str | None:
    """The setup in words: data set (source, shape, sizes) and model (name, parameters)."""
    result = record.get("result") or {}
    if result.get("kind") != "training":
        return None
    data = (result.get("settings") or {}).get("data") or {}
    settings = ((record.get("spec") or {}).get("workload_settings") or {}).get("data") or {}
    source = data.get("source") or settings.get("source")
    shape = "×".join(map(str, data["shape"])) if data.get("shape") else None
    sizes = [f"{data[k]} {k[2:]}" for k in ("n_train", "n_test", "n_dev") if data.get(k)]
    model = result.get("model") or {}
    parts = [f"data {source}" + (f" {shape}" if shape else "")] if source else []
    parts += [", ".join(sizes)] if sizes else []
    if model.get("name"):
        parts.append(f"model {model['name']}, {model.get('parameters', 0):,} parameters")
    return "; ".join(parts) or None


def _difference(mine: dict[str, str], others: list[dict[str, str]]) -> str:
    """The first setting (sorted) whose value tells this setup from the others."""
    for key in sorted(set(mine) | {k for o in others for k in o}):
        if any(o.get(key) != mine.get(key) for o in others):
            value = mine.get(key, "unset").strip('"')
            return f"{key}={value}"
    return "setup"


def split_names(
    records: list[tuple[str, dict]], own: set[str] | None = None
) -> tuple[dict[str, str], list[dict]]:
    """Each record's workload name (suffixed where its workload has several setups;
    the setup of this run's own records, ``own``, keeps the plain name), and one note
    per split workload."""
    setups: dict[str, dict[str, dict]] = defaultdict(dict)
    of_record = {}
    for src, record in records:
        setup_id, flat = setup_of(record)
        workload = record["cell"]["workload"]
        setups[workload][setup_id] = flat
        of_record[src] = (workload, setup_id)
    labels, notes = {}, []
    for workload, found in setups.items():
        if len(found) < 2:
            labels.update({(workload, s): workload for s in found})
            continue
        mine = {of_record[src][1] for src in own or () if of_record.get(src, ("",))[0] == workload}
        names = {}
        for setup_id, flat in found.items():
            others = [f for s, f in found.items() if s != setup_id]
            plain = len(mine) == 1 and setup_id in mine
            names[setup_id] = workload if plain else f"{workload} [{_difference(flat, others)}]"
        labels.update({(workload, s): name for s, name in names.items()})
        notes.append(
            {
                "workload": workload,
                "setups": len(found),
                "split_into": "; ".join(sorted(names.values())),
                "reason": f"the records of {workload} come from {len(found)} different setups "
                "(settings, data or seed); runs of different setups are never compared",
            }
        )
    return {src: labels[key] for src, key in of_record.items()}, notes


def label_setups(
    tables: dict[str, pd.DataFrame], records: list[tuple[str, dict]], own: set[str] | None = None
) -> list[dict]:
    """Every table row gets its record's ``setup`` id and description; where a workload
    has several setups its rows are renamed apart. Returns the split notes."""
    names, notes = split_names(records, own)
    ids = {src: setup_of(r)[0] for src, r in records}
    texts = {src: describe(r) for src, r in records}
    for frame in tables.values():
        if frame.empty or "record" not in frame.columns:
            continue
        frame["setup"] = frame["record"].map(ids)
        if "workload" in frame.columns:
            frame["workload"] = frame["record"].map(names).fillna(frame["workload"])
    if "runs" in tables and not tables["runs"].empty:
        tables["runs"]["setup_text"] = tables["runs"]["record"].map(texts)
    return notes
