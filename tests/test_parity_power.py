"""The parity-power benchmark (benchmarks/parity_power.py): its plan and cell specs, the
report's parity rule applied to small fake runs (clean, benign, faulted columns), the
summary and Markdown, the workload code hash, and one tiny run end to end (slow).
Nothing here is timed: the benchmark's numbers live in benchmarks/results/."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import yaml
from helpers import REPO, tiny_config
from trainbench.analysis.stats.drift import pair_drift
from trainbench.bench import parity_analysis, parity_markdown, parity_power

STEPS = 32
REPEATS = 5
U32 = 2.0**-24
TINY_CNN = {
    "batch_sizes": [32], "epochs": 1, "warmup_steps": 1,
    "data": {"source": "synthetic", "n_train": 128, "n_test": 64, "image_size": 16},
}  # fmt: skip


def _config(tmp_path):
    config = tiny_config(workloads={"image_cnn": copy.deepcopy(TINY_CNN),
                                    "matmul": {"sizes": [16]}})  # fmt: skip
    config["report"] = {"parity_reference": {"steps": 4}}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_plan_and_cell_specs(tmp_path):
    config = parity_power.load_config(_config(tmp_path))
    assert config["workloads"].keys() == {"image_cnn"}  # training workloads only
    assert config["timing"]["max_eval_passes"] == 0  # no calibration passes
    chosen = parity_power.columns([0.03, 0.3])
    assert list(chosen)[:6] == ["baseline", "reference", "clean", "threads2", "avx2", "bf16"]
    assert [c for c in chosen if c.startswith("fault")] == ["fault3%", "fault30%"]
    jobs = parity_power.plan(config, chosen, repeats=REPEATS)
    assert len(jobs) == REPEATS * len(chosen)
    assert jobs[: len(chosen)] == [parity_power.Job("image_cnn", 32, c, 0) for c in chosen]

    def spec(column, rep=2):
        job = parity_power.Job("image_cnn", 32, column, rep)
        return parity_power.job_spec(config, job, chosen[column], None)

    base = spec("baseline")
    assert base["run_seed"] == 2 and base["device_settings"]["threads"] == 1
    assert base["faults"] == [] and base["device_settings"]["autocast"] == "off"
    assert spec("clean")["config_hash"] == base["config_hash"]  # the same cell again
    assert spec("threads2")["device_settings"]["threads"] == 2
    assert spec("avx2")["device_settings"]["env"] == {"ONEDNN_MAX_CPU_ISA": "AVX2"}
    assert spec("bf16")["device_settings"]["autocast"] == "bf16"
    fault = spec("fault3%")
    assert fault["faults"] == [{"workload": "image_cnn", "device": "cpu-t1",
                                "fault": "silent_numeric_error", "size": 0.03}]  # fmt: skip
    assert fault["run_seed"] == 2
    assert len({spec(c)["config_hash"] for c in chosen if c != "clean"}) == len(chosen) - 1
    ref = spec("reference")
    assert ref["reference"] == {"dtype": "float64", "steps": 4}
    assert ref["run_seed"] == 2 and ref["device_settings"]["threads"] == 1
    assert parity_power.plan(config, chosen, 3, only=["image_cnn:64"]) == []


# ----------------------------------------------------------------------------- fake runs

REF = {k: 2.3 * np.exp(-np.arange(STEPS) / 40) + 0.05 * np.random.default_rng(k).random(STEPS)
       for k in range(REPEATS)}  # fmt: skip


def _losses(rep: int, error: float, seed: int) -> list[float]:
    noise = np.random.default_rng(seed).standard_normal(STEPS)
    return list(REF[rep] * (1 + error * noise))


def _runs(column, error, metrics, losses, size=0.0, autocast=None, canary="pass",
          evaluation=("pass", 0.01)):  # fmt: skip
    rows = []
    for rep in range(REPEATS):
        seed = 1000 * rep + (hash(column) % 997)
        rows.append({
            "workload": "image_cnn", "batch_size": 32, "column": column, "rep": rep,
            "run_seed": rep, "status": "ok", "final_metric": metrics[rep],
            "final_loss": losses[rep], "primary_metric": "accuracy", "autocast_dtype": autocast,
            "numerics_status": canary, "record": f"{column}-rep{rep}.json", "seconds": 10.0,
            "losses": _losses(rep, error, seed if column != "clean" else 1000 * rep + 1),
            "eval_parity_status": evaluation[0], "eval_parity_error_ratio": evaluation[1],
            "eval_parity_metric_difference": 0.0,
        })  # fmt: skip
    return rows


def fake_results() -> dict:
    metrics = [0.90, 0.91, 0.92, 0.89, 0.905]
    losses = [1.00, 1.02, 0.98, 1.01, 0.99]
    runs = [{"workload": "image_cnn", "batch_size": 32, "column": "reference", "rep": rep,
             "run_seed": rep, "status": "ok", "loss_dtype": "float64", "batch_size_": 32,
             "record": f"reference-rep{rep}.json", "seconds": 3.0, "losses": list(REF[rep])}
            for rep in range(REPEATS)]  # fmt: skip
    for run in runs:
        run.pop("batch_size_")
    base = _runs("baseline", 3 * U32, metrics, losses)
    for r in base:  # the clean copy repeats the baseline's bits exactly
        r["losses"] = _losses(r["rep"], 3 * U32, 1000 * r["rep"] + 1)
    runs += base
    runs += _runs("clean", 3 * U32, metrics, losses)
    runs += _runs("threads2", 20 * U32, metrics, [x * 1.001 for x in losses])
    runs += _runs("bf16", 3e-3, metrics, losses, autocast="bfloat16")
    wrong = [0.5, 0.52, 0.48, 0.51, 0.49]
    runs += _runs("fault3%", 1e-2, wrong, [1.5] * 5, 0.03, canary="fail")
    # training exactly the baseline's; only the evaluation's outputs wrong
    runs += _runs("eval-fault1%", 3 * U32, metrics, losses, evaluation=("fail", 100.0))
    for r in runs[-REPEATS:]:
        r["losses"] = _losses(r["rep"], 3 * U32, 1000 * r["rep"] + 1)
    chosen = parity_power.columns([0.03])
    return {
        "config": {"parity": {}, "path": "c.yaml", "sha256": "ab" * 32,
                   "parity_reference": {"steps": STEPS}},
        "machine": {"cpu_model": "a CPU", "logical_cores": 2, "torch": "2.x"},
        "repeats": REPEATS,
        "columns": {n: {"kind": c.kind, "size": c.size, "describe": c.describe()}
                    for n, c in chosen.items() if n != "avx2"},
        "invocations": [{"command": "python benchmarks/parity_power.py", "commit": "abc",
                         "started": "2026-11-25 06:00:00 UTC", "finished": None,
                         "wall_seconds": 600.0}],
        "runs": runs,
    }  # fmt: skip


def test_analysis_of_fake_runs():
    results = parity_analysis.analyse(fake_results())
    found = {c["column"]: c for c in results["comparisons"]}
    assert list(found) == ["clean", "threads2", "bf16", "eval-fault1%", "fault3%"]
    clean = found["clean"]
    assert clean["all"]["parity"] == "identical" and clean["all"]["decided_by"] == "bit-identical"
    assert clean["subsets"] == {"subsets": 10, "size": 3, "outcomes": {"identical": 10},
                                "pair_drift_min": None, "pair_drift_max": None}  # fmt: skip
    assert clean["same_final"] == "5 of 5" and found["bf16"]["same_final"] == "5 of 5"
    for name in ("threads2", "bf16"):
        assert found[name]["all"]["parity"] == "pass", found[name]["all"]["rule"]
        assert found[name]["all"]["decided_by"] == "drift"
        assert found[name]["first3"]["parity"] == "pass"
    assert found["bf16"]["all"]["precision"] == "bfloat16"
    assert found["threads2"]["all"]["interval"].startswith("90% bootstrap")
    assert found["threads2"]["first3"]["pairs"] == 3
    fault = found["fault3%"]
    assert fault["all"]["parity"] == "fail" and "drift" in fault["all"]["decided_by"]
    assert fault["all"]["drift_low"] > 1 and fault["canary"] == "fail 5"
    assert fault["subsets"]["outcomes"] == {"fail": 10}
    total = results["summary"]
    assert total["clean_false_alarms"]["all"] == 0 and total["clean_identical"]["subsets"] == 10
    assert total["benign_passes"]["bf16"]["first3"] == 1
    assert total["detected"]["fault3%"] == {"cells": 1, "all": 1, "first3": 1, "subsets": 10,
                                            "subsets_total": 10}  # fmt: skip
    # every pair's own drift ratio, straight from the drift module: the summary's extremes
    runs = {(r["column"], r["rep"]): r["losses"] for r in results["runs"]}
    ratios = [pair_drift(runs["fault3%", k], runs["baseline", k], runs["reference", k],
                         "float32", 100.0).ratio for k in range(REPEATS)]  # fmt: skip
    extremes = total["pair_drift"]["fault3%"]
    assert extremes["min"] == pytest.approx(min(ratios))
    assert extremes["max"] == pytest.approx(max(ratios))
    assert extremes["min_cell"] == "image_cnn 32" and "clean" not in total["pair_drift"]
    evaluation = found["eval-fault1%"]
    assert evaluation["all"]["parity"] == "fail" and evaluation["all"]["decided_by"] == "eval"
    assert evaluation["first3"]["parity"] == "fail" and evaluation["same_final"] == "5 of 5"
    assert total["detected"]["eval-fault1%"]["all"] == 1
    assert results["cost"][0]["baseline_seconds"] == 10.0
    assert results["cost"][0]["reference_seconds"] == 3.0
    text = parity_markdown.render(results)
    assert "| image_cnn | 32 | fault3% | **fail** | fail | 10 fail (of 10) |" in text
    assert "`python benchmarks/parity_power.py` at commit `abc`" in text
    assert "- **Per-pair drift ratios**" in text and "fault3% " in text


def test_the_drift_window_sensitivity_cuts_the_losses():
    results = parity_analysis.analyse(fake_results(), sensitivity_steps=[8])
    (found,) = results["sensitivity"]
    assert found["steps"] == 8 and found["summary"]["detected"]["fault3%"]["all"] == 1
    assert {c["column"]: c["all"] for c in found["cells"]}["bf16"] == "pass"
    assert parity_analysis.truncated([{"losses": [1.0, 2.0, 3.0]}], 2) == [{"losses": [1.0, 2.0]}]
    text = parity_markdown.render(results)
    assert "| fault3%: fail (detected) | 1/1, 1/1, 10/10 | 1/1, 1/1, 10/10 |" in text


def test_a_benign_column_that_strays_fails_and_says_why():
    results = fake_results()
    for r in results["runs"]:
        if r["column"] == "threads2":  # far beyond 100x the baseline's float32 error
            r["losses"] = _losses(r["rep"], 1e-3, r["rep"])
    found = {c["column"]: c for c in parity_analysis.analyse(results)["comparisons"]}
    assert found["threads2"]["all"]["parity"] == "fail"
    assert found["threads2"]["all"]["decided_by"] == "drift"
    assert results["summary"]["benign_false_alarms"]["threads2"]["all"] == 1


def test_a_failed_run_leaves_fewer_pairs():
    results = fake_results()
    for r in results["runs"]:
        if r["column"] == "fault3%" and r["rep"] >= 2:
            r.update(status="failed", error_class="Timeout", error_message="900 s")
    found = {c["column"]: c for c in parity_analysis.analyse(results)["comparisons"]}
    fault = found["fault3%"]
    assert fault["ok_runs"] == 2 and fault["all"]["parity"] == "insufficient data"
    assert fault["errors"] == ["Timeout: 900 s"]
    # every 3 of the 5 seeds run, as a 3-repeat run would have met the failures
    assert fault["subsets"]["outcomes"] == {"insufficient data": 9, "no ok runs": 1}


def test_workload_code_hash_covers_the_modules_the_workload_imports(tmp_path):
    from trainbench.bench.provenance import workload_code_sha256

    (tmp_path / "mine.py").write_text("from .mine_model import Net\nfrom . import common\n")
    (tmp_path / "mine_model.py").write_text("from .layers import Block\n")
    for name in ("common", "layers", "unrelated"):
        (tmp_path / f"{name}.py").write_text("X = 1\n")
    before = workload_code_sha256(tmp_path / "mine.py")
    (tmp_path / "unrelated.py").write_text("X = 2\n")
    assert workload_code_sha256(tmp_path / "mine.py") == before
    for name in ("common", "layers"):  # imported directly, and through mine_model
        (tmp_path / f"{name}.py").write_text("X = 3\n")
        assert workload_code_sha256(tmp_path / "mine.py") != before
        before = workload_code_sha256(tmp_path / "mine.py")


@pytest.mark.slow
def test_tiny_benchmark_end_to_end(tmp_path):
    """Real cells through the launcher: the clean copy is bit-identical, a 30% fault
    fails the rule and its canary; the JSON and Markdown are written."""
    options = parity_power.Options(sizes=[0.3], repeats=3, columns=["baseline", "reference",
                                   "clean", "fault30%"], command="test")  # fmt: skip
    out = tmp_path / "parity-power.json"
    results = parity_power.run_benchmark(_config(tmp_path), out, tmp_path / "work", options,
                                         log=lambda line: None)  # fmt: skip
    found = {c["column"]: c for c in results["comparisons"]}
    assert found["clean"]["all"]["parity"] == "identical"
    assert found["fault30%"]["all"]["parity"] == "fail", found["fault30%"]["all"]["rule"]
    assert found["fault30%"]["canary"] == "fail 3"
    assert out.exists() and out.with_suffix(".md").read_text().startswith("# Parity")
    again = parity_power.rerender(out)
    assert again["summary"] == results["summary"]


def test_resume_drops_the_runs_of_a_workload_whose_code_or_settings_changed():
    from trainbench.bench.provenance import drop_changed_workloads

    runs = [{"workload": "a", "rep": 0}, {"workload": "b", "rep": 0}, {"workload": "b", "rep": 1}]
    old = {"config": {"workload_code_sha256": {"a": "1", "b": "2"},
                      "workloads": {"a": {"lr": 1}, "b": {"lr": 1}}}, "runs": runs}  # fmt: skip
    same = {
        "workload_code_sha256": {"a": "1", "b": "2"},
        "workloads": {"a": {"lr": 1}, "b": {"lr": 1}},
    }
    assert drop_changed_workloads(old, same) == (old, [])
    code = {**same, "workload_code_sha256": {"a": "1", "b": "3"}}
    kept, notes = drop_changed_workloads(old, code)
    assert kept["runs"] == runs[:1] and len(notes) == 1 and "2 earlier runs of b" in notes[0]
    settings = {**same, "workloads": {"a": {"lr": 2}, "b": {"lr": 1}}}
    kept, notes = drop_changed_workloads(old, settings)
    assert kept["runs"] == runs[1:] and "1 earlier runs of a" in notes[0]


def sweep_run(rep: int, error: float, floor: float, faulted: dict, precision: str = "bfloat16",
              autocast: str | None = "bfloat16") -> dict:  # fmt: skip
    """A run row of a column with an evaluation fault sweep: its clean output and, per
    size, the faulted one (relative RMSE, and the max-norm error the earlier rule read)."""

    def out(e: float, worst: float) -> list[dict]:
        return [
            {"path": "outputs", "elements": 4096, "error": e, "floor": floor, "max_error": worst}
        ]

    return {"workload": "w", "batch_size": 32, "column": "bf16", "rep": rep, "status": "ok",
            "autocast_dtype": autocast, "eval_parity_precision": precision,
            "eval_outputs": out(error, 2 * error),
            "eval_fault_sweep": [{"size": s, "outputs": out((error**2 + (s / 2) ** 2) ** 0.5, worst)}
                                 for s, worst in faulted.items()]}  # fmt: skip


def test_the_eval_power_finds_the_smallest_fault_caught_in_every_repeat():
    from trainbench.bench import eval_power

    floor = 2e-7  # bfloat16 envelope at m = 1.1: 1.1 * 2**16 * 2e-7 + 2**-8 = 0.0183
    faulted = {0.01: 0.01, 0.03: 0.03, 0.05: 0.049, 0.08: 0.079}  # max-norm ~ ε: 5e-2 catches at 8%
    runs = [sweep_run(k, 3e-3, floor, faulted) for k in range(3)]
    (found,) = eval_power.eval_power(runs)
    assert found["repeats"] == 3 and found["precision"] == "bfloat16"
    chosen = found["allowances"]["m"]
    assert chosen["false_alarms"] == 0 and chosen["clean_ratio"] == pytest.approx(
        3e-3 / 0.0183, rel=0.01
    )
    assert chosen["smallest_caught"] == 0.05  # ε/2 = 2.5% > 1.83%; 3% gives 1.5%: not caught
    assert found["allowances"]["m × 0.5"]["smallest_caught"] == 0.03
    assert found["earlier"] == {"false_alarms": 0, "smallest_caught": 0.08}
    # one repeat that misses a size: that size is not caught in every repeat
    runs[1]["eval_fault_sweep"][2]["outputs"][0]["error"] = 0.01
    assert eval_power.eval_power(runs)[0]["allowances"]["m"]["smallest_caught"] == 0.08
    text = "\n".join(eval_power.markdown(eval_power.eval_power(runs)))
    assert "| w | 32 | bf16 | bfloat16 | 3 |" in text and "8% (bfloat16 tolerance)" in text


def test_a_sweep_column_asks_its_cells_for_the_sweep(tmp_path):
    from trainbench.bench.false_alarm import CPU_COLUMNS, CUDA_COLUMNS

    config = parity_power.load_config(_config(tmp_path))
    sweeping = {c.name: c for c in CPU_COLUMNS}["bf16"]
    spec = parity_power.job_spec(
        config, parity_power.Job("image_cnn", 32, "bf16", 0), sweeping, None
    )
    assert spec["eval_fault_sizes"] == list(parity_power.EVAL_SWEEP) and spec["faults"] == []
    clean = {c.name: c for c in CPU_COLUMNS}["clean"]
    spec = parity_power.job_spec(config, parity_power.Job("image_cnn", 32, "clean", 0), clean, None)
    assert "eval_fault_sizes" not in spec
    assert all(c.eval_sweep for c in CUDA_COLUMNS)


def test_the_entry_script_hands_each_option_to_its_own_field(tmp_path, monkeypatch):
    """benchmarks/parity_power.py once passed ``--only`` as the extra columns (positional
    arguments shifted by a new field): every option by name."""
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location(
        "pp_entry", REPO / "benchmarks" / "parity_power.py"
    )
    entry = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(entry)
    seen = {}

    def fake(config, out, workdir, options):
        seen["options"] = options
        return {}

    monkeypatch.setattr(entry.pp, "run_benchmark", fake)
    monkeypatch.setattr(entry.parity_markdown, "render", lambda results: "")
    argv = ["parity_power.py", "--only", "image_cnn", "--columns", "baseline", "fault3%",
            "--repeats", "3", "--workers", "2", "--resume", "--out", str(tmp_path / "x.json"),
            "--workdir", str(tmp_path)]  # fmt: skip
    monkeypatch.setattr(sys, "argv", argv)
    assert entry.main() == 0
    options = seen["options"]
    assert options.only == ["image_cnn"] and options.columns == ["baseline", "fault3%"]
    assert options.extra_columns == () and options.repeats == 3 and options.workers == 2
    assert options.resume is True
