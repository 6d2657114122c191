"""Evidence folders (docs/measured/): which code is measurement code, what changed
since a folder was made, the README saying so, and a run collected and rendered
again from its records alone (trainbench.evidence, evidence_run, evidence_check)."""

from __future__ import annotations

import ast
import json
import subprocess
import tarfile
from pathlib import Path

import pandas as pd
import pytest
import yaml
from helpers import copy_workflow, tiny_config
from trainbench.evidence import (
    EVIDENCE_FILE,
    Made,
    config_key,
    measurement_files,
    render,
    stale_files,
    write_evidence,
)
from trainbench.evidence import run as evidence_run
from trainbench.evidence.check import BEGIN, END, check_readme, readme_block

REPO = Path(__file__).resolve().parents[1]


def test_measurement_code_is_what_runs_in_a_cell_not_what_reads_records():
    files = measurement_files(REPO)
    for measuring in (
        "scripts/trainbench/measure/training.py",
        "scripts/trainbench/measure/steady.py",
        "scripts/trainbench/measure/trackers/energy.py",
        "scripts/trainbench/workloads/image_cnn.py",
        "scripts/trainbench/workloads/textdata/proposals.py",
        "scripts/trainbench/launch/reference.py",
        "scripts/run_cell.py",
        "rules/run.smk",
    ):
        assert measuring in files, measuring
    # config.yaml counts as the config a run resolved to (code_fingerprint), not as bytes
    assert "config.yaml" not in files
    for analysis in (
        "scripts/trainbench/analysis/stats/parity.py",
        "scripts/trainbench/analysis/figures/style.py",
        "scripts/trainbench/analysis/report.py",
        "scripts/trainbench/analysis/aggregate.py",
        "scripts/trainbench/evidence/__init__.py",
    ):
        assert analysis not in files, analysis


@pytest.mark.slow
def test_every_module_a_cell_imports_is_measurement_code():
    """A new module a cell imports counts as measurement code without anyone listing it."""
    import subprocess
    import sys

    probe = (
        "import sys; sys.path.insert(0, 'scripts');"
        "import trainbench.launch.child, trainbench.launch.launcher, trainbench.launch.reference, trainbench.workloads;"
        "from trainbench.workloads import WORKLOADS, get;"
        "[get(w) for w in WORKLOADS];"
        "print('\\n'.join(m.__file__ for n, m in sys.modules.items()"
        " if n.startswith('trainbench') and getattr(m, '__file__', None)))"
    )
    out = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True)
    imported = {str(Path(f).resolve().relative_to(REPO)) for f in out.stdout.split()}
    files = set(measurement_files(REPO))
    allowed = {
        "scripts/trainbench/analysis/hardware.py",  # host labels for tables, no measurement
        # The fingerprint of the code itself (a record's code.behaviour), made after the
        # cell's attempts: it names the code, and measures nothing.
        "scripts/trainbench/common/behaviour.py",
    }
    assert imported and not (imported - files - allowed), sorted(imported - files - allowed)


BASE_CONFIG = """devices: [cpu]
workloads:
  image_cnn: {batch_sizes: [16]}
  text_multilabel: {batch_sizes: [8]}
"""
RUN_CONFIG = "run_name: gpu-x\nrepeats: 3\n"


def _code(rel: str, value: int = 1) -> str:
    """A module of one definition named after its file (``training.py``: ``training``)."""
    return f"# {rel}\n{Path(rel).stem.upper()} = {value}\n"


