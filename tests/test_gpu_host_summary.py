"""The GPU-host sweep's results file, from constructed run tables: comparisons reached
and withheld, agreement between two runs, injected disturbance counts, rounds."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from trainbench.bench import disturbance, gpu_host
from trainbench.bench.gpu_host_noise import pairs


def _run(folder: Path, verdicts: dict, shares=(0.01, 0.02, 0.03), overall=None) -> Path:
    tables = folder / "tables"
    tables.mkdir(parents=True)
    rows = [{"workload": w, "batch_size": 32, "device": "cpu", "baseline": "cpu",
             "verdict": "baseline", "reason": "", "speedup": None, "speedup_low": None,
             "speedup_high": None} for w in verdicts]  # fmt: skip
    for w, (verdict, speedup) in verdicts.items():
        rows.append({"workload": w, "batch_size": 32, "device": "cuda", "baseline": "cpu",
                     "verdict": verdict, "reason": "why", "speedup": speedup,
                     "speedup_low": speedup * 0.9, "speedup_high": speedup * 1.1})  # fmt: skip
    pd.DataFrame(rows).to_csv(tables / "speedup.csv", index=False)
    overall = [{"workload": w, "device": d, "status": "baseline" if d == "cpu" else status,
                "first_failing": "" if d == "cpu" else why}
               for w, (status, why) in (overall or {}).items() for d in ("cpu", "cuda")]  # fmt: skip
    columns = ["workload", "device", "status", "first_failing"]
    pd.DataFrame(overall, columns=columns).to_csv(tables / "verdicts.csv", index=False)
    runs = [{"workload": "cnn", "device": "cuda", "batch_size": 32, "rep": rep,
             "backend": "cuda", "status": "ok", "samples_per_s": 100.0 * (1 - 0.1 * rep),
             "other_cpu_cores": 0.1 * (rep + 1), "cell_cpu_others_share": share,
             "disturbed": False}
            for rep, share in enumerate(shares)]  # fmt: skip
    pd.DataFrame(runs).to_csv(tables / "runs.csv", index=False)
    for rep in range(len(shares)):  # the records: the busiest other processes
        others = [{"name": "snakemake", "pid": 7, "cpu_seconds": 0.2 * (rep + 1)},
                  {"name": "kworker", "pid": 9, "cpu_seconds": 0.1}]  # fmt: skip
        record = folder / "runs" / "cnn" / "cuda" / "bs32" / f"rep{rep}" / "metrics.json"
        record.parent.mkdir(parents=True)
        host = {"span_seconds": 2.0, "busiest_others": others}
        record.write_text(json.dumps({"result": {"host": host}}))
    return folder


def test_reached_withheld_and_agreement(tmp_path):
    overall = {"cnn": ("working", ""), "mlp": ("insufficient data", "parity insufficient data")}
    one = gpu_host.run_summary(
        _run(tmp_path / "a", {"cnn": ("faster", 10.0), "mlp": ("disturbed", 3.0)}, overall=overall)
    )
    two = gpu_host.run_summary(
        _run(tmp_path / "b", {"cnn": ("faster", 11.5), "mlp": ("faster", 3.0)})
    )
    assert (one["comparisons"], one["reached"]) == (2, 1)
    assert one["withheld"] == [
        {"workload": "mlp", "device": "cuda", "batch_size": 32, "reason": "disturbed: why"}
    ]
    agreed = gpu_host.agreement(one, two)
    assert agreed["same_verdicts"] is False
    assert agreed["differing_verdicts"] == [["mlp", "cuda", 32]]
    assert agreed["max_median_difference"] == pytest.approx(0.15)
    assert agreed["max_median_difference_at"] == ["cnn", "cuda", 32]
    assert one["overall"] == [
        {"workload": "cnn", "device": "cuda", "status": "working", "decided_by": ""},
        {"workload": "mlp", "device": "cuda", "status": "insufficient data",
         "decided_by": "parity insufficient data"},
    ]  # fmt: skip
    assert two["overall"] == []
    assert [r["round"] for r in one["rounds"]] == [0, 1, 2]
    assert one["rounds"][2]["other_cpu_cores_machine"] == [0.3, 0.3]
    # each cell's throughput over its own first round's; the busiest other process by name
    assert [r["throughput_vs_round_0"] for r in one["rounds"]] == [1.0, 0.9, 0.8]
    assert one["rounds"][2]["busiest_other_process"] == "snakemake"
    # a cell's repeats spread from 100 to 80 samples/s: 25%
    assert one["repeat_spread"] == [
        {"backend": "cuda", "cells": 1, "median": 0.25, "max": 0.25, "max_at": ["cnn", "cuda", 32]}
    ]
    assert one["rounds"][2]["busiest_other_process_cores"] == [0.3, 0.3]
    assert "| snakemake: 0.30–0.30 | 0.80 | 0 |" in gpu_host.markdown(
        {"made_at": "now", "how": "", "runs": [one], "agreement": None, "injected": []}
    )
    assert "mlp cuda bs 32 (disturbed: why)" in gpu_host.markdown(
        {"made_at": "now", "how": "", "runs": [one, two], "agreement": agreed, "injected": []}
    )
    # the same records with float64 references made afterwards: listed beside
    one["overall_with_references"] = {"results": "results/ref", "verdicts": one["overall"]}
    text = gpu_host.markdown(
        {"made_at": "now", "how": "", "runs": [one, two], "agreement": agreed, "injected": []}
    )
    assert "| 1 | `results/ref` | mlp | cuda | insufficient data | parity insufficient" in text


def test_intervals_overlap_and_every_later_pair(tmp_path):
    """Each comparison's interval (here ±10% of its speedup) meets the other run's or
    not; a third run is compared with each of the declared pair's runs."""
    runs = [
        gpu_host.run_summary(_run(tmp_path / name, {"cnn": ("faster", speedup)}))
        for name, speedup in (("a", 10.0), ("b", 11.5), ("c", 14.0))
    ]
    assert gpu_host.agreement(runs[0], runs[1])["intervals_overlap"] is True  # 9–11, 10.35–12.65
    pairs_ = gpu_host.other_pairs(runs)
    assert [p["runs"] for p in pairs_] == [[1, 3], [2, 3]]
    assert pairs_[0]["intervals_overlap"] is False  # 9–11 against 12.6–15.4
    assert pairs_[0]["intervals_apart"] == [["cnn", "cuda", 32]]
    assert pairs_[1]["intervals_overlap"] is True  # 10.35–12.65 against 12.6–15.4
    assert pairs_[0]["max_median_difference"] == pytest.approx(0.4)
    text = gpu_host.markdown({"made_at": "now", "how": "", "runs": runs, "injected": [],
                              "agreement": gpu_host.agreement(runs[0], runs[1]),
                              "agreement_other_pairs": pairs_})  # fmt: skip
    assert "| cnn | cuda | 32 | faster 10× (9–11) | faster 11.5× (10.3–12.7) | faster 14×" in text
    assert "agreement of runs 1 and 3: the same speed verdicts in both: yes" in text
    assert "every comparison's intervals overlap: no (cnn cuda bs 32)" in text
    # every pair of the pooled runs, judged as the declared pair is
    # (a, b: 15.00%, within; a, c: 40%; b, c: 21.7%)
    seen = gpu_host.observed_agreement([tmp_path / n for n in "abc"])
    assert seen == {"tolerance": 0.15, "pairs": 3, "within_tolerance": 1, "same_verdicts": 3,
                    "intervals_overlap": 2}  # fmt: skip
    out = {"made_at": "now", "how": "", "runs": runs, "injected": [], "agreement": None,
           "agreement_chance": [
               {"tolerance": 0.15, "draws": 4, "pooled_from": ["a"],
                "chance_by_repeats": {"3": 0.5, "21": 0.9},
                "round_cell_seconds": {"a": 100.0, "b": 120.5, "c": None}},
               {"tolerance": 0.15, "draws": 4, "pooled_from": ["b"],
                "chance_by_repeats": {"3": 0.25}}],
           "observed_agreement": [seen, {**seen, "pairs": 0, "within_tolerance": 0}]}  # fmt: skip
    text = gpu_host.markdown(out)
    assert "3 pairs, each judged as runs 1 and 2 are: every speedup median within 15% in 1," in text
    assert "0 pairs, each judged as runs 1 and 2 are: every speedup median within 15% in 0," in text
    assert "from the repeats of `a` (two runs" in text and "50% at 3, 90% at 21 repeats" in text
    assert "from the repeats of `b` (two runs" in text and "25% at 3 repeats" in text
    # the cost of a round, from the runs that recorded it
    assert "aggregation apart): 100–120.5 s in these runs" in text
    # an interval without finite ends meets nothing
    assert gpu_host._overlap([float("nan"), 2.0], [1.0, 3.0]) is False
    assert gpu_host._overlap(None, [1.0, 3.0]) is False


