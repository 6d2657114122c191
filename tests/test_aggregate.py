"""Records -> record tables -> published tables: numbers recomputed independently
from the JSON, merged machines kept apart, bad files named (or skipped when the
config says so)."""

from __future__ import annotations

import json
import statistics
import tarfile
from collections import defaultdict
from pathlib import Path

import pandas as pd
import pytest
from trainbench.analysis import aggregate
from trainbench.analysis.stats import publish
from trainbench.common.records import RecordError, write_record

REPO = Path(__file__).resolve().parents[1]
# Real records of every workload on two CPU thread counts, written by the workflow
# (tests/data/make_cpu_records.sh rebuilds them when what a record holds changes).
REAL_RECORDS = REPO / "tests" / "data" / "cpu-records.tgz"


def record(workload="image_cnn", device="cpu", bs=32, rep=0, host="a", rate=100.0, status="ok"):
    base = {
        "schema_version": 2,
        "status": status,
        "cell": {"workload": workload, "device": device, "batch_size": bs, "rep": rep},
        "backend": device.split("-")[0],
        "attempts": [{"attempt": 1, "status": status}],
        "environment": {"host": host, "torch_version": "2.13.0"},
        "spec": {},
    }
    if status == "ok":
        base["result"] = {
            "kind": "training",
            "timed": {"samples": rate * 10, "seconds": 10.0, "samples_per_s": rate},
            "host": {"other_cpu_cores": 0.0, "disturbed": False},
            "epochs": [],
            "task": {"primary_metric": "accuracy", "final": 0.9},
        }
    elif status == "unavailable":
        base["reason"] = "absent"
    else:
        base["error"] = {"class": "signal"}
    return base


def write(tmp_path, name, rec) -> str:
    path = tmp_path / name / "metrics.json"
    write_record(path, rec)
    return str(path)


@pytest.fixture
def real_records(tmp_path):
    with tarfile.open(REAL_RECORDS) as tar:
        tar.extractall(tmp_path, filter="data")
    paths = sorted((tmp_path / "runs").rglob("metrics.json"))
    assert paths, "tests/data/cpu-records.tgz holds no records"
    return paths


def test_tables_recomputed_independently_from_the_json(real_records):
    """Every median and speedup of the published tables, recomputed by hand from the
    records' windows (samples / seconds of the steady-state window, warm evaluation)."""
    records, skipped = aggregate.load_records(real_records)
    assert not skipped
    tables = aggregate.build_tables(records)
    published = publish(tables, devices={})

    rates, evals = defaultdict(list), defaultdict(list)
    for path in real_records:
        raw = json.loads(Path(path).read_text())
        if raw["status"] != "ok" or raw["result"]["kind"] != "training":
            continue
        result = raw["result"]
        flat = [s for epoch in result["steps"]["seconds"] for s in epoch]
        start = result["steady_state"]["start_step"]
        timed = result["timed"]
        assert timed["seconds"] == pytest.approx(sum(flat[start:]))
        # stalls above timing.max_stall_share are left out (a record before the rule: none)
        stalls = timed.get("stalls") or {"excluded": False}
        out = (
            (stalls["over_limit_samples"], stalls["over_limit_seconds"])
            if stalls["excluded"]
            else (0, 0.0)
        )
        rate = (timed["samples"] - out[0]) / (timed["seconds"] - out[1])
        assert timed["samples_per_s"] == pytest.approx(rate)
        key = (raw["cell"]["workload"], raw["cell"]["device"], raw["cell"]["batch_size"])
        rates[key].append(rate)
        warm = [p for p in result["eval"]["passes"] if not p["cold"]]
        evals[key].append(sum(p["samples"] for p in warm) / sum(p["seconds"] for p in warm))
    speedup = published["speedup"]
    assert len(speedup) == len(rates)
    for row in speedup.itertuples():
        key = (row.workload, row.device, row.batch_size)
        assert row.median == pytest.approx(statistics.median(rates[key]))
        base = statistics.median(rates[(row.workload, row.baseline, row.batch_size)])
        assert row.speedup == pytest.approx(statistics.median(rates[key]) / base)
    for row in published["eval_speed"].itertuples():
        key = (row.workload, row.device, row.batch_size)
        assert row.median == pytest.approx(statistics.median(evals[key]), rel=1e-9)

    by_cell = defaultdict(list)
    for path in real_records:
        raw = json.loads(Path(path).read_text())
        if raw["status"] == "ok" and raw["result"]["kind"] == "microbenchmark":
            for size in raw["result"]["sizes"]:
                assert size["gflops"] == pytest.approx(2 * size["n"] ** 3 / size["median_s"] / 1e9)
                by_cell[(raw["cell"]["device"], size["n"])].append(size["median_s"])
    for row in published["matmul_summary"].itertuples():
        assert row.median_s == pytest.approx(statistics.median(by_cell[(row.device, row.n)]))
        assert row.speedup == pytest.approx(
            statistics.median(by_cell[(row.baseline, row.n)])
            / statistics.median(by_cell[(row.device, row.n)])
        )


