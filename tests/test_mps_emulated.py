"""Whole cells under MPS's rules on any machine (``make test-mps-emulated``): every
bundled workload and the example own model, each with its canary, through the real
launcher on the MPS emulator (trainbench.measure.mps_emulator), and each of issue 50's
findings, restored in the cell's process, failing it.

A record passes when the cell ran, its canary and evaluation parity passed, the harness
added no host wait inside a timed step beyond what the record itself declares (the
optimizer's, 0 for the bundled workloads, which take the fused kernel on MPS), the peak
is the allocator's own and equals the emulated allocator's, the memory limit is the cap
in force, and the event pairs the emulator reversed were read without failing the cell.
Nothing here is an MPS speed. (No Mac ran this: docs/how-it-measures.md says what the
emulator cannot show.)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from helpers import REPO
from trainbench.common.records import read_record

pytestmark = pytest.mark.mps_emulated

BUNDLED = ["image_cnn", "matmul", "text_multilabel", "clip", "two_tower"]
OWN = "my_model"
CONFIGS = ["config.yaml", "examples/my_model.yaml"]
HARNESS = str(Path("scripts", "trainbench", "measure"))


def mps_ready(out: Path, workloads: list[str], env: dict | None = None):
    argv = [sys.executable, "scripts/mps_ready.py", *CONFIGS, "--out", str(out)]
    for workload in workloads:
        argv += ["--workload", workload]
    return subprocess.run(
        argv, cwd=REPO, capture_output=True, text=True, timeout=900, env=env or os.environ.copy()
    )


def suite_problems(record: dict, bundled: bool) -> list[str]:
    """What keeps ``record`` (a short cell on the emulated MPS) from passing the suite."""
    if record.get("status") != "ok":
        return [f"status {record.get('status')}: {(record.get('error') or {}).get('message')}"]
    emulator = (record.get("environment") or {}).get("mps_emulator") or {}
    if not emulator:
        return ["the cell did not run on the emulator"]
    problems = []
    if (record.get("numerics") or {}).get("status") != "pass":
        problems.append(f"canary {(record.get('numerics') or {}).get('status')}")
    result = record.get("result") or {}
    if result.get("kind") != "training":
        return problems
    if (result.get("eval_parity") or {}).get("status") != "pass":
        problems.append(f"evaluation parity {(result.get('eval_parity') or {}).get('status')}")
    syncs = emulator["syncs"]
    harness = sum(n for where, n in syncs["in_timed_steps_where"].items() if HARNESS in where)
    declared = result["settings"]["optimizer_host_waits_per_step"]
    if bundled and declared:
        problems.append(f"a bundled workload declares {declared} optimizer host wait per step")
    optimizer_steps = syncs["timed_steps_seen"]
    if harness != declared * optimizer_steps:
        where = syncs["in_timed_steps_where"]
        problems.append(f"{harness} harness host waits in {optimizer_steps} timed steps: {where}")
    memory = result["memory"]
    allocator = emulator["allocator"]
    if "max_memory_allocated" not in memory["device"]["method"]:
        problems.append(f"peak not the allocator's: {memory['device']['method']}")
    if memory["device"]["peak_bytes"] != allocator["peak_allocated_bytes"]:
        problems.append(
            f"peak {memory['device']['peak_bytes']} != allocator {allocator['peak_allocated_bytes']}"
        )
    cap = int(allocator["high_watermark_ratio"] * allocator["recommended_max_bytes"])
    if memory["limit_bytes"] != cap:
        problems.append(f"limit {memory['limit_bytes']} is not the cap in force {cap}")
    steps = result["steps"]
    if emulator["events"]["reversed_pairs_refused"] and not steps.get("event_pairs_refused"):
        problems.append("the emulator refused event pairs the record does not count")
    return problems


@pytest.fixture(scope="module")
def readiness(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("mps-ready")
    done = mps_ready(out, [*BUNDLED, OWN])
    print(done.stdout)
    summary = json.loads((out / "readiness.json").read_text())
    return {v["workload"]: v for v in summary["workloads"]} | {"_run": done}


@pytest.mark.parametrize("workload", [*BUNDLED, OWN])
def test_the_workload_runs_under_mps_rules(readiness, workload):
    verdict = readiness[workload]
    assert verdict["ready"], verdict["first_problem"]
    assert f"mps-ready: {workload}: ready" in readiness["_run"].stdout
    record = read_record(verdict["record"])
    assert suite_problems(record, bundled=workload in BUNDLED) == []
    assert readiness["_run"].returncode == 0


# Each finding of issue 50, put back in the cell's process (a sitecustomize on the
# child's PYTHONPATH): the suite must fail, naming it.
RESTORED = {
    "float64 on the device": (
        "import trainbench.measure.training as m\nm.host_float64 = lambda t: t.detach().double().cpu()",
        "no float64 on the device",
    ),
    "float64 in the canary's copy out": (
        "import torch, trainbench.measure.canary as m\n"
        "m.host_float64 = lambda t: t.detach().to('cpu', torch.float64)",
        "no cast to float64 in a copy out of the device",
    ),
    "a high watermark alone below the low one": (
        "import os\nos.environ['PYTORCH_MPS_HIGH_WATERMARK_RATIO'] = '1.0'\n"
        "import trainbench.measure.mps_device as m\n"
        "_apply = m.MpsDevice.apply_settings\n"
        "def apply(self):\n    self.settings['memory_fraction'] = None\n    return _apply(self)\n"
        "m.MpsDevice.apply_settings = apply",
        "invalid low watermark ratio 1.4",
    ),
    "event pairs read as they come": (
        "import trainbench.measure.trackers.steps as m\n"
        "m.event_step_seconds = lambda marks, s: ([a.elapsed_time(b) / 1000 for a, b in "
        "zip(marks, marks[1:])], 0, 0)",
        "event order",
    ),
    "a sampled peak and the recommended maximum as the limit": (
        "import trainbench.measure.mps_device as m\n"
        "def reset(self):\n    self._sampled_peak = None\n    self.samples_memory_per_step = True\n"
        "m.MpsDevice.reset_peak_memory = reset\n"
        "m.MpsDevice.memory_limit_bytes = lambda self: m._mps_call('recommended_max_memory')",
        "peak not the allocator's",
    ),
    "Adam fused on CUDA only": (
        "import trainbench.measure.devices as m\n"
        "m.fused_optimizer = lambda s, d: True if d == 'cuda' else None\n"
        "import trainbench.workloads.common as w\nw.fused_optimizer = m.fused_optimizer",
        "optimizer host wait per step",
    ),
}


@pytest.mark.parametrize("finding", RESTORED)
def test_each_finding_restored_fails_the_suite(tmp_path, finding):
    patch, expected = RESTORED[finding]
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(textwrap.dedent(patch) + "\n")
    env = os.environ.copy()
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), env.get("PYTHONPATH")]))
    workload = "image_cnn"
    done = mps_ready(tmp_path / "out", [workload], env)
    verdict = json.loads((tmp_path / "out" / "readiness.json").read_text())["workloads"][0]
    problems = [verdict["first_problem"] or ""]
    if verdict["ready"]:
        problems = suite_problems(read_record(verdict["record"]), bundled=True)
    assert problems and any(expected in p for p in problems), (problems, done.stdout[-2000:])


RULES = r"""
import json, os, sys
import torch
from trainbench.measure.mps_emulator import install
os.environ["PYTORCH_MPS_HIGH_WATERMARK_RATIO"] = sys.argv[1]
os.environ["PYTORCH_MPS_LOW_WATERMARK_RATIO"] = sys.argv[2]
emu = install({"recommended_max_bytes": 1 << 20, "allocator_stats": sys.argv[3] == "1"})
seen = {}

