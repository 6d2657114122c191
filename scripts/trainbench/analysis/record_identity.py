"""Each record counted once: merged results folders (``aggregate.include_results``) may
hold the same record twice — a folder included twice, this run's own folder included,
a copy of a folder beside its original — and a record must never be averaged with itself.

A record's **identity** is its cell (workload, device, batch size, repeat), its run seed
(``environment.run_seed``, else ``spec.run_seed``), the code that made it
(``environment.code.source_sha256``, else its label), the software and machine it says it
ran with (torch version, behaviour variables, CPU model, device name: a record that
claims another torch is another software's record, split apart by
:mod:`.software`, never one of this one's duplicates or conflicts) and its start (the
first attempt's ``started_at``/``started_unix``): two runs of one cell never share a
start. Files of one identity (or, where a record names no start, of one content) are

* **duplicates** when their parsed JSON is equal: one is kept (this run's own record
  first, else the first path sorted) and the others are dropped and counted;
* a **conflict** when it differs (a copy edited after the run, a record rewritten):
  nothing tells which is true, so none of them is in any table, and each is named with
  the first keys that differ.

The same file listed twice (by another path to it) is a duplicate too.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

DUPLICATE_COLUMNS = ["kind", "identity", "records", "kept", "dropped", "differs"]
DIFFERENCES_SHOWN = 5


@dataclass(frozen=True)
class Counted:
    """The records each counted once, and the ``duplicates.csv`` rows: ``kind``
    (``duplicate`` or ``conflict``), ``identity`` in words, ``records`` (duplicates: how
    many files were dropped; conflicts: how many files conflict, all left out), ``kept``
    (the path kept; empty for a conflict), ``dropped`` (the paths left out, "; "-joined),
    ``differs`` (a conflict's first differing JSON keys)."""

    records: list[tuple[str, dict]]
    notes: list[dict] = field(default_factory=list)

    @property
    def dropped_duplicates(self) -> int:
        return sum(n["records"] for n in self.notes if n["kind"] == "duplicate")

    @property
    def conflicts(self) -> int:
        return sum(n["records"] for n in self.notes if n["kind"] == "conflict")


def _start(record: Mapping) -> str | None:
    attempts = record.get("attempts") or []
    first = attempts[0] if attempts and isinstance(attempts[0], Mapping) else {}
    start = first.get("started_at") or first.get("started_unix")
    return None if start is None else str(start)


def identity_of(record: Mapping) -> tuple | None:
    """(workload, device, batch size, repeat, run seed, code, torch, behaviour variables,
    CPU model, device name, start); None where the record names no start (then only an
    equal content makes a duplicate)."""
    start = _start(record)
    if start is None:
        return None
    cell = record.get("cell") or {}
    env = record.get("environment") or {}
    spec = record.get("spec") or {}
    code = env.get("code") if isinstance(env.get("code"), Mapping) else {}
    seed = env.get("run_seed", spec.get("run_seed"))
    source = code.get("source_sha256") or code.get("label") or env.get("git_commit")
    cells = (cell.get("workload"), cell.get("device"), cell.get("batch_size"), cell.get("rep"))
    device = env.get("device") if isinstance(env.get("device"), Mapping) else {}
    ran_with = (
        env.get("torch_version"),
        json.dumps(env.get("behaviour_variables"), sort_keys=True, default=str),
        env.get("cpu_model"),
        device.get("name"),
    )
    return (*cells, seed, source, *ran_with, start)


def identity_text(record: Mapping) -> str:
    """The identity in words: ``image_cnn on cpu, batch 32, repeat 0, run seed 0, code
    trainbench 0.1.0, source 1a2b3c4d5e6f, started 2026-11-29T08:14:50+0000``."""
    cell = record.get("cell") or {}
    env = record.get("environment") or {}
    code = env.get("code") if isinstance(env.get("code"), Mapping) else {}
    seed = env.get("run_seed", (record.get("spec") or {}).get("run_seed"))
    text = (
        f"{cell.get('workload')} on {cell.get('device')}, batch {cell.get('batch_size')}, "
        f"repeat {cell.get('rep')}, run seed {seed}"
    )
    source = code.get("label") or code.get("source_sha256")
    text += f", code {source}" if source else ", code not recorded"
    start = _start(record)
    return text + (f", started {start}" if start else ", start not recorded")


def differences(a: object, b: object, path: str = "") -> list[str]:
    """The keys (dotted paths, ``attempts[0].started_at``) where ``a`` and ``b`` differ."""
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        out = []
        for key in sorted(set(a) | set(b), key=str):
            inner = f"{path}.{key}" if path else str(key)
            if key not in a or key not in b:
                out.append(inner)
            else:
                out += differences(a[key], b[key], inner)
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        pairs = enumerate(zip(a, b, strict=True))
        return [d for i, (x, y) in pairs for d in differences(x, y, f"{path}[{i}]")]
    return [] if a == b else [path or "(the whole record)"]


def _canonical(record: Mapping) -> str:
    return json.dumps(record, sort_keys=True, default=str)


def count_once(records: Iterable[tuple[str, dict]], own: Iterable[str] | None = None) -> Counted:
    """``records`` with each record once (module docstring): duplicates dropped (this
    run's own, ``own``, kept first), conflicts left out; the order of the rest kept."""
    records = list(records)
    own = {str(p) for p in own or ()}
    first_of_file: dict[str, int] = {}
    groups: dict[object, list[int]] = defaultdict(list)
    order = sorted(range(len(records)), key=lambda i: (records[i][0] not in own, records[i][0]))
    texts = {}
    same_file: dict[int, list[int]] = defaultdict(list)  # kept index -> same file listed again
    for i in order:
        real = os.path.realpath(records[i][0])
        if real in first_of_file:
            same_file[first_of_file[real]].append(i)
            continue
        first_of_file[real] = i
        texts[i] = _canonical(records[i][1])
        groups[identity_of(records[i][1]) or ("content", texts[i])].append(i)
    keep, notes = set(), []
    for members in groups.values():
        contents = {texts[i] for i in members}
        if len(contents) > 1:
            notes.append(_conflict([records[i] for i in members]))
            continue
        keep.add(members[0])
        dropped = [j for i in members for j in (i, *same_file[i]) if j != members[0]]
        if dropped:
            notes.append(_duplicate(records[members[0]], [records[j][0] for j in dropped]))
    notes.sort(key=lambda n: (n["kind"], n["identity"]))
    return Counted([r for i, r in enumerate(records) if i in keep], notes)


def _duplicate(kept: tuple[str, dict], dropped: list[str]) -> dict:
    return {
        "kind": "duplicate",
        "identity": identity_text(kept[1]),
        "records": len(dropped),
        "kept": kept[0],
        "dropped": "; ".join(dropped),
        "differs": "",
    }


def _conflict(members: list[tuple[str, dict]]) -> dict:
    found: list[str] = []
    first = members[0][1]
    for _, other in members[1:]:
        found += [d for d in differences(first, other) if d not in found]
    shown = found[:DIFFERENCES_SHOWN]
    more = len(found) - len(shown)
    return {
        "kind": "conflict",
        "identity": identity_text(first),
        "records": len(members),
        "kept": "",
        "dropped": "; ".join(src for src, _ in members),
        "differs": ", ".join(shown) + (f" and {more} more" if more else ""),
    }


def results_folders(
    paths: Iterable[str], own: Iterable[str] | None, include_results: Iterable[str] = ()
) -> dict[str, str]:
    """Each record's results folder: "" for this run's own records, else the included
    folder (``aggregate.include_results``, as configured) it lies in, else the folder
    above its ``runs/``."""
    own = {str(p) for p in own or ()}
    folders = [(f, os.path.realpath(f) + os.sep) for f in include_results]
    out = {}
    for path in map(str, paths):
        if path in own:
            out[path] = ""
            continue
        real = os.path.realpath(path)
        found = next((f for f, prefix in folders if real.startswith(prefix)), None)
        if found is None:
            head, sep, _ = path.rpartition(f"{os.sep}runs{os.sep}")
            found = head if sep else os.path.dirname(path)
        out[path] = found
    return out
