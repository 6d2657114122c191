"""Bad input, end to end: each case is given to the config check
(scripts/check_config.py) and to a plain ``snakemake -n`` in a copy of the workflow.
Both must refuse it before any job with the same single ``trainbench:`` line naming
the file, the key and the fix: no traceback, no other refusal line, no job, no
results folder.

The cases cover the structure of every config source (config.yaml, a --configfile,
--config), an own model's entry (missing module, function, folder; not callable;
syntax error; a failing import) and every path a config names."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from helpers import REPO, copy_workflow, run_snakemake

# A config.yaml that is valid and small; each case overrides it or replaces it.
BASE = """\
seed: 0
repeats: 1
devices: [cpu]
workloads:
  matmul:
    sizes: [16]
    min_run_time_s: 0.01
"""


@dataclass
class Case:
    """``files``: written into the workflow copy (``config.yaml`` replaces BASE);
    ``configfiles``: given as --configfile; ``config``: given as --config (Snakemake
    only: the check has no such option); ``expect``: what the one line must hold."""

    files: dict[str, str | bytes]
    expect: tuple[str, ...]
    configfiles: tuple[str, ...] = ()
    config: tuple[str, ...] = ()
    extra: dict = field(default_factory=dict)


def own(entry: str, python_path: str = "own") -> str:
    return (
        "workloads:\n  mine:\n"
        f"    entry: {entry!r}\n    python_path: [{python_path}]\n    batch_sizes: [8]\n"
    )


def over(text: str) -> dict[str, str]:
    """A --configfile ``bad.yaml`` holding ``text``."""
    return {"bad.yaml": text}


CASES = {
    # -- the structure of a config file ---------------------------------------------
    "config.yaml is a list": Case(
        {"config.yaml": "- seed\n- devices\n"}, ("config.yaml", "holds a list", "Fix:")
    ),
    "config.yaml is empty": Case({"config.yaml": ""}, ("config.yaml", "is empty", "Fix:")),
    "config.yaml is a scalar": Case(
        {"config.yaml": "matmul\n"}, ("config.yaml", "the string 'matmul'", "Fix:")
    ),
    "a configfile is a list": Case(
        over("- workloads\n"), ("bad.yaml", "holds a list"), configfiles=("bad.yaml",)
    ),
    "a configfile is empty": Case(
        over("# nothing\n"), ("bad.yaml", "is empty"), configfiles=("bad.yaml",)
    ),
    "a configfile is a number": Case(
        over("42\n"), ("bad.yaml", "the int 42"), configfiles=("bad.yaml",)
    ),
    "a JSON configfile is a list": Case(
        {"bad.json": "[1, 2]"}, ("bad.json", "holds a list"), configfiles=("bad.json",)
    ),
    "a configfile is missing": Case(
        {}, ("absent.yaml", "does not exist", "Fix:"), configfiles=("absent.yaml",)
    ),
    "a configfile is a folder": Case(
        {"bad.yaml/.keep": ""}, ("bad.yaml", "is a folder", "Fix:"), configfiles=("bad.yaml",)
    ),
    "a configfile is not YAML": Case(
        over("repeats: [\n"), ("bad.yaml line 2", "not valid YAML"), configfiles=("bad.yaml",)
    ),
    "a configfile is not UTF-8": Case(
        {"bad.yaml": b"run_name: caf\xe9\n"},
        ("bad.yaml line 1", "not UTF-8", "Fix:"),
        configfiles=("bad.yaml",),
    ),
    "a key given twice": Case(
        over("repeats: 2\nrepeats: 3\n"),
        ("bad.yaml line 2", "`repeats`", "appears twice"),
        configfiles=("bad.yaml",),
    ),
    "a key that YAML reads as a number": Case(
        over("workloads:\n  matmul:\n    1: 2\n"),
        ("bad.yaml line 3", "`workloads.matmul`", "Fix: quote it"),
        configfiles=("bad.yaml",),
    ),
    "an alias inside itself": Case(
        over("devices: &d [*d]\n"), ("bad.yaml line 1", "`devices"), configfiles=("bad.yaml",)
    ),
    "workloads is a list": Case(
        over("workloads:\n  - matmul\n"),
        ("bad.yaml line 1", "`workloads`", "must be a mapping", "Fix:"),
        configfiles=("bad.yaml",),
    ),
    "a workload is a string": Case(
        over("workloads:\n  matmul: fast\n"),
        ("bad.yaml line 2", "`workloads.matmul`", "must be a mapping"),
        configfiles=("bad.yaml",),
    ),
    "devices is a mapping": Case(
        over("devices: {cpu: 1}\n"),
        ("bad.yaml line 1", "`devices`", "must be a list"),
        configfiles=("bad.yaml",),
    ),
    "batch_sizes is a string": Case(
        over("workloads:\n  image_cnn:\n    batch_sizes: '32'\n"),
        ("bad.yaml line 3", "`workloads.image_cnn.batch_sizes`", "must be a list"),
        configfiles=("bad.yaml",),
    ),
    "data is a list": Case(
        over("workloads:\n  image_cnn:\n    data: [synthetic]\n"),
        ("bad.yaml line 3", "`workloads.image_cnn.data`", "must be a mapping"),
        configfiles=("bad.yaml",),
    ),
    "a nested number is a word": Case(
        over("workloads:\n  image_cnn:\n    data:\n      n_train: many\n"),
        ("bad.yaml line 4", "`workloads.image_cnn.data.n_train`", "Fix:"),
        configfiles=("bad.yaml",),
    ),
    "launcher is a string": Case(
        over("launcher: fast\n"),
        ("bad.yaml line 1", "`launcher`", "must be a mapping"),
        configfiles=("bad.yaml",),
    ),
    "an unknown nested key": Case(
        over("launcher:\n  retries: 3\n"),
        ("bad.yaml line 2", "`retries`", "under `launcher`", "Fix:"),
        configfiles=("bad.yaml",),
    ),
    "the second of two configfiles": Case(
        {"a.yaml": "repeats: 2\n", "bad.yaml": "devices: cpu\n"},
        ("bad.yaml line 1", "`devices`", "must be a list"),
        configfiles=("a.yaml", "bad.yaml"),
    ),
    "a number that is infinite": Case(
        over("workloads:\n  matmul:\n    min_run_time_s: .inf\n"),
        ("bad.yaml line 3", "`workloads.matmul.min_run_time_s`", "not a finite number", "Fix:"),
        configfiles=("bad.yaml",),
    ),
    "a NaN inside a list": Case(
        over("workloads:\n  matmul:\n    sizes: [16, .nan]\n"),
        ("bad.yaml line 3", "`workloads.matmul.sizes[1]`", "not a finite number", "Fix:"),
        configfiles=("bad.yaml",),
    ),
    "a number too large for a float": Case(
        over("seed: 0\nrepeats: {min: 2, target_ci_halfwidth: 1.0e+999}\n"),
        ("bad.yaml line 2", "`repeats.target_ci_halfwidth`", "not a finite number", "Fix:"),
        configfiles=("bad.yaml",),
    ),
    "training data smaller than one batch": Case(
        over("workloads:\n  image_cnn:\n    batch_sizes: [16, 64]\n    data: {n_train: 32}\n"),
        ("bad.yaml line 3", "`workloads.image_cnn.batch_sizes`", "[64]", "n_train", "Fix:"),
        configfiles=("bad.yaml",),
    ),
    "--config of the wrong kind": Case(
        {}, ("--config", "`workloads`", "must be a mapping"), config=("workloads=3",)
    ),
    # -- an own model's entry ---------------------------------------------------------
    "an entry whose module does not exist": Case(
        {"bad.yaml": own("nomodule:build"), "own/.keep": ""},
        ("bad.yaml line 3", "`workloads.mine.entry`", "'nomodule'", "own", "Fix:"),
        configfiles=("bad.yaml",),
    ),
    "an entry whose function does not exist": Case(
        {"bad.yaml": own("mod:nobuild"), "own/mod.py": "def build(ctx):\n    pass\n"},
        ("bad.yaml line 3", "`workloads.mine.entry`", "has no 'nobuild'", "own/mod.py"),
        configfiles=("bad.yaml",),
    ),
    "an entry that is not callable": Case(
        {"bad.yaml": own("mod:build"), "own/mod.py": "build = 3\n"},
        ("bad.yaml line 3", "`workloads.mine.entry`", "not callable", "Fix:"),
        configfiles=("bad.yaml",),
    ),
    "an entry module with a syntax error": Case(
        {"bad.yaml": own("mod:build"), "own/mod.py": "def build(ctx)\n    pass\n"},
        ("bad.yaml line 3", "`workloads.mine.entry`", "SyntaxError", "mod.py, line 1"),
        configfiles=("bad.yaml",),
    ),
    "an entry module whose import fails": Case(
        {"bad.yaml": own("mod:build"), "own/mod.py": "import no_such_dependency_x\n"},
        ("bad.yaml line 3", "`workloads.mine.entry`", "no_such_dependency_x", "Fix:"),
        configfiles=("bad.yaml",),
    ),
    "an entry without a function": Case(
        over(own("mod")),
        ("bad.yaml line 3", "`workloads.mine.entry`", "Fix:"),
        configfiles=("bad.yaml",),
    ),
    "an entry's python_path folder does not exist": Case(
        over(own("mod:build", "nowhere")),
        ("bad.yaml line 4", "`workloads.mine.python_path[0]`", "'nowhere'", "Fix:"),
        configfiles=("bad.yaml",),
    ),
    # -- names that become paths and wildcards (trainbench.config.names) -------------
    "a workload name that climbs out of results/": Case(
        {"bad.yaml": own("mod:build").replace("mine:", "../../../elsewhere:"), "own/mod.py": ""},
        ("bad.yaml line 2", "`workloads`", "'../../../elsewhere'", "Fix: rename it"),
        configfiles=("bad.yaml",),
    ),
    "a workload name with a slash": Case(
        over("workloads:\n  my/model:\n    batch_sizes: [8]\n"),
        ("bad.yaml line 2", "'my/model'", "e.g. to 'my_model'"),
        configfiles=("bad.yaml",),
    ),
    "a workload name with a space and a dot": Case(
        over(own("mod:build").replace("mine:", "'my model.v2':")),
        ("bad.yaml line 2", "'my model.v2'", "Fix: rename it"),
        configfiles=("bad.yaml",),
    ),
    "a run name that climbs out of results/": Case(
        over("run_name: ../outside\n"),
        ("bad.yaml line 1", "`run_name`", "'../outside'", "Fix: rename it"),
        configfiles=("bad.yaml",),
    ),
    "a run name that is a path": Case(
        over("run_name: /tmp/x\n"),
        ("bad.yaml line 1", "`run_name`", "not one folder name", "Fix:"),
        configfiles=("bad.yaml",),
    ),
    "a workload name given with --config": Case(
        {},
        ("--config", "'../x'", "Fix: rename it"),
        config=("workloads={'../x': {}}",),
    ),
    # -- paths the config names -------------------------------------------------------
    "an MNIST folder that does not exist": Case(
        over("workloads:\n  image_cnn:\n    data: {source: mnist_idx, path: nowhere}\n"),
        ("bad.yaml line 3", "`workloads.image_cnn.data.path`", "does not exist", "Fix:"),
        configfiles=("bad.yaml",),
    ),
    "a GoEmotions folder without its files": Case(
        {
            "bad.yaml": "workloads:\n  text_multilabel:\n"
            "    data: {source: goemotions, path: go}\n",
            "go/original/labels.txt": "joy\n",
        },
        ("bad.yaml line 3", "`workloads.text_multilabel.data.path`", "holds no labels.txt"),
        configfiles=("bad.yaml",),
    ),
    "a table path that is a folder": Case(
        {
            "bad.yaml": "workloads:\n  text_multilabel:\n    data: {source: table, path: folder}\n",
            "folder/.keep": "",
        },
        ("bad.yaml line 3", "`workloads.text_multilabel.data.path`", "is not a file"),
        configfiles=("bad.yaml",),
    ),
    "a pairs file that does not exist": Case(
        over("workloads:\n  two_tower:\n    data: {source: pairs_file, path: p.npz}\n"),
        ("bad.yaml line 3", "`workloads.two_tower.data.path`", "does not exist"),
        configfiles=("bad.yaml",),
    ),
    "results to include that do not exist": Case(
        over("aggregate:\n  include_results: [elsewhere]\n"),
        ("bad.yaml line 2", "`aggregate.include_results[0]`", "does not exist", "Fix:"),
        configfiles=("bad.yaml",),
    ),
}


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    return copy_workflow(tmp_path_factory.mktemp("bad-input") / "wf")


@pytest.fixture
def workflow(pristine, tmp_path) -> Path:
    """A fresh copy of the workflow per case (cheap: a local copy of the copy)."""
    import shutil

    dst = tmp_path / "wf"
    shutil.copytree(pristine, dst, symlinks=True)
    return dst


def _write(workflow: Path, case: Case) -> None:
    (workflow / "config.yaml").write_text(BASE)
    for name, content in case.files.items():
        path = workflow / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)


def _refusal(proc: subprocess.CompletedProcess, case: Case) -> str:
    """The one refusal line, after checking what else the output may not hold."""
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0, output
    assert "Traceback" not in output, output
    assert not [line for line in output.splitlines() if line.lstrip().startswith('File "')]
    lines = [line for line in output.splitlines() if line.startswith("trainbench: ")]
    assert len(lines) == 1, output
    for fragment in case.expect:
        assert fragment in lines[0], (fragment, lines[0])
    assert "Fix:" in lines[0], lines[0]
    return lines[0]


def _check(workflow: Path, case: Case) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "scripts/check_config.py", "config.yaml", *case.configfiles],
        cwd=workflow,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _snakemake(workflow: Path, case: Case) -> subprocess.CompletedProcess:
    args = ["-n", "--cores", "1"]
    if case.configfiles:
        args += ["--configfile", *case.configfiles]
    if case.config:
        args += ["--config", *case.config]
    return run_snakemake(workflow, *args, timeout=300)


def test_the_base_config_is_accepted_by_both(workflow):
    _write(workflow, Case({}, ()))
    assert _check(workflow, Case({}, ())).returncode == 0
    proc = _snakemake(workflow, Case({}, ()))
    assert proc.returncode == 0, proc.stdout + proc.stderr


CHECKED = [n for n, c in CASES.items() if not c.config]  # the check has no --config


@pytest.fixture(scope="module")
def checked(pristine, tmp_path_factory) -> dict[str, subprocess.CompletedProcess]:
    """Every case's check, each a real process in a workflow copy of its own, forked
    from one interpreter that imported the check once (tests/check_config_forks.py)."""
    import shutil

    jobs = {}
    for number, name in enumerate(CHECKED):
        folder = shutil.copytree(pristine, tmp_path_factory.mktemp(f"case{number}") / "wf")
        _write(folder, CASES[name])
        jobs[name] = {"cwd": str(folder), "args": ["config.yaml", *CASES[name].configfiles]}
    proc = subprocess.run(
        [sys.executable, str(Path(__file__).with_name("check_config_forks.py"))],
        input=json.dumps(jobs), capture_output=True, text=True, timeout=300, check=True,
    )  # fmt: skip
    return {name: subprocess.CompletedProcess(jobs[name]["args"], **answer)
            for name, answer in json.loads(proc.stdout).items()}  # fmt: skip


@pytest.mark.parametrize("name", CHECKED)
def test_the_config_check_refuses_in_one_line(checked, name):
    _refusal(checked[name], CASES[name])


@pytest.mark.slow
@pytest.mark.e2e
@pytest.mark.parametrize("name", list(CASES))
def test_snakemake_refuses_before_any_job_as_the_check_does(workflow, name):
    case = CASES[name]
    _write(workflow, case)
    proc = _snakemake(workflow, case)
    line = _refusal(proc, case)
    assert "Job stats" not in proc.stdout + proc.stderr
    assert not (workflow / "results").exists()
    if not case.config:
        assert _refusal(_check(workflow, case), case) == line


SHIPPED = ["config.yaml", ".test/config.yaml", "examples/my_model.yaml"] + sorted(
    str(p.relative_to(REPO)) for p in (REPO / "configs").glob("*.yaml")
)


@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_config_file_passes_the_check_of_one_file(name):
    """What each file is checked for on its own (before the merge) refuses none of the
    files this checkout ships."""
    from trainbench.config.files import read_config_file

    assert read_config_file(REPO / name).problems == []


def test_snakemakes_own_config_file_messages_become_the_checks_lines(tmp_path):
    """The logger plugin's rewrite: Snakemake's message about a --configfile names
    neither file nor line; a trainbench refusal loses Snakemake's frame lines."""
    from trainbench.config.files import refusal_lines

    listed = tmp_path / "listed.yaml"
    listed.write_text("- a\n")
    message = "WorkflowError:\nConfig file must be given as JSON or YAML with keys at top level."
    assert refusal_lines(message, ["-n", "--configfile", str(listed)]) == [
        f"trainbench: {listed}: the file holds a list, not a mapping of settings. Fix: write "
        "`key: value` lines at the top level (e.g. `workloads:` with its entries indented "
        "under it; see config.yaml), or leave the file out."
    ]
    framed = (
        'WorkflowError in file "/x/rules/setup.smk", line 22:\ntrainbench: a.yaml line 1: '
        '`devices` ...\n  File "/x/rules/setup.smk", line 22, in <module>'
    )
    assert refusal_lines(framed, []) == ["trainbench: a.yaml line 1: `devices` ..."]
    assert refusal_lines("MissingInputException: x", []) is None