def test_records_of_several_hosts_are_never_averaged_together(tmp_path):
    paths = [
        write(tmp_path, "a0", record(host="linux-box", rate=100.0)),
        write(tmp_path, "a1", record(host="linux-box", rep=1, rate=110.0)),
        write(tmp_path, "b0", record(host="mac-mini", rate=50.0)),
        write(tmp_path, "b1", record(device="mps", host="mac-mini", rate=300.0)),
    ]
    records, _ = aggregate.load_records(paths)
    tables = aggregate.build_tables(records)
    assert set(tables["runs"]["device"]) == {"cpu@linux-box", "cpu@mac-mini", "mps@mac-mini"}
    summary = publish(tables, devices={}, baseline="cpu@mac-mini")["speedup"]
    medians = dict(zip(summary["device"], summary["median"], strict=True))
    assert medians == {"cpu@linux-box": 105.0, "cpu@mac-mini": 50.0, "mps@mac-mini": 300.0}
    assert summary.set_index("device").loc["mps@mac-mini", "speedup"] == pytest.approx(6.0)


def test_one_host_keeps_plain_device_names(tmp_path):
    paths = [
        write(tmp_path, "a", record()),
        write(tmp_path, "b", record(device="cuda", status="unavailable")),
    ]
    records, _ = aggregate.load_records(paths)
    assert set(aggregate.build_tables(records)["runs"]["device"]) == {"cpu", "cuda"}


@pytest.mark.parametrize(
    "content, fragment",
    [
        ('{"schema_version": 2, "status": "ok", "cell": {', "not valid JSON"),
        ("[1, 2, 3]", "not a trainbench metrics record"),
        (json.dumps(record() | {"schema_version": 7}), "schema_version 7"),
    ],
)
def test_bad_record_stops_aggregation_naming_the_file(tmp_path, content, fragment):
    good = write(tmp_path, "good", record())
    bad = tmp_path / "bad" / "metrics.json"
    bad.parent.mkdir()
    bad.write_text(content)
    outputs = {
        name: str(tmp_path / f"{name}.csv")
        for name in ("runs", "matmul", "epochs", "per_label_runs", "environments", "skipped")
    }
    with pytest.raises(RecordError, match=fragment) as info:
        aggregate.write_tables([good, str(bad)], outputs)
    assert str(bad) in str(info.value)
    assert not Path(outputs["runs"]).exists()  # nothing half-written

    tables = aggregate.write_tables([good, str(bad)], outputs, skip_invalid=True)
    assert len(tables["runs"]) == 1
    skipped = pd.read_csv(outputs["skipped"])
    assert skipped["record"].tolist() == [str(bad)]
    assert fragment in skipped["reason"].iloc[0]


def test_records_of_different_setups_are_split_never_compared(tmp_path):
    """An MNIST run merged with a synthetic-image run: two workloads, and the reason."""
    mnist = record(host="mac", rate=100.0) | {
        "spec": {"seed": 0, "workload_settings": {"data": {"source": "mnist_idx"}}}
    }
    synthetic = record(device="cuda", host="h200", rate=900.0) | {
        "spec": {"seed": 0, "workload_settings": {"data": {"source": "synthetic"}}}
    }
    paths = [write(tmp_path, "a", mnist), write(tmp_path, "b", synthetic)]
    records, _ = aggregate.load_records(paths)
    tables = aggregate.build_tables(records, own={paths[0]})
    names = dict(zip(tables["runs"]["device"], tables["runs"]["workload"], strict=True))
    assert names["cpu"] == "image_cnn"  # this run's own setup keeps the name
    assert names["cuda"] == "image_cnn [data.source=synthetic]"
    (note,) = tables["setups"].to_dict("records")
    assert note["setups"] == 2 and "never compared" in note["reason"]
    published = publish(tables, devices={})
    assert published["speedup"]["speedup"].dropna().tolist() == [1.0, 1.0]  # no cross ratio
    kinds = published["warnings"]["kind"].tolist()
    assert "split setups" in kinds