def _fake_root(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    for rel in (
        "scripts/trainbench/measure/training.py",
        "scripts/trainbench/analysis/stats/parity.py",
    ):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(_code(rel))
    (root / "configs").mkdir()
    (root / "config.yaml").write_text(BASE_CONFIG)
    (root / "configs" / "gpu-x.yaml").write_text(RUN_CONFIG)
    dest = root / "docs" / "measured" / "gpu-x"
    made = Made(["make", "gpu-evidence"], 12.0, "abc123", ["config.yaml", "configs/gpu-x.yaml"])
    write_evidence(dest, root, made, {"gpu_models": ["NVIDIA Test"]})
    return root


def test_stale_files_lists_changed_removed_and_added_measurement_code(tmp_path):
    root = _fake_root(tmp_path)
    folder = root / "docs" / "measured" / "gpu-x"
    meta = json.loads((folder / EVIDENCE_FILE).read_text())
    key = config_key(["config.yaml", "configs/gpu-x.yaml"])
    assert meta["commit"] == "abc123" and meta["measurement_code"]["version"] == 3
    assert len(meta["measurement_code"]["files"][key]) == 64
    assert stale_files(folder, root) == []
    (root / "scripts/trainbench/analysis/stats/parity.py").write_text("PARITY = 2\n")
    assert stale_files(folder, root) == []  # analysis is rendered again, never stale
    (root / "scripts/trainbench/measure/training.py").write_text(
        "# only a comment changed\nTRAINING = 1\n"
    )
    assert stale_files(folder, root) == []  # comments, docstrings and moves are not behaviour
    (root / "scripts/trainbench/measure/training.py").write_text(_code("training.py", 2))
    (root / "scripts/trainbench/measure/steady.py").write_text(_code("steady.py"))
    assert stale_files(folder, root) == ["code STEADY", "code TRAINING"]
    # the config counts as it resolves: another comment or a workload the run did not
    # run changes nothing; a setting of one it ran does
    (root / "scripts/trainbench/measure/steady.py").unlink()
    (root / "scripts/trainbench/measure/training.py").write_text(_code("training.py"))
    (root / "configs/gpu-x.yaml").write_text("# same\n" + RUN_CONFIG)
    assert stale_files(folder, root) == []
    (root / "configs/gpu-x.yaml").write_text(RUN_CONFIG + "batch_sizes: [8, 32]\n")
    assert stale_files(folder, root) == [key]
    (root / "configs/gpu-x.yaml").unlink()
    assert stale_files(folder, root) == [key]


def test_evidence_depends_only_on_the_workloads_it_ran(tmp_path):
    root = tmp_path / "root"
    for rel in ("scripts/trainbench/measure/training.py", "scripts/trainbench/workloads/image_cnn.py",
                "scripts/trainbench/workloads/text_multilabel.py",
                "scripts/trainbench/workloads/textdata/proposals.py"):  # fmt: skip
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(_code(rel))
    (root / "config.yaml").write_text(BASE_CONFIG)
    folder = root / "docs" / "measured" / "cnn"
    made = Made(["make", "gpu-evidence"], 1.0, "abc123", ["config.yaml"], ["image_cnn"])
    meta = write_evidence(folder, root, made, {})
    assert meta["workloads"] == ["image_cnn"]
    assert "PROPOSALS" not in meta["measurement_code"]["python"]
    assert {"IMAGE_CNN", "TRAINING"} <= set(meta["measurement_code"]["python"])
    (root / "scripts/trainbench/workloads/textdata/proposals.py").write_text(
        _code("proposals.py", 2)
    )
    (root / "scripts/trainbench/workloads/text_multilabel.py").write_text(
        _code("text_multilabel.py", 2)
    )
    (root / "scripts/trainbench/workloads/clip.py").write_text(_code("clip.py"))
    text_lr = "{batch_sizes: [8], optimizer: {lr: 0.002}}"
    (root / "config.yaml").write_text(BASE_CONFIG.replace("{batch_sizes: [8]}", text_lr))
    assert stale_files(folder, root) == []
    (root / "scripts/trainbench/workloads/image_cnn.py").write_text(_code("image_cnn.py", 2))
    (root / "scripts/trainbench/measure/training.py").write_text(_code("training.py", 2))
    assert stale_files(folder, root) == ["code IMAGE_CNN", "code TRAINING"]
    # evidence made without the list depends on every workload's code
    everything = write_evidence(root / "docs" / "measured" / "all", root, Made(
        ["x"], 1.0, "abc123", []), {})  # fmt: skip
    assert "PROPOSALS" in everything["measurement_code"]["python"]


def test_the_readme_check_fails_until_the_readme_names_the_changed_code(tmp_path, capsys):
    root = _fake_root(tmp_path)
    readme = root / "README.md"
    readme.write_text(f"intro\n{readme_block(root)}\nend\n")
    assert check_readme(root, readme) == 0
    (root / "scripts/trainbench/measure/training.py").write_text(_code("training.py", 2))
    assert check_readme(root, readme) == 1
    assert "measure again" in capsys.readouterr().err
    assert "`code TRAINING`" in readme_block(root)


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
    # the code that measured, named by the records' own source fingerprint
    assert meta["code"]["source_from"] == "records" and len(meta["code"]["source_sha256"]) == 64
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


def test_a_declared_commit_wins_over_a_stale_git_beside_the_tree(tmp_path, monkeypatch):
    from trainbench.launch.environment import git_commit

    def git(*args):
        return subprocess.run(["git", "-C", str(tmp_path), *args], check=True,
                              capture_output=True, text=True).stdout.strip()  # fmt: skip

    git("init", "-q")
    (tmp_path / "f.py").write_text("old\n")
    git("add", "f.py")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "old")
    (tmp_path / "f.py").write_text("the tree of another commit\n")
    monkeypatch.delenv("TRAINBENCH_COMMIT", raising=False)
    assert git_commit(tmp_path) == git("rev-parse", "HEAD") + "-dirty"
    monkeypatch.setenv("TRAINBENCH_COMMIT", "b1ca57c")
    assert git_commit(tmp_path) == "b1ca57c"


