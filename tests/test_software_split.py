"""Merged records of different software are never pooled: another torch, other measuring
code (its behaviour digest) or another behaviour variable on one machine's device splits
it into labelled devices; Python, numpy or a source that behaves the same never splits,
and software.csv lists every difference with whether it split and why."""

from __future__ import annotations

import pandas as pd
import pytest
from test_cluster_hardware import EPYC, XEON
from test_cluster_hardware import record as machine_record
from trainbench.analysis import aggregate
from trainbench.analysis.report import render_report
from trainbench.analysis.stats import publish
from trainbench.analysis.stats.best_setting import backend_of
from trainbench.analysis.stats.frames import column_of, matches
from trainbench.common.records import write_record
from trainbench.config.device_ids import DeviceId

EPYC_SHORT = "AMD EPYC 7763 64-Core"


def record(rep=0, torch="2.13.0+cpu", behaviour="31d2e790aaaa", rate=100.0, cpu=EPYC,
           device="cpu", python="3.12.3", numpy="2.1.0", variables=None, source="a" * 64,
           start=None):  # fmt: skip
    rec = machine_record(device, host="box", cpu=cpu, cores=64, rate=rate, rep=rep)
    env = rec["environment"]
    env.update(torch_version=torch, python=python, packages={"numpy": numpy, "torch": torch})
    env["behaviour_variables"] = variables or {}
    env["code"] = {"source_sha256": source, "label": f"trainbench 0.1.0, source {source[:12]}"}
    if behaviour:
        env["code"]["behaviour"] = behaviour
    rec["attempts"][0]["started_unix"] = start if start is not None else 1.7e9 + rep + rate
    return rec


def tables(tmp_path, own, other):
    """Tables of ``own`` records (this run) and ``other`` ones (an included folder)."""
    paths, mine = [], set()
    for folder, recs in (("own", own), ("other", other)):
        for i, rec in enumerate(recs):
            path = tmp_path / folder / "runs" / f"r{i}" / "metrics.json"
            write_record(path, rec)
            paths.append(str(path))
            if folder == "own":
                mine.add(str(path))
    outputs = {n: str(tmp_path / f"{n}.csv") for n in ("runs", "software", "duplicates")}
    return aggregate.write_tables(
        paths, outputs, own=mine, include_results=[str(tmp_path / "other")]
    )


def test_two_torch_versions_on_one_machine_are_two_devices_never_pooled(tmp_path):
    old = [record(rep, torch="2.5.1", rate=50.0 + rep) for rep in range(3)]
    new = [record(rep, rate=100.0 + rep) for rep in range(3)]
    t = tables(tmp_path, new, old)
    runs = t["runs"]
    a, b = f"cpu@{EPYC_SHORT} · torch 2.13.0+cpu", f"cpu@{EPYC_SHORT} · torch 2.5.1"
    assert sorted(set(runs["device"])) == [a, b]
    assert set(runs["machine_device"]) == {f"cpu@{EPYC_SHORT}"}
    assert dict(zip(runs["device"], runs["software"], strict=True)) == {
        a: "torch 2.13.0+cpu",
        b: "torch 2.5.1",
    }
    assert set(runs["torch"]) == {"2.5.1", "2.13.0+cpu"}
    assert set(runs["measurement_code"]) == {"31d2e790aaaa"}
    folders = dict(zip(runs["device"], runs["results_folder"], strict=True))
    assert folders == {a: "", b: str(tmp_path / "other")}
    for label in (a, b):  # the labels keep parsing as device ids
        assert DeviceId.parse(label).hardware == label.split("@", 1)[1]
        assert column_of(label) == "cpu" and matches(label, "cpu")
        assert backend_of(label) == label
    published = publish(t, devices={})
    speed = published["speedup"].set_index("device")
    assert speed.loc[a, "median"] == 101.0 and speed.loc[b, "median"] == 51.0  # 3 runs each
    assert len(published["verdicts"]["device"].unique()) == 2
    (note,) = pd.read_csv(tmp_path / "software.csv").to_dict("records")
    assert note["field"] == "torch" and note["split"] == "split"
    assert note["values"] == "2.13.0+cpu (3 records); 2.5.1 (3 records)"
    assert pd.read_csv(tmp_path / "duplicates.csv").empty
    text = render_report({"software": tmp_path / "software.csv"}, tmp_path / "report.md")
    assert "- torch: 2.13.0+cpu (3 records); 2.5.1 (3 records); **split** (records of" in text