def attempt(name, fn):
    try:
        fn()
        seen[name] = "ok"
    except Exception as exc:
        seen[name] = f"{type(exc).__name__}: {exc}"

attempt("first allocation", lambda: torch.ones(4, device="mps"))
x = torch.ones(4, device="mps") if seen["first allocation"] == "ok" else None
if x is not None:
    attempt("cast", lambda: x.double())
    attempt("copy out cast", lambda: x.to("cpu", torch.float64))
    attempt("copy into float64 host", lambda: torch.zeros(4, dtype=torch.float64).copy_(x))
    attempt("complex128", lambda: torch.zeros(2, dtype=torch.complex128, device="mps"))
    attempt("pin", lambda: torch.ones(2).pin_memory())
    attempt("numpy", lambda: x.numpy())
    attempt("mixed", lambda: x + torch.ones(4))
    attempt("cpu scalar", lambda: x * torch.tensor(2.0))
    attempt("oversize", lambda: torch.empty(1 << 20, device="mps"))
    torch.mps.set_per_process_memory_fraction(0.5)
    attempt("past the fraction", lambda: torch.empty(150_000, device="mps"))
    a, b = torch.mps.Event(enable_timing=True), torch.mps.Event(enable_timing=True)
    b.record(); a.record()
    attempt("reversed events", lambda: a.elapsed_time(b))
    attempt("cuda", lambda: torch.cuda.synchronize())
    x.sum().item()
    attempt("accelerator peak", lambda: torch.accelerator.max_memory_allocated())
