"""Evidence folders (docs/measured/): which code is measurement code, what changed
since a folder was made, the README saying so, and a run collected and rendered
again from its records alone (trainbench.evidence, evidence_run, evidence_check)."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pandas as pd
import pytest
import yaml
from helpers import copy_workflow, tiny_config
from trainbench import evidence_run
from trainbench.evidence import (
    EVIDENCE_FILE,
    Made,
    measurement_files,
    render,
    stale_files,
    write_evidence,
)
from trainbench.evidence_check import BEGIN, END, check_readme, readme_block

REPO = Path(__file__).resolve().parents[1]


def test_measurement_code_is_what_runs_in_a_cell_not_what_reads_records():
    files = measurement_files(REPO)
    for measuring in (
        "scripts/trainbench/training.py",
        "scripts/trainbench/steady.py",
        "scripts/trainbench/trackers/energy.py",
        "scripts/trainbench/workloads/image_cnn.py",
        "scripts/trainbench/textdata/proposals.py",
        "scripts/trainbench/reference.py",
        "scripts/run_cell.py",
        "rules/run.smk",
        "config.yaml",
    ):
        assert measuring in files, measuring
    for analysis in (
        "scripts/trainbench/stats/parity.py",
        "scripts/trainbench/figures/style.py",
        "scripts/trainbench/report.py",
        "scripts/trainbench/aggregate.py",
        "scripts/trainbench/evidence.py",
    ):
        assert analysis not in files, analysis


def test_every_module_a_cell_imports_is_measurement_code():
    """A new module a cell imports counts as measurement code without anyone listing it."""
    import subprocess
    import sys

    probe = (
        "import sys; sys.path.insert(0, 'scripts');"
        "import trainbench.child, trainbench.launcher, trainbench.reference, trainbench.workloads;"
        "from trainbench.workloads import WORKLOADS, get;"
        "[get(w) for w in WORKLOADS];"
        "print('\\n'.join(m.__file__ for n, m in sys.modules.items()"
        " if n.startswith('trainbench') and getattr(m, '__file__', None)))"
    )
    out = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True)
    imported = {str(Path(f).resolve().relative_to(REPO)) for f in out.stdout.split()}
    files = set(measurement_files(REPO))
    allowed = {"scripts/trainbench/hardware.py"}  # host labels for tables, no measurement
    assert imported and not (imported - files - allowed), sorted(imported - files - allowed)


def _fake_root(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    for rel in ("scripts/trainbench/training.py", "scripts/trainbench/stats/parity.py",
                "config.yaml", "configs/gpu-x.yaml"):  # fmt: skip
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(f"# {rel}\n")
    dest = root / "docs" / "measured" / "gpu-x"
    made = Made(["make", "gpu-evidence"], 12.0, "abc123", ["config.yaml", "configs/gpu-x.yaml"])
    write_evidence(dest, root, made, {"gpu_models": ["NVIDIA Test"]})
    return root


def test_stale_files_lists_changed_removed_and_added_measurement_code(tmp_path):
    root = _fake_root(tmp_path)
    folder = root / "docs" / "measured" / "gpu-x"
    meta = json.loads((folder / EVIDENCE_FILE).read_text())
    assert meta["commit"] == "abc123" and "configs/gpu-x.yaml" in meta["measurement_code"]
    assert stale_files(folder, root) == []
    (root / "scripts/trainbench/stats/parity.py").write_text("# analysis changed\n")
    assert stale_files(folder, root) == []  # analysis is rendered again, never stale
    (root / "scripts/trainbench/training.py").write_text("# changed\n")
    (root / "configs/gpu-x.yaml").unlink()
    (root / "scripts/trainbench/steady.py").write_text("# new\n")
    assert stale_files(folder, root) == [
        "configs/gpu-x.yaml",
        "scripts/trainbench/steady.py",
        "scripts/trainbench/training.py",
    ]


def test_evidence_depends_only_on_the_workloads_it_ran(tmp_path):
    root = tmp_path / "root"
    for rel in ("scripts/trainbench/training.py", "scripts/trainbench/workloads/image_cnn.py",
                "scripts/trainbench/workloads/text_multilabel.py",
                "scripts/trainbench/textdata/proposals.py", "config.yaml"):  # fmt: skip
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(f"# {rel}\n")
    folder = root / "docs" / "measured" / "cnn"
    made = Made(["make", "gpu-evidence"], 1.0, "abc123", ["config.yaml"], ["image_cnn"])
    meta = write_evidence(folder, root, made, {})
    assert meta["workloads"] == ["image_cnn"]
    assert "scripts/trainbench/textdata/proposals.py" not in meta["measurement_code"]
    (root / "scripts/trainbench/textdata/proposals.py").write_text("# another generator\n")
    (root / "scripts/trainbench/workloads/text_multilabel.py").write_text("# changed\n")
    (root / "scripts/trainbench/workloads/clip.py").write_text("# a new workload\n")
    assert stale_files(folder, root) == []
    (root / "scripts/trainbench/workloads/image_cnn.py").write_text("# changed\n")
    (root / "scripts/trainbench/training.py").write_text("# changed\n")
    assert stale_files(folder, root) == [
        "scripts/trainbench/training.py",
        "scripts/trainbench/workloads/image_cnn.py",
    ]
    # evidence made without the list depends on every workload's code
    everything = write_evidence(root / "docs" / "measured" / "all", root, Made(
        ["x"], 1.0, "abc123", []), {})  # fmt: skip
    assert "scripts/trainbench/textdata/proposals.py" in everything["measurement_code"]


def test_the_readme_check_fails_until_the_readme_names_the_changed_code(tmp_path, capsys):
    root = _fake_root(tmp_path)
    readme = root / "README.md"
    readme.write_text(f"intro\n{readme_block(root)}\nend\n")
    assert check_readme(root, readme) == 0
    (root / "scripts/trainbench/training.py").write_text("# changed\n")
    assert check_readme(root, readme) == 1
    assert "measure again" in capsys.readouterr().err
    assert "training.py" in readme_block(root)


def test_the_readme_says_what_changed_since_the_committed_evidence():
    """CI's check: README.md's evidence block lists exactly the measurement code changed
    since each docs/measured/ folder was made (`python scripts/evidence.py check`)."""
    text = (REPO / "README.md").read_text()
    assert BEGIN in text and END in text
    assert check_readme(REPO, REPO / "README.md") == 0, readme_block(REPO)


@pytest.mark.slow
def test_a_collected_run_renders_again_from_its_records_alone(tmp_path):
    root = copy_workflow(tmp_path / "wf")
    config = tiny_config(repeats=1, devices=["cpu"], run_name="gpu-x")
    config["device_settings"] = {"cpu": {"threads": [1, 2]}}
    config["workloads"].update(
        {w: {"enabled": False} for w in ("text_multilabel", "clip", "two_tower")}
    )
    (root / "configs").mkdir(exist_ok=True)
    (root / "configs" / "gpu-x.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    part = evidence_run.ConfigPart("configs/gpu-x.yaml")
    evidence_run.PARTS["x"] = part
    try:
        meta = evidence_run.run_part("x", root, tmp_path / "logs")
    finally:
        del evidence_run.PARTS["x"]
    folder = root / "docs" / "measured" / "gpu-x"
    assert meta["records"] >= 4 and meta["config_files"] == ["config.yaml", "configs/gpu-x.yaml"]
    with tarfile.open(folder / "records.tgz") as tar:
        names = tar.getnames()
    assert any(n.startswith("runs/image_cnn/cpu-t2/") for n in names)
    assert "report.md" in meta["rendered"] and (folder / "tables" / "speedup.csv").exists()
    before = {p.name: p.read_bytes() for p in (folder / "tables").glob("*.csv")}
    (folder / "tables" / "speedup.csv").unlink()
    render(folder, root)
    after = {p.name: p.read_bytes() for p in (folder / "tables").glob("*.csv")}
    assert sorted(after) == sorted(before)
    for name in ("speedup.csv", "parity.csv", "verdicts.csv", "runs.csv"):
        pd.testing.assert_frame_equal(
            pd.read_csv(folder / "tables" / name).drop(columns=["record"], errors="ignore"),
            pd.DataFrame(pd.read_csv(pd.io.common.BytesIO(before[name]))).drop(
                columns=["record"], errors="ignore"
            ),
        )