WEIRD = [None, [], {}, "x", 1.5, True, [None], {"a": 1}, {1: 2}, float("nan")]


@pytest.mark.slow
def test_any_value_at_any_key_is_refused_as_a_config_error_or_accepted(monkeypatch):
    """Every key path of a filled-in config (bundled and own workloads), each given
    values of every kind: the check of one file and validate_config refuse with a
    message or accept; nothing else is raised (a traceback would reach the user)."""
    import copy
    import functools

    import yaml
    from trainbench import config as tbconfig
    from trainbench.config.files import ConfigLayer, _check_content

    monkeypatch.setattr(tbconfig, "load_schema", functools.lru_cache(None)(tbconfig.load_schema))
    base = yaml.safe_load((REPO / "config.yaml").read_text())
    base["workloads"]["mine"] = {"entry": "my_model:build", "python_path": ["examples"]}
    filled = tbconfig.validate_config(copy.deepcopy(base))
    paths: list[tuple] = []

    def walk(value, path):
        paths.append(path)
        if isinstance(value, (dict, list)):
            for key, item in value.items() if isinstance(value, dict) else enumerate(value):
                walk(item, (*path, key))

    walk(filled, ())
    raised = []
    for path in paths:
        for weird in WEIRD:
            config = copy.deepcopy(filled)
            if path:
                parent = functools.reduce(lambda node, key: node[key], path[:-1], config)
                parent[path[-1]] = weird
            else:
                config = weird
            try:
                _check_content(ConfigLayer("x.yaml", copy.deepcopy(config)))
                tbconfig.validate_config(config)
            except tbconfig.ConfigError:
                continue  # refused with a message: one of the two allowed outcomes
            except Exception as error:  # noqa: BLE001 - what the test looks for
                raised.append((path, weird, repr(error)))
    assert len(paths) > 200
    assert raised == []


