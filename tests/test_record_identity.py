"""Each record counted once: a folder included twice, this run's own folder included or
a copy beside its original drops the duplicates (this run's own kept) and says how
many; a copy edited after the run conflicts with its original and neither is in any
table; every record names the behaviour digest of the code that measured it."""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile

import pandas as pd
import pytest
from helpers import REPO
from test_aggregate import record as plain_record
from trainbench.analysis import aggregate, record_identity
from trainbench.common import behaviour
from trainbench.common import code_identity as identity
from trainbench.common.records import write_record

OUTPUTS = ("runs", "duplicates", "software", "setups", "epochs")


def record(rep=0, rate=100.0, device="cpu"):
    rec = plain_record(device=device, rep=rep, rate=rate, host="box")
    rec["attempts"][0]["started_at"] = f"2026-11-29T08:14:{10 + rep:02d}+0000"
    rec["environment"].update(run_seed=rep, code={"source_sha256": "f" * 64, "label": "tb"})
    return rec


def folder(root, name, recs):
    """A results folder ``root/name`` holding ``recs``; its record paths."""
    paths = []
    for rec in recs:
        cell = rec["cell"]
        path = root / name / "runs" / cell["workload"] / cell["device"]
        path = path / f"bs{cell['batch_size']}" / f"rep{cell['rep']}" / "metrics.json"
        write_record(path, rec)
        paths.append(str(path))
    return paths


def write(tmp_path, own, included, folders=()):
    outputs = {n: str(tmp_path / "tables" / f"{n}.csv") for n in OUTPUTS}
    return aggregate.write_tables(
        [*own, *included], outputs, own=own, include_results=[str(f) for f in folders]
    )


def test_a_folder_included_twice_counts_each_record_once(tmp_path):
    own = folder(tmp_path, "own", [record(0), record(1)])
    mac = folder(tmp_path, "mac", [record(0, device="mps"), record(1, device="mps")])
    t = write(tmp_path, own, mac + mac, folders=[tmp_path / "mac", tmp_path / "mac"])
    assert len(t["runs"]) == 4 and t["runs"]["record"].is_unique
    notes = pd.read_csv(tmp_path / "tables" / "duplicates.csv")
    assert notes["kind"].tolist() == ["duplicate", "duplicate"]
    assert notes["records"].sum() == 2
    assert set(notes["kept"]) == set(mac)
    assert "mps, batch 32, repeat 0, run seed 0, code tb, started" in notes["identity"].iloc[0]


def test_the_own_folder_included_and_a_copy_keep_the_own_records(tmp_path):
    own = folder(tmp_path, "zz-own", [record(0), record(1)])  # sorts after the copy
    shutil.copytree(tmp_path / "zz-own", tmp_path / "copy")
    copy = [p.replace("zz-own", "copy") for p in own]
    again = [p.replace(str(tmp_path), str(tmp_path / "." / "")) for p in own]  # another path
    t = write(tmp_path, own, copy + again, folders=[tmp_path / "copy", tmp_path / "zz-own"])
    runs = t["runs"]
    assert sorted(runs["record"]) == sorted(own)
    assert set(runs["results_folder"]) == {""}
    assert set(runs["device"]) == {"cpu"}
    notes = t["duplicates"]
    assert notes["records"].sum() == 4 and set(notes["kept"]) == set(own)


def test_a_copy_marked_as_another_torch_is_that_software_s_record_never_pooled(tmp_path):
    """The user's case: a copy of the records marked as made by torch 2.5.1 beside the
    originals is neither pooled with them nor counted twice: it claims another software,
    so it is that software's record, split into a device of its own."""
    own = folder(tmp_path, "own", [record(0), record(1), record(2)])
    marked = [record(rep) for rep in range(3)]
    for rec in marked:
        rec["environment"]["torch_version"] = "2.5.1"
    copy = folder(tmp_path, "copy", marked)
    t = write(tmp_path, own, copy, folders=[tmp_path / "copy"])
    runs = t["runs"]
    assert len(runs) == 6 and t["duplicates"].empty
    sides = runs.groupby("software")["rep"].apply(sorted).to_dict()
    assert len(sides) == 2 and "torch 2.5.1" in sides
    assert all(reps == [0, 1, 2] for reps in sides.values())
    assert runs["device"].nunique() == 2  # never one median
    assert set(t["software"]["split"]) >= {"split"}


