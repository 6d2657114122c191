"""CPU feature detection: the instruction set found (Linux /proc/cpuinfo, macOS sysctl,
ONEDNN_MAX_CPU_ISA), the kernel probe under CPU autocast, and the cell it turns into
an ``unavailable`` record instead of a crash inside oneDNN."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from types import SimpleNamespace

import pytest
import torch
from conftest import SCRIPTS, small_config
from trainbench import config as tbconfig
from trainbench.launch import environment
from trainbench.measure import cpu_features as cf

ONEDNN_LSTM = (
    "could not create a primitive descriptor for the LSTM forward propagation primitive. "
    "Run workload with environment variable ONEDNN_VERBOSE=all to get additional diagnostic "
    "information."
)


def test_linux_flags_come_from_proc_cpuinfo(tmp_path, monkeypatch):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu sse avx avx2 fma\n\nprocessor\t: 1\n")
    monkeypatch.setattr(sys, "platform", "linux")
    flags, source = cf.cpu_flags(cpuinfo)
    assert {"avx2", "fma"} <= flags and "avx512_bf16" not in flags and source == str(cpuinfo)


def test_without_proc_the_flags_are_none_and_say_so(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "platform", "linux")
    assert cf.cpu_flags(tmp_path / "no-such-cpuinfo") == (set(), "none")
    monkeypatch.setattr(cf, "cpu_flags", lambda: (set(), "none"))
    assert environment.cpu_precision_flags() == []


def test_macos_flags_come_from_sysctl_and_never_from_proc(monkeypatch):
    """macOS: sysctl hw.optional names set to 1, lower-cased; /proc is never read."""
    out = "hw.optional.arm.FEAT_BF16: 1\nhw.optional.arm.FEAT_FP16: 0\nhw.optional.neon: 1\n"
    calls = []

    def fake_run(argv, **kwargs):
        calls.append(argv)
        return SimpleNamespace(stdout=out, returncode=0)

    monkeypatch.setattr(sys, "platform", "darwin")
    monkeypatch.setattr(cf.subprocess, "run", fake_run)
    flags, source = cf.cpu_flags(cpuinfo=_Forbidden())
    assert flags == {"arm.feat_bf16", "neon"} and source == "sysctl hw.optional"
    assert calls == [["sysctl", "hw.optional"]]
    assert environment.cpu_precision_flags() == ["arm.feat_bf16", "neon"]


def test_macos_without_sysctl_has_no_flags(monkeypatch):
    def missing(*args, **kwargs):
        raise FileNotFoundError("sysctl")

    monkeypatch.setattr(sys, "platform", "darwin")
    monkeypatch.setattr(cf.subprocess, "run", missing)
    assert cf.cpu_flags() == (set(), "none")


class _Forbidden:
    """A path that fails the test when touched."""

    def __getattr__(self, name):
        raise AssertionError(f"/proc/cpuinfo read on macOS ({name})")


def test_isa_facts_honour_the_variables_that_lower_the_instruction_set(monkeypatch):
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    monkeypatch.delenv("ATEN_CPU_CAPABILITY", raising=False)
    monkeypatch.setattr(cf, "cpu_flags", lambda: ({"avx2", "fma", "avx512f"}, "/proc/cpuinfo"))
    facts = cf.isa_facts()
    assert facts["torch_capability"] == torch.backends.cpu.get_cpu_capability()
    assert facts["onednn_max_cpu_isa"] == "AVX2" and facts["aten_cpu_capability"] is None
    assert facts["precision_flags"] == ["avx2", "avx512f"]  # fma decides no precision
    text = cf.isa_text(facts)
    assert "oneDNN capped at AVX2 by ONEDNN_MAX_CPU_ISA" in text and "flags avx2 avx512f" in text
    assert "ONEDNN_MAX_CPU_ISA" in environment.BEHAVIOUR_VARIABLES


def test_probe_finds_each_kernel_kind_once():
    model = torch.nn.Sequential(
        torch.nn.Linear(4, 8), torch.nn.Linear(8, 8), torch.nn.LSTM(8, 8), torch.nn.ReLU()
    )
    assert sorted(cf.probe_modules(model)) == ["LSTM", "Linear"]


def test_a_failing_kernel_is_one_line_naming_dtype_kernel_and_isa(monkeypatch):
    def fail_lstm(module, dtype):
        if isinstance(module, torch.nn.LSTM):
            raise RuntimeError(ONEDNN_LSTM)

    monkeypatch.setattr(cf, "_run_probe", fail_lstm)
    monkeypatch.setattr(
        cf, "isa_facts", lambda: {"torch_capability": "AVX2", "precision_flags": ["avx2"]}
    )
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.LSTM(8, 8))
    reason = cf.autocast_unavailable(model, "bfloat16")
    assert reason == (
        "CPU autocast bfloat16 unavailable: LSTM fails under it (could not create a primitive "
        "descriptor for the LSTM forward propagation primitive); instruction set AVX2 (torch); "
        "flags avx2"
    )
    assert cf.autocast_unavailable(torch.nn.Linear(8, 8), "bfloat16") is None


def test_probe_leaves_the_model_untouched():
    model = torch.nn.Linear(8, 8)
    before = model.weight.detach().clone()
    assert cf.autocast_unavailable(model, "bfloat16") is None
    assert model.weight.grad is None and torch.equal(model.weight, before)


@pytest.mark.skipif(
    "avx2" not in cf.cpu_flags()[0], reason="ONEDNN_MAX_CPU_ISA=AVX2 needs an x86 CPU with AVX2"
)
def test_probe_leaves_torchs_random_state_as_it_was():
    """A bf16 cell and its float32 baseline of the same run seed must draw the same
    dropout masks and batches after the probe (parity pairs them by run seed)."""
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Conv2d(1, 2, 3))
    torch.manual_seed(7)
    expected = torch.rand(3)
    torch.manual_seed(7)
    cf.autocast_unavailable(model, "bfloat16")
    assert torch.equal(torch.rand(3), expected)


def test_onednn_capped_at_avx2_cannot_run_a_bf16_lstm():
    """The real kernel, not a flag table: with oneDNN capped at AVX2 (no bf16
    instructions) the bf16 LSTM has no primitive and the probe says so; a Linear runs.
    A fresh process, because oneDNN reads the variable once."""
    code = textwrap.dedent(
        f"""
        import sys; sys.path.insert(0, {str(SCRIPTS)!r})
        import torch
        from trainbench.measure.cpu_features import autocast_unavailable
        print(autocast_unavailable(torch.nn.Linear(8, 8), "bfloat16"))
        print(autocast_unavailable(torch.nn.LSTM(8, 8), "bfloat16"))
        """
    )
    env = {**os.environ, "ONEDNN_MAX_CPU_ISA": "AVX2"}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert out[0] == "None"
    assert out[1].startswith("CPU autocast bfloat16 unavailable: LSTM fails under it (")
    assert "oneDNN capped at AVX2 by ONEDNN_MAX_CPU_ISA" in out[1]


def test_a_cell_whose_kernel_fails_is_unavailable_not_a_crash(tmp_path, monkeypatch):
    """The child's outcome for a CPU autocast cell whose kernel probe fails: status
    unavailable, the probe's line as the reason, the ISA in the device facts."""
    from trainbench.launch import child

    config = small_config()
    config["device_settings"] = {"cpu": {"threads": 1, "autocast": "bf16"}}
    config = tbconfig.validate_config(config)
    spec = tbconfig.cell_spec(config, tbconfig.Cell("image_cnn", "cpu", 8, 0), str(tmp_path))
    seen = []

    def unavailable(model, dtype):
        seen.append((type(model).__name__, dtype))
        return f"CPU autocast {dtype} unavailable: Conv2d fails under it (test)"

    monkeypatch.setattr(cf, "autocast_unavailable", unavailable)
    from trainbench.workloads import image_cnn

    image_cnn.prepare_data(config["workloads"]["image_cnn"], tmp_path, config["seed"])
    facts: dict = {}
    outcome = child.run(spec, 1, facts)
    assert outcome["status"] == "unavailable", outcome
    assert outcome["reason"] == "CPU autocast bfloat16 unavailable: Conv2d fails under it (test)"
    assert seen and seen[0][1] == "bfloat16"
    assert outcome["child_environment"]["device"]["isa"]["torch_capability"]