# -- an own model that breaks the TrainingParts contract (trainbench.measure.parts_contract) ---

OWN_MODEL = """
import torch
from torch import nn
from trainbench import BatchTensorDataset, TrainingParts, make_loader


def build(ctx):
    broken = ctx.workload_settings["settings"]["broken"]
    if broken == "build_raises":
        hidden = ctx.workload_settings["settings"]["hidden"]  # a setting the config lacks
    n = 8 if broken == "tiny_data" else 256
    x = torch.randn(n + 64, 8, generator=ctx.generator(1))
    y = (x.sum(dim=1) > 0).long()
    model = nn.Linear(8, 2)

    def evaluate(model, loader, ctx):
        if broken == "no_metrics":
            return {"samples": 64}
        if broken in ("outputs_differ", "outputs_without_score", "score_returns_a_list"):
            # outputs_differ: one more output in the float64 reference
            float64 = torch.get_default_dtype() == torch.float64 and broken == "outputs_differ"
            extra = {"probe": torch.zeros(3)} if float64 else {}
            logits = torch.cat([model(b["x"].to(ctx.torch_device)) for b in loader])
            return {"outputs": {"logits": logits, **extra}, "samples": 64}
        b = [{k: v.to(ctx.torch_device) for k, v in b.items()} for b in loader]
        hits = sum((model(d["x"]).argmax(1) == d["y"]).sum().item() for d in b)
        return {"metrics": {"accuracy": hits / 64}, "samples": 64}

    def loader(rows, shuffle):
        data = BatchTensorDataset(x=x[rows], y=y[rows])
        return make_loader(data, ctx.batch_size, shuffle, ctx.generator(2), ctx.loader_kwargs)

    parts = dict(
        model=model.to(ctx.torch_device),
        optimizer=torch.optim.Adam(model.parameters(), lr=1e-3),
        train_loader=loader(slice(0, n), True),
        eval_loader=loader(slice(n, n + 64), False),
        loss_fn=lambda model, b: (nn.functional.cross_entropy(model(b["x"]), b["y"]), {}),
        evaluate=evaluate,
        primary_metric="accuracy",
    )
    if broken == "bare_loss":
        parts["loss_fn"] = lambda model, b: nn.functional.cross_entropy(model(b["x"]), b["y"])
    if broken == "outputs_differ":
        parts["score"] = lambda outputs: {"accuracy": 0.5}
    if broken == "metrics_and_score":  # evaluate returns metrics: score would get None
        parts["score"] = lambda outputs: {"accuracy": float(outputs["logits"].mean())}
    if broken == "score_returns_a_list":
        parts["score"] = lambda outputs: [0.5]
    if broken == "a_dict":
        return parts
    if broken == "model_is_a_function":
        parts["model"] = lambda x: x
    if broken == "loader_is_a_number":
        parts["train_loader"] = 5
    return TrainingParts(**parts)
"""

