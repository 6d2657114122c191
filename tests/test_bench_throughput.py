"""The throughput benchmark's logic (benchmarks/throughput.py): suite checks, paired
ratios, target checks and the Markdown, and one tiny real run on the CPU. No speed
is asserted here: the targets live in benchmarks/results, never in tests."""

from __future__ import annotations

import importlib.util
import json

import pytest
import yaml
from trainbench.bench.throughput_report import render_markdown
from trainbench.bench.throughput_run import run_suite
from trainbench.bench.throughput_suite import SuiteError, Variant, load_suite
from trainbench.bench.throughput_summary import summarize, target_checks


def write_suite(tmp_path, suite: dict):
    path = tmp_path / "suite.yaml"
    path.write_text(yaml.safe_dump(suite))
    return path


TINY_CNN = {
    "epochs": 2,
    "warmup_steps": 2,
    "max_steps_per_epoch": 4,
    "data": {"source": "synthetic", "n_train": 128, "n_test": 16, "image_size": 16},
}


@pytest.mark.parametrize(
    ("text", "runner", "mode"),
    [
        ("harness", "harness", None),
        ("bare:compile", "bare", "default"),
        ("harness:compile-reduce-overhead", "harness", "reduce-overhead"),
        ("hf_trainer", "hf_trainer", None),
    ],
)
def test_variant_grammar(text, runner, mode):
    variant = Variant.parse(text)
    assert (variant.runner, variant.compile, variant.name) == (runner, mode, text)


@pytest.mark.parametrize("bad", ["trainer", "hf_trainer:compile", "bare:fast", "bare:compile-x"])
def test_bad_variants_are_refused(bad):
    with pytest.raises(SuiteError, match="variant"):
        Variant.parse(bad)


def test_a_named_variant_carries_its_device_settings():
    variant = Variant.parse(
        {"name": "harness:no-stage", "variant": "harness", "device_settings": {"num_workers": 2}}
    )
    assert variant.name == "harness:no-stage" and dict(variant.device_settings) == {
        "num_workers": 2
    }


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"device": "tpu"}, "`device` must be one of"),
        ({"cases": {"matmul": {}}}, "not a training workload"),
        (
            {
                "cases": {
                    "image_cnn": {"batch_sizes": [8], "variants": ["hf_trainer"], "settings": {}}
                }
            },
            "hf_trainer runs text_multilabel only",
        ),
        (
            {
                "cases": {
                    "image_cnn": {
                        "batch_sizes": [8],
                        "variants": ["bare"],
                        "settings": {"gradient_accumulation": 2},
                    }
                }
            },
            "gradient_accumulation",
        ),
    ],
)
def test_suite_problems_name_the_key(tmp_path, change, message):
    suite = {"name": "t", "device": "cpu", "cases": {}}
    suite.update(change)
    with pytest.raises(SuiteError, match=message):
        load_suite(write_suite(tmp_path, suite))


def measurement(variant, rnd, sps, **extra):
    return {
        "workload": "w",
        "batch_size": 8,
        "variant": variant,
        "round": rnd,
        "status": "ok",
        "samples_per_s": sps,
        **extra,
    }


def test_ratios_are_paired_per_round_and_the_median_taken():
    # Round 1 ran on a slower machine state: both variants dropped; paired ratios see 1.0.
    rows = summarize(
        [
            measurement("bare", 0, 100.0),
            measurement("harness", 0, 99.0, event_s=1.01, wall_s=1.0),
            measurement("bare", 1, 50.0),
            measurement("harness", 1, 50.0, event_s=0.99, wall_s=1.0),
            measurement("bare", 2, 100.0),
            measurement("harness", 2, 101.0, event_s=1.0, wall_s=1.0),
            {**measurement("harness", -1, 10.0), "status": "process_warmup"},
        ]
    )
    harness = next(r for r in rows if r["variant"] == "harness")
    assert harness["over_bare"] == pytest.approx(1.0)  # median of 0.99, 1.0, 1.01
    assert [harness["over_bare_low"], harness["over_bare_high"]] == pytest.approx([0.99, 1.01])
    assert harness["over_bare_interval"] == "range of 3 paired rounds"
    assert harness["over_bare_of_medians"] == pytest.approx(99.0 / 100.0)
    assert harness["rounds_ok"] == 3  # the process warm-up run is not a round
    assert harness["event_vs_wall_max_abs"] == pytest.approx(0.01)


