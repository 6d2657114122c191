"""Which repeats each workload gets when the config comes from several files: the
last file that sets them decides, a workload's own entry beats its file's top level
(trainbench.config.settle_inherited_keys), and the config check says so."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from snakemake.utils import update_config
from trainbench.config import repeat_settings, settle_inherited_keys, validate_config

REPO = Path(__file__).resolve().parents[1]
BASE = {
    "repeats": 3,
    "workloads": {
        "image_cnn": {"batch_sizes": [32]},
        "clip": {"repeats": 2, "batch_sizes": [64]},
    },
}


def _settled(*layers: dict) -> tuple[dict, dict]:
    named = [(f"layer{i}", layer) for i, layer in enumerate(layers)]
    merged: dict = {}
    for _, layer in named:
        update_config(merged, yaml.safe_load(yaml.safe_dump(layer)))
    origins = settle_inherited_keys(merged, named)
    return {w: s.get("repeats") for w, s in merged["workloads"].items()}, origins


def test_a_later_files_top_level_repeats_beat_an_earlier_files_workload_entry():
    repeats, origins = _settled(BASE, {"repeats": 5})
    assert repeats == {"image_cnn": 5, "clip": 5}
    assert origins["clip"]["repeats"] == "layer1 (top level)"


def test_within_one_file_the_workloads_own_entry_wins():
    repeats, origins = _settled(BASE, {"repeats": 5, "workloads": {"clip": {"repeats": 4}}})
    assert repeats == {"image_cnn": 5, "clip": 4}
    assert origins["clip"]["repeats"] == "layer1 (own)"


def test_a_file_that_says_nothing_about_repeats_keeps_the_earlier_ones():
    repeats, origins = _settled(BASE, {"workloads": {"clip": {"epochs": 1}}})
    assert repeats == {"image_cnn": 3, "clip": 2}
    assert origins["image_cnn"]["repeats"] == "layer0 (top level)"


def test_the_command_line_is_the_last_layer():
    repeats, _ = _settled(BASE, {"repeats": 5}, {"repeats": {"min": 3, "max": 6}})
    assert repeats["clip"] == {"min": 3, "max": 6}


def test_a_layer_that_is_not_a_mapping_is_passed_over():
    merged = {"workloads": {"clip": {"batch_sizes": [8]}}, "repeats": 3}
    assert settle_inherited_keys(merged, [("a", None), ("b", ["x"]), ("c", {"repeats": 4})])
    assert merged["workloads"]["clip"]["repeats"] == 4


SHIPPED = ["config.yaml"] + sorted(
    str(p.relative_to(REPO)) for p in (REPO / "configs").glob("*.yaml")
)


@pytest.mark.parametrize("config_file", SHIPPED)
def test_every_shipped_config_gives_each_training_workload_three_repeats(config_file):
    """Three repeats a side are the fewest a verdict needs."""
    names = dict.fromkeys(["config.yaml", config_file])
    layers = [(name, yaml.safe_load((REPO / name).read_text())) for name in names]
    merged: dict = {}
    for _, layer in layers:
        update_config(merged, layer)
    settle_inherited_keys(merged, layers)
    merged.setdefault("launcher", {})["allow_more_threads_than_cores"] = True
    if Path(config_file).name in ("full.yaml", "mnist.yaml"):
        pytest.skip(f"{config_file} names data files outside the repository")
    config = validate_config(merged)
    for workload, settings in config["workloads"].items():
        if settings.get("enabled", True) and workload != "matmul":
            assert repeat_settings(config, workload)["min"] >= 3, workload


def test_the_config_check_prints_the_repeats_each_workload_gets(tmp_path):
    override = tmp_path / "more.yaml"
    override.write_text("repeats: 4\n")
    out = subprocess.run(
        [sys.executable, "scripts/check_config.py", "config.yaml", str(override)],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "repeats per workload" in out
    assert f"clip 4 [{override} (top level)]" in out


@pytest.mark.slow
@pytest.mark.e2e
def test_the_workflow_settles_repeats_as_the_config_check_says(tmp_path):
    """Two --configfiles: the first sets image_cnn's own repeats, the second the top
    level. The second decides, in snakemake as in the check (Snakemake's merged
    overwrite_config as the last layer once let the first file's own entry win)."""
    from helpers import copy_workflow, run_snakemake

    workflow = copy_workflow(tmp_path / "wf")
    (workflow / "config.yaml").write_text(
        "seed: 0\ndevices: [cpu]\nworkloads:\n  image_cnn:\n    batch_sizes: [8]\n"
    )
    (workflow / "a.yaml").write_text("workloads:\n  image_cnn:\n    repeats: 4\n")
    (workflow / "b.yaml").write_text("repeats: 2\n")
    check = subprocess.run(
        [sys.executable, "scripts/check_config.py", "config.yaml", "a.yaml", "b.yaml"],
        cwd=workflow,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "image_cnn 2 [b.yaml (top level)]" in check
    proc = run_snakemake(workflow, "-n", "--cores", "1", "--configfile", "a.yaml", "b.yaml")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    counts = dict(
        line.split()[:2] for line in proc.stdout.splitlines() if line.startswith("run_cell ")
    )
    assert counts == {"run_cell": "2"}, proc.stdout