BAD = "bad_input"
BROKEN = {
    "a_dict": (BAD, "returned a builtins.dict, not trainbench.TrainingParts", "Fix:"),
    "model_is_a_function": (BAD, "TrainingParts whose model is", "not a torch.nn.Module"),
    "loader_is_a_number": (BAD, "whose train_loader is a builtins.int", "iterable of batches"),
    "no_metrics": (BAD, "returned neither 'metrics' nor 'outputs'", "no metric 'accuracy'",
                   "has two forms", "Fix:"),
    "metrics_and_score": (BAD, "returned metrics (a dict with keys ['metrics', 'samples']) "
                          "while TrainingParts has a score function", "has two forms",
                          "Fix: drop score=..."),
    "outputs_without_score": (BAD, "returned outputs", "has no score function", "Fix: pass score"),
    "score_returns_a_list": (BAD, "the metrics score(outputs) returned are a builtins.list",
                             "has two forms", "Fix:"),
    "tiny_data": (BAD, "`workloads.mine.batch_sizes` has 16", "holds 8 samples", "one full batch"),
    "bare_loss": (BAD, "loss_fn(model, batch) returned a torch.Tensor", "not (loss, stats)"),
    "outputs_differ": (BAD, "evaluate(model, loader, ctx) returned outputs of another structure",
                       "outputs.probe: absent on the device", "Fix:"),
    "build_raises": ("build_failed", "build(ctx) raised KeyError: 'hidden'", "Fix:"),
}  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("broken", list(BROKEN))
def test_an_own_model_that_breaks_the_contract_fails_under_a_named_class(tmp_path, broken):
    """Each broken part gives a failed record of a named class (bad_input, build_failed)
    whose message names the entry, the function and the contract it broke (never
    `unknown`, never an ok record); the user's own traceback stays in the cell's log."""
    from helpers import tiny_config
    from trainbench import config as tbconfig
    from trainbench.launch.launcher import run_cell

    (tmp_path / "own").mkdir()
    (tmp_path / "own" / "broken_model.py").write_text(OWN_MODEL)
    entry = {"entry": "broken_model:build", "python_path": [str(tmp_path / "own")],
             "batch_sizes": [16], "epochs": 1, "warmup_steps": 1,
             "settings": {"broken": broken}}  # fmt: skip
    config = tbconfig.validate_config(tiny_config(devices=["cpu"], workloads={"mine": entry}))
    spec = tbconfig.cell_spec(config, tbconfig.Cell("mine", "cpu", 16, 0))
    spec["eval_parity"] = True  # the evaluation comparison, as on a device not the baseline
    record = run_cell(spec, tmp_path / "metrics.json", tmp_path / "cell.log")
    assert record["status"] == "failed", record.get("result", {}).get("eval_parity")
    error = record["error"]
    error_class, *fragments = BROKEN[broken]
    assert error["class"] == error_class, error
    assert "broken_model:build" in error["message"] or broken == "tiny_data", error["message"]
    for fragment in fragments:
        assert fragment in error["message"], (fragment, error["message"])
    if broken != "tiny_data":  # the contract is named, with where to read it
        assert "the contract: docs/configuration.md" in error["message"], error["message"]
    if broken == "build_raises":  # the user's line, in the log and the record's traceback
        line = 'hidden = ctx.workload_settings["settings"]["hidden"]'
        assert "broken_model.py" in error["traceback"] and line in error["traceback"]
        assert line in (tmp_path / "cell.log").read_text()