def test_targets_and_markdown_come_from_the_results():
    measurements = [
        measurement("bare", 0, 100.0),
        measurement("harness", 0, 97.0, event_s=1.03, wall_s=1.0),
        measurement("hf_trainer", 0, 80.0),
    ]
    measurements = [{**m, "batch_size": 64} for m in measurements]
    results = {
        "suite": "t",
        "date": "today",
        "device": "cuda",
        "rounds": 1,
        "machine": {
            "cpu_model": "cpu",
            "logical_cores": 2,
            "torch_threads": 2,
            "python": "3",
            "torch": "2",
        },
        "measurements": measurements
        + [{**measurements[0], "variant": "bare", "round": 1, "status": "failed", "error": "boom"}],
    }
    results["summary"] = summarize(results["measurements"])
    checks = {c["target"].split(" ")[2]: c for c in target_checks(results)}
    # one round: a range of one paired ratio is the ratio itself, below the target
    assert checks["bare"]["value"] == pytest.approx(0.97) and checks["bare"]["met"] == "missed"
    assert checks["HF"]["value"] == pytest.approx(97 / 80) and checks["HF"]["met"] == "met"
    timing = next(c for c in target_checks(results) if "CUDA events" in c["target"])
    assert timing["value"] == pytest.approx(0.03) and timing["met"] == "missed"
    text = render_markdown(results)
    assert "| 0.970 (0.970–0.970) |" in text and "**missed**" in text
    assert "boom" in text  # failed measurements are listed, not dropped


@pytest.mark.parametrize(
    "rounds, verdict",
    [
        ([0.99, 1.00, 1.01], "met"),  # every round at or above 0.98
        ([0.86, 0.95, 1.02], "not resolved"),  # the rounds span the target
        ([0.90, 0.93, 0.95], "missed"),  # every round below
    ],
)
def test_a_target_is_met_or_missed_only_when_the_interval_says_so(rounds, verdict):
    measurements = []
    for i, ratio in enumerate(rounds):
        measurements += [measurement("bare", i, 100.0), measurement("harness", i, 100.0 * ratio)]
    results = {"device": "cpu", "summary": summarize(measurements)}
    check = next(c for c in target_checks(results) if "bare" in c["target"])
    assert check["met"] == verdict
    assert check["interval"] == "range of 3 paired rounds"


@pytest.mark.slow
def test_a_tiny_suite_runs_every_runner_on_the_cpu(tmp_path):
    variants = ["harness", "bare"]
    cases = {"image_cnn": {"batch_sizes": [8], "variants": variants, "settings": TINY_CNN}}
    if importlib.util.find_spec("accelerate") is not None:
        cases["text_multilabel"] = {
            "batch_sizes": [4],
            "variants": ["harness", "bare", "hf_trainer"],
            "settings": {
                "epochs": 1,
                "warmup_steps": 2,
                "max_steps_per_epoch": 5,
                "max_length": 32,
                "data": {"source": "proposals", "n_train": 40, "n_dev": 8},
                "model": {"dim": 16, "n_layers": 1, "n_heads": 2, "hidden_dim": 32},
            },
        }
    suite = load_suite(
        write_suite(
            tmp_path,
            {
                "name": "tiny",
                "device": "cpu",
                "rounds": 2,
                "run_rounds": 1,
                "block_seconds": 0.01,
                "cases": cases,
            },
        )  # fmt: skip
    )
    out = tmp_path / "results.json"
    results = run_suite(suite, out, log=lambda line: None)
    assert json.loads(out.read_text()) == json.loads(json.dumps(results))
    ok = [m for m in results["measurements"] if m["status"] == "ok"]
    for workload in cases:
        blocks = [m for m in ok if m["workload"] == workload and m["method"] == "interleaved"]
        # Harness, bare loop and its A/A twin: two blocks each per round, every block
        # the same calibrated number of steps.
        assert sorted(m["variant"] for m in blocks) == sorted(["harness", "bare", "bare-aa"] * 2)
        assert {m["steps"] for m in blocks} == {2 * blocks[0]["block_steps"]}
        assert all(len(m["blocks"]) == 2 for m in blocks)
    checks = {(c["where"], c["target"].split(" ")[0]) for c in target_checks(results)}
    assert ("image_cnn bs 8", "A/A") in checks and ("image_cnn bs 8", "harness") in checks
    if "text_multilabel" in cases:
        whole = [m for m in ok if m["workload"] == "text_multilabel" and m["method"] == "runs"]
        # The Trainer in whole runs, paired with whole harness runs of the same shape.
        assert sorted(m["variant"] for m in whole) == ["harness", "hf_trainer"]
        assert len({(m["steps"], m["warmup_steps"]) for m in whole}) == 1, whole
    summary = {(r["workload"], r["method"], r["variant"]): r for r in results["summary"]}
    assert summary[("image_cnn", "interleaved", "harness")]["over_bare"] > 0
    assert summary[("image_cnn", "interleaved", "bare-aa")]["over_bare"] > 0