@pytest.mark.cpu_autocast("bfloat16", "Linear")
def test_the_marker_runs_a_test_whose_kernels_exist():
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert torch.nn.Linear(8, 8)(torch.randn(2, 8)).dtype == torch.bfloat16


def test_a_precision_unavailable_device_is_one_attention_row():
    """Every cell of a CPU that lacks the kernel carries the same one-line reason, so
    the report lists the device once, not once per cell."""
    from stats_helpers import frame, run
    from trainbench.analysis.stats.overview import attention_table

    reason = (
        "CPU autocast bfloat16 unavailable: LSTM fails under it (could not create a "
        "primitive descriptor for the LSTM forward propagation primitive); instruction set "
        "AVX2 (torch); flags avx2"
    )
    rows = [run("image_cnn", "cpu", 8, r) for r in range(3)]
    rows += [
        run("two_tower", "cpu", bs, r, status="unavailable", reason=reason)
        for bs in (32, 64)
        for r in range(3)
    ]
    table = attention_table(frame(rows))
    assert len(table) == 1
    (row,) = table.to_dict("records")
    assert (row["status"], row["device"], row["workload"]) == ("unavailable", "cpu", "two_tower")
    assert row["detail"] == reason and row["cells"] == 6 and row["batch_sizes"] == "32, 64"