def test_injected_counts_per_condition_and_device():
    rows = [
        {"condition": "quiet", "device": "cuda", "status": "ok", "flagged": False},
        {"condition": "hog_cell_cpus", "device": "cuda", "status": "ok", "flagged": True},
        {"condition": "hog_cell_cpus", "device": "cuda", "status": "ok", "flagged": True},
        {"condition": "hog_cell_cpus", "device": "cuda", "status": "failed", "flagged": False},
    ]
    summary = disturbance.summarize(rows)
    assert summary == {
        "quiet": {"cuda": {"cells": 1, "flagged": 0}},
        "hog_cell_cpus": {"cuda": {"cells": 2, "flagged": 2}},
    }
    machine = "16 logical CPUs, NVIDIA H200"
    later = {"summary": {"quiet": {"cuda": {"cells": 2, "flagged": 0}}}, "machine": machine}
    other = {"summary": {"quiet": {"cuda": {"cells": 4, "flagged": 1}}}, "machine": "2 CPUs"}
    assert gpu_host.injected([{"summary": summary, "machine": machine}, later, other]) == [
        {"kind": "quiet", "device": "cuda", "machine": machine, "cells": 3, "flagged": 0},
        {"kind": "hog_cell_cpus", "device": "cuda", "machine": machine, "cells": 2, "flagged": 2},
        {"kind": "quiet", "device": "cuda", "machine": "2 CPUs", "cells": 4, "flagged": 1},
    ]