print(json.dumps({"seen": seen, "facts": emu.refresh()}))
"""


@pytest.mark.parametrize(
    ("high", "low", "stats"), [("1.7", "1.4", "1"), ("1.0", "1.4", "1"), ("1.7", "1.4", "0")]
)
def test_the_emulator_holds_each_rule_with_mps_messages(tmp_path, high, low, stats):
    done = subprocess.run(
        [sys.executable, "-c", RULES, high, low, stats],
        cwd=REPO, capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO / "scripts")},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.splitlines()[-1])["seen"]
    if high == "1.0":  # the README's old example: the high ratio alone below the low one
        assert "invalid low watermark ratio 1.4" in seen["first allocation"]
        return
    assert seen["first allocation"] == "ok"
    double = "Cannot convert a MPS Tensor to float64 dtype"
    assert "no float64 on the device" in seen["cast"] and double in seen["cast"]
    assert seen["cast"].startswith("EmulatedMpsTypeError")  # a TypeError, as MPS raises
    assert "in attempt (" in seen["cast"] or "<lambda>" in seen["cast"]  # the line, named
    assert "no cast to float64 in a copy out" in seen["copy out cast"]
    assert "no cast to float64 in a copy out" in seen["copy into float64 host"]
    assert "no float64 on the device" in seen["complex128"]
    assert "no pinned memory for MPS" in seen["pin"]
    assert "no NumPy view" in seen["numpy"] and "Use Tensor.cpu()" in seen["numpy"]
    assert "one device per op" in seen["mixed"] and seen["cpu scalar"] == "ok"
    assert "MPS backend out of memory" in seen["oversize"]  # past 1.7 x 1 MiB
    assert "max allowed: 512.00 KiB" in seen["past the fraction"]  # the fraction replaced it
    assert (
        "event order" in seen["reversed events"]
        and "was not recorded after" in seen["reversed events"]
    )
    assert "no CUDA call on MPS" in seen["cuda"]
    if stats == "1":
        assert seen["accelerator peak"] == "ok"
    else:  # a torch whose MPS allocator is no device allocator (before pytorch#186748)
        assert "not a DeviceAllocator" in seen["accelerator peak"]


MODELS = REPO / "tests" / "data" / "mps_models"


def _line(text: str) -> int:
    lines = (MODELS / "models.py").read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if text in line)


WHERE = "tests/data/mps_models/models.py line"
NOT_READY = {
    "float64_forward": f"no float64 on the device, in forward ({WHERE} "
    f"{_line('dtype=torch.float64, device=x.device')})",
    "float64_eval": f"no float64 on the device, in evaluate ({WHERE} {_line('.double().softmax')})",
    "cpu_weight": f"one device per op, in loss ({WHERE} {_line('weight=weight')})",
}


def test_own_models_are_ready_or_name_the_rule_and_the_line(tmp_path):
    """The user-facing check on own models of several kinds (LSTM, GRU, convolutions
    with batch and group norm, a transformer with padding masks and attention, an
    embedding bag, a regression with cdist and einsum and a fused AdamW, a generator on
    the device with a state dict saved and loaded): the correct ones ready, each broken
    one not, with its rule and line; exit status 1."""
    done = subprocess.run(
        [sys.executable, "scripts/mps_ready.py", "config.yaml", str(MODELS / "models.yaml"),
         "--out", str(tmp_path)],
        cwd=REPO, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    verdicts = {
        v["workload"]: v for v in json.loads((tmp_path / "readiness.json").read_text())["workloads"]
    }
    assert len(verdicts) == 10, done.stdout + done.stderr[-2000:]
    for name, verdict in verdicts.items():
        if name in NOT_READY:
            assert not verdict["ready"] and NOT_READY[name] in verdict["first_problem"], verdict
            assert f"mps-ready: {name}: not ready: " in done.stdout
        else:
            assert verdict["ready"], (name, verdict["first_problem"])
    assert done.returncode == 1
    assert "mps-ready: 7 of 10 workloads ready" in done.stdout