@pytest.mark.slow
def test_the_step_overhead_profile_sees_only_the_timed_steps(tmp_path):
    """benchmarks/step_overhead.py's logic on a tiny CNN: the harness-only functions are
    those its timed steps call (never the trackers' edge work, such as psutil's /proc
    scan), every per-step addition is timed, and the Markdown comes from the results."""
    from trainbench import workloads
    from trainbench.bench.machine import machine_facts
    from trainbench.bench.step_overhead import measure_step_overhead
    from trainbench.bench.step_overhead_report import render_markdown
    from trainbench.bench.throughput_suite import cell_spec, trainbench_config

    cases = {"image_cnn": {"batch_sizes": [8], "variants": ["harness", "bare"],
                           "settings": TINY_CNN}}  # fmt: skip
    suite = load_suite(write_suite(tmp_path, {"name": "t", "device": "cpu", "cases": cases}))
    config = trainbench_config(suite, "image_cnn")
    data = str(tmp_path / "data")
    workloads.get("image_cnn").prepare_data(config["workloads"]["image_cnn"], data, 0)
    spec = cell_spec(config, "image_cnn", Variant("harness"), 8, data)
    case = measure_step_overhead(spec, steps=6)
    functions = [f["function"] for f in case["profile"]["harness_only_functions"]]
    assert any("train_step" in f for f in functions)
    assert not any("psutil" in f for f in functions + [
        f["function"] for f in case["profile"]["harness_per_region_functions"]])  # fmt: skip
    assert {o["operation"].split(" ")[0] for o in case["operations"]} >= {"data", "loss", "step"}
    assert case["operations_us_per_step"] == pytest.approx(
        sum(o["us_per_step"] for o in case["operations"])
    )
    # Synchronizations per step, counted on both sides: the region's and the bare
    # block's two edges, none inside a step.
    assert case["syncs_per_step"] == {"harness": 0, "bare": 0}
    assert {side: c["per_block_edges"] for side, c in case["syncs"].items()} == {
        "harness": 2, "bare": 2}  # fmt: skip
    assert "patched counter" in case["syncs_counted_by"]
    assert case["verdict"]["syncs_added_per_step"] == 0
    case.update(suite="t", date="today")
    text = render_markdown({"device": "cpu", "machine": machine_facts("cpu"), "cases": [case]})
    assert f"{case['operations_us_per_step']:.2f} µs per step" in text
    assert "device synchronizations per step: harness **0**, bare loop **0**" in text


def test_only_picks_workloads_or_single_batch_sizes():
    from trainbench.bench.throughput_run import selected_cases

    assert selected_cases(None) is None and selected_cases([]) is None
    assert selected_cases(["text_multilabel:64", "image_cnn"]) == {
        "text_multilabel": {64},
        "image_cnn": set(),
    }
