"""The GPU-host sweep's results file, from constructed run tables: comparisons reached
and withheld, agreement between two runs, injected disturbance counts, rounds."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from trainbench.bench import disturbance, gpu_host


def _run(folder: Path, verdicts: dict, shares=(0.01, 0.02, 0.03)) -> Path:
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
    runs = [{"rep": rep, "backend": "cuda", "status": "ok", "other_cpu_cores": 0.1 * (rep + 1),
             "cell_cpu_others_share": share, "disturbed": False}
            for rep, share in enumerate(shares)]  # fmt: skip
    pd.DataFrame(runs).to_csv(tables / "runs.csv", index=False)
    return folder


def test_reached_withheld_and_agreement(tmp_path):
    one = gpu_host.run_summary(
        _run(tmp_path / "a", {"cnn": ("faster", 10.0), "mlp": ("disturbed", 3.0)})
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
    assert [r["round"] for r in one["rounds"]] == [0, 1, 2]
    assert one["rounds"][2]["other_cpu_cores_machine"] == [0.3, 0.3]
    assert "mlp cuda bs 32 (disturbed: why)" in gpu_host.markdown(
        {"made_at": "now", "how": "", "runs": [one, two], "agreement": agreed, "injected": []}
    )


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
    assert gpu_host.injected({"summary": summary}) == [
        {"kind": "quiet", "device": "cuda", "cells": 1, "flagged": 0},
        {"kind": "hog_cell_cpus", "device": "cuda", "cells": 2, "flagged": 2},
    ]