# -- names that would leave results/ (trainbench.config.names) ---------------------


@pytest.mark.e2e
def test_no_record_is_written_outside_results_whatever_the_workload_is_named(pristine, tmp_path):
    """A real run (not a dry run) of a config whose own model is named to climb out of
    results/: refused before any job, and no file appears anywhere outside the workflow
    copy (nor a record inside it). The Python route is closed too: no cell, so no
    record path, exists for such a name."""
    import shutil

    from trainbench import config as tbconfig

    nest = tmp_path / "a" / "b" / "c"
    workflow = nest / "wf"
    shutil.copytree(pristine, workflow, symlinks=True)
    shutil.copytree(REPO / "examples", workflow / "examples")
    (workflow / "config.yaml").write_text(BASE)
    escape = "../../../elsewhere"
    (workflow / "bad.yaml").write_text(
        f"workloads:\n  {escape}:\n    entry: 'my_model:build'\n    python_path: [examples]\n"
        "    batch_sizes: [32]\n    epochs: 1\n"
    )
    before = {p for p in tmp_path.rglob("*") if workflow not in p.parents}
    proc = run_snakemake(workflow, "--cores", "1", "--configfile", "bad.yaml", timeout=300)
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0, output
    assert f"has the name {escape!r}" in output and "Fix: rename it" in output, output
    after = {p for p in tmp_path.rglob("*") if workflow not in p.parents}
    assert after == before, sorted(map(str, after - before))
    assert not list(workflow.rglob("metrics.json"))
    assert not (workflow / "results").exists()
    with pytest.raises(tbconfig.ConfigError, match="Fix: rename it"):
        tbconfig.Cell(escape, "cpu", 32, 0)