def test_a_fingerprint_difference_splits_python_and_numpy_do_not(tmp_path):
    own = [record(rep) for rep in range(2)]
    other = [
        record(0, behaviour="0123456789ab", python="3.11.9", numpy="1.26.4", source="b" * 64),
        record(1, python="3.11.9", numpy="1.26.4", source="c" * 64, rate=90.0),
    ]
    t = tables(tmp_path, own, other)
    assert set(t["runs"]["software"]) == {"code 31d2e790", "code 01234567"}
    notes = t["software"].set_index("field")
    assert notes.loc["measurement code", "split"] == "split"
    for field in ("python", "package numpy", "trainbench code"):
        assert notes.loc[field, "split"] == "did not split", field
    assert "does not decide speed" in notes.loc["python", "reason"]
    assert notes.loc["python", "values"] == "3.11.9 (2 records); 3.12.3 (2 records)"


def test_a_source_that_behaves_the_same_and_a_missing_digest_never_split(tmp_path):
    t = tables(
        tmp_path,
        [record(0), record(1, source="d" * 64)],
        [record(2, behaviour=None, source="e" * 64)],  # an older record: no digest
    )
    assert set(t["runs"]["device"]) == {"cpu"} and set(t["runs"]["software"]) == {""}
    (note,) = t["software"].to_dict("records")
    assert note["field"] == "trainbench code" and note["split"] == "did not split"
    assert "not record" in note["reason"]
    same = tables(tmp_path / "same", [record(0)], [record(1, source="d" * 64)])
    assert "behaviour digest is the same" in same["software"]["reason"].iloc[0]


def test_one_software_everywhere_gives_an_empty_notes_table(tmp_path):
    t = tables(tmp_path, [record(0), record(1)], [record(2)])
    assert t["software"].empty and list(t["software"].columns) == [
        "field",
        "values",
        "split",
        "reason",
    ]
    assert set(t["runs"]["device"]) == {"cpu"} and set(t["runs"]["machine_device"]) == {"cpu"}


def test_a_behaviour_variable_splits_and_names_the_split(tmp_path):
    t = tables(tmp_path, [record(0)], [record(1, variables={"ONEDNN_MAX_CPU_ISA": "AVX2"})])
    assert set(t["runs"]["software"]) == {
        "ONEDNN_MAX_CPU_ISA=AVX2",
        "ONEDNN_MAX_CPU_ISA=unset",
    }
    assert t["software"]["field"].tolist() == ["variable ONEDNN_MAX_CPU_ISA"]


def test_software_that_differs_only_between_machines_splits_nothing(tmp_path):
    """Hardware already keeps the two CPUs apart: the torch part is not added."""
    t = tables(tmp_path, [record(0, cpu=XEON)], [record(1, torch="2.5.1")])
    assert set(t["runs"]["device"]) == {f"cpu@{EPYC_SHORT}", "cpu@Intel Xeon Platinum 8480+"}
    assert set(t["runs"]["software"]) == {""}
    (note,) = t["software"].to_dict("records")
    assert note["split"] == "did not split" and "apart anyway" in note["reason"]


def test_with_hardware_split_the_software_part_follows_the_hardware_label(tmp_path):
    t = tables(
        tmp_path,
        [record(0, cpu=XEON), record(1)],
        [record(2, torch="2.5.1")],
    )
    assert set(t["runs"]["device"]) == {
        "cpu@Intel Xeon Platinum 8480+ · torch 2.13.0+cpu",
        f"cpu@{EPYC_SHORT} · torch 2.13.0+cpu",
        f"cpu@{EPYC_SHORT} · torch 2.5.1",
    }


@pytest.mark.parametrize("missing", ["torch_version", "code"])
def test_a_failed_cell_without_the_field_joins_its_folders_software(tmp_path, missing):
    failed = record(3, torch="2.5.1")
    failed["status"], failed["error"] = "failed", {"class": "signal"}
    del failed["result"]
    del failed["environment"][missing]
    t = tables(tmp_path, [record(0)], [record(1, torch="2.5.1"), failed])
    devices = dict(zip(t["runs"]["rep"], t["runs"]["device"], strict=True))
    assert devices[3] == devices[1] == f"cpu@{EPYC_SHORT} · torch 2.5.1"