# -- the behaviour fingerprint (trainbench.evidence.behaviour) ---------------------------

MODULE_A = '''"""Module a."""
from trainbench.x import helper

LIMIT = 3


def measure(steps):
    """Time the steps."""
    return helper(steps) * LIMIT  # a comment


class Timer:
    """A timer."""

    unit = "s"

    def start(self):
        return 0
'''


def _fingerprint(tmp_path, files: dict[str, str]) -> dict:
    from trainbench.evidence import behaviour

    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return behaviour.fingerprint(tmp_path, sorted(files))


def test_a_move_a_split_or_a_removed_duplicate_keeps_the_behaviour_fingerprint(tmp_path):
    from trainbench.evidence import behaviour

    before = _fingerprint(tmp_path / "1", {"pkg/a.py": MODULE_A, "rules/run.smk": "rule x:\n"})
    # a moved into a subpackage and split in two, its imports rewritten, docstrings and
    # comments edited, and an exact duplicate of `measure` left in a third module
    head, timer = MODULE_A.split("class Timer:")
    moved = {
        "pkg/run/a.py": head.replace("from trainbench.x", "from trainbench.run.x")
        .replace('"""Time the steps."""', '"""Time the steps (moved)."""')
        .replace("# a comment", ""),
        "pkg/run/timer.py": '"""Split off."""\nimport os\n\n\nclass Timer:' + timer,
        "pkg/old.py": "def measure(steps):\n    return helper(steps) * LIMIT\n",
        "rules/run.smk": "rule x:\n",
    }
    after = _fingerprint(tmp_path / "2", moved)
    assert behaviour.changed(before, after) == []
    assert set(before["python"]) == {"LIMIT", "measure", "Timer.start", "class Timer"}


def test_any_change_of_code_marks_the_behaviour_fingerprint(tmp_path):
    from trainbench.evidence import behaviour

    before = _fingerprint(tmp_path / "0", {"a.py": MODULE_A, "rules/run.smk": "rule x:\n"})
    edits = {
        "LIMIT = 4": ("LIMIT = 3", "LIMIT = 4"),
        "a class attribute": ('unit = "s"', 'unit = "ms"'),
        "a method": ("return 0", "return 1"),
        "a default": ("def measure(steps):", "def measure(steps=2):"),
    }
    expected = {"LIMIT = 4": "code LIMIT", "a class attribute": "code class Timer",
                "a method": "code Timer.start", "a default": "code measure"}  # fmt: skip
    for i, (what, (old, new)) in enumerate(edits.items(), start=1):
        after = _fingerprint(tmp_path / str(i), {"a.py": MODULE_A.replace(old, new),
                                                 "rules/run.smk": "rule x:\n"})  # fmt: skip
        assert behaviour.changed(before, after) == [expected[what]], what
    rules = _fingerprint(tmp_path / "r", {"a.py": MODULE_A, "rules/run.smk": "rule y:\n"})
    assert behaviour.changed(before, rules) == ["rules/run.smk"]


def test_the_behaviour_digest_is_the_same_on_every_python():
    """3.12 added ``type_params=[]`` to every def and class: an empty field the digest
    leaves out, so evidence made on a 3.12 GPU host checks on a 3.11 laptop."""
    from trainbench.evidence import behaviour

    tree = ast.parse("def f(x=1):\n    return x\n")
    plain = behaviour.digest(tree.body[0])
    tree.body[0].type_params = []
    tree.body[0]._fields = (*tree.body[0]._fields, "type_params")
    assert behaviour.digest(tree.body[0]) == plain
    assert behaviour.digest(ast.parse("def f(x=2):\n    return x\n").body[0]) != plain