def test_a_conflicting_copy_is_left_out_with_its_original_and_named(tmp_path):
    """A copy whose numbers were edited after the run claims the original's identity:
    nothing tells which is true, so neither is in any table, and both are named."""
    own = folder(tmp_path, "own", [record(0), record(1), record(2)])
    edited = record(1, rate=150.0)
    copy = folder(tmp_path, "copy", [record(0), edited])
    t = write(tmp_path, own, copy, folders=[tmp_path / "copy"])
    runs = t["runs"]
    assert sorted(runs["rep"]) == [0, 2]  # repeat 1 conflicts: in no table
    assert runs["record"].tolist() == [own[0], own[2]]
    assert set(runs["device"]) == {"cpu"} and t["software"].empty
    conflict = t["duplicates"].set_index("kind").loc["conflict"]
    assert conflict["records"] == 2 and conflict["kept"] == ""
    assert set(conflict["dropped"].split("; ")) == {own[1], copy[1]}
    assert "result.timed.samples_per_s" in conflict["differs"]
    duplicate = t["duplicates"].set_index("kind").loc["duplicate"]
    assert duplicate["kept"] == own[0] and duplicate["dropped"] == copy[0]


def test_records_without_a_start_are_merged_only_when_equal(tmp_path):
    a, b = plain_record(host="a"), plain_record(host="b")  # no start: not one identity
    paths = folder(tmp_path, "x", [a]) + folder(tmp_path, "y", [b]) + folder(tmp_path, "z", [a])
    records, _ = aggregate.load_records(paths)
    counted = record_identity.count_once(records)
    assert [src for src, _ in counted.records] == paths[:2]
    assert counted.dropped_duplicates == 1 and counted.conflicts == 0


def test_differences_name_the_first_keys():
    a = {"x": 1, "y": {"z": [1, 2]}, "w": 0}
    b = {"x": 1, "y": {"z": [1, 3]}, "v": 0}
    assert record_identity.differences(a, b) == ["v", "w", "y.z[1]"]


def test_every_record_names_the_behaviour_digest_computed_once(tmp_path, monkeypatch):
    root = tmp_path / "tree"
    for name in ("scripts/trainbench/measure/steady.py", "scripts/trainbench/analysis/report.py"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text("X = 1\n")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    first = identity.code_identity("unknown", root=root)["behaviour"]
    assert re.fullmatch("[0-9a-f]{12}", first)
    cached = list((tmp_path / "tmp").glob(f"{behaviour.BEHAVIOUR_CACHE_PREFIX}*"))
    assert len(cached) == 1 and cached[0].read_text().strip() == first
    behaviour._behaviour_digest.cache_clear()
    cached[0].write_text("0123456789ab\n")  # the file cache answers: nothing recomputed
    assert identity.code_identity("unknown", root=root)["behaviour"] == "0123456789ab"
    (root / "scripts/trainbench/analysis/report.py").write_text("X = 2\n")  # analysis only
    source = identity.source_fingerprint(root)
    assert behaviour.behaviour_digest(root, source) == first
    (root / "scripts/trainbench/measure/steady.py").write_text("X = 2\n")
    changed = behaviour.behaviour_digest(root, identity.source_fingerprint(root))
    assert changed not in (first, "0123456789ab")


def test_the_measurement_code_lies_inside_the_source_the_cache_is_keyed_by():
    """The digest's file cache is keyed by the source fingerprint plus the named files
    outside it: every file a glob of MEASUREMENT_CODE finds must be in the source."""
    source = set(identity.source_files(REPO))
    for pattern in behaviour.MEASUREMENT_CODE:
        if "*" in pattern:
            found = {p.relative_to(REPO).as_posix() for p in REPO.glob(pattern)}
            found = {f for f in found if "__pycache__" not in f}
            assert found <= source, pattern


@pytest.mark.skipif(not os.access(tempfile.gettempdir(), os.W_OK), reason="no temp folder")
def test_the_launcher_record_carries_the_digest_in_its_code():
    code = identity.code_identity("unknown")
    source = identity.source_fingerprint(identity.PROJECT_ROOT)
    assert code["behaviour"] == behaviour.behaviour_digest(identity.PROJECT_ROOT, source)
    assert json.dumps(code)  # the record's environment.code stays plain JSON


def test_the_report_says_what_merging_dropped_split_and_left_out(tmp_path):
    from trainbench.analysis.report import render_report

    own = folder(tmp_path, "own", [record(0), record(1)])
    edited = record(1, rate=150.0)
    copy = folder(tmp_path, "copy", [record(0), edited])
    write(tmp_path, own, copy + copy, folders=[tmp_path / "copy"])
    tables = tmp_path / "tables"
    text = render_report(
        {"duplicates": tables / "duplicates.csv", "software": tables / "software.csv"},
        tmp_path / "report.md",
    )
    assert "**2 duplicate records dropped** (the same cell, repeat, run seed, code" in text
    assert "**1 conflict between record files**" in text and f"`{own[1]}`" in text
    assert "result.timed.samples_per_s" in text
    assert "Software of the merged records" not in text  # one software