def test_rows_read_back_from_printed_lines():
    """A run stopped before it wrote its file: its printed lines give each cell back."""
    rows = [
        {"condition": "quiet", "device": "cuda", "rep": 0, "status": "ok", "error": None,
         "flagged": False, "reason": None, "cell_cpu_others_share": 0.0021},
        {"condition": "hog_all_cpus", "device": "cpu-t1", "rep": 1, "status": "ok",
         "error": None, "flagged": True, "cell_cpu_others_share": 0.499,
         "reason": "others used 50% of the time of the 1 core the cell uses (CPU 15; limit 10%)"},
        {"condition": "gpu_neighbour", "device": "cuda", "rep": 0, "status": "failed",
         "error": "the GPU load did not start", "flagged": False, "reason": None,
         "cell_cpu_others_share": None},
    ]  # fmt: skip
    log = "\n".join(["a line that is not a cell", *map(disturbance.line, rows), "Traceback"])
    back = disturbance.rows_from_log(log)
    assert [(r["condition"], r["device"], r["rep"], r["status"], r["flagged"]) for r in back] == [
        (r["condition"], r["device"], r["rep"], r["status"], r["flagged"]) for r in rows
    ]
    assert [r["cell_cpu_others_share"] for r in back] == [0.002, 0.499, None]
    assert [(r["reason"], r["error"]) for r in back] == [(r["reason"], r["error"]) for r in rows]
    assert disturbance.summarize(back) == {
        "quiet": {"cuda": {"cells": 1, "flagged": 0}},
        "hog_all_cpus": {"cpu-t1": {"cells": 1, "flagged": 1}},
    }


def test_pairs_time_apart_and_alike(tmp_path):
    """A comparison's two sides per round: started 7 s apart, and the host's change of
    a round (+10%, 0, -10%) reaching both alike: correlation 1."""
    tables = tmp_path / "tables"
    tables.mkdir()
    rows = []
    for w, base in (("cnn", 100.0), ("mlp", 50.0)):
        for rep, host in enumerate((1.1, 1.0, 0.9)):
            start = 1000.0 * rep + (0 if w == "cnn" else 100)
            rows += [
                {"workload": w, "device": "cpu", "backend": "cpu", "batch_size": 32, "rep": rep,
                 "status": "ok", "samples_per_s": base * host, "started_unix": start},
                {"workload": w, "device": "cuda", "backend": "cuda", "batch_size": 32,
                 "rep": rep, "status": "ok", "samples_per_s": 20 * base * host,
                 "started_unix": start + 7.0},
            ]  # fmt: skip
    pd.DataFrame(rows).to_csv(tables / "runs.csv", index=False)
    assert pairs(tmp_path) == {
        "pairs": 6,
        "median_gap_seconds": 7.0,
        "deviation_correlation": 1.0,
    }
    # the cuda side moving against the cpu side: -1
    for row in rows:
        if row["backend"] == "cuda":
            row["samples_per_s"] = 2000.0 / row["samples_per_s"] * 100
    pd.DataFrame(rows).to_csv(tables / "runs.csv", index=False)
    assert pairs(tmp_path)["deviation_correlation"] == -1.0
