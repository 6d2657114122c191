"""The precision class from the model (trainbench.measure.tf32_reach): a module scan under
the TF32 flags in force, a probe that evaluates one batch with TF32 off, the decision
from both, and the evaluation's class that reads it; records without it keep their
class. CPU only: the probe's mechanics run on the CPU with a model that reads torch's
TF32 flag as a CUDA kernel would."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from torch import nn
from trainbench.common.precision_classes import precision_of, tf32_reaches, training_reason
from trainbench.measure import eval_parity, tf32_reach

DEFAULTS = {"cublas": False, "cudnn": True, "override": False}  # PyTorch's defaults
# a CUDA cell's recorded settings under PyTorch's defaults
SETTINGS = {"tf32_matmul": False, "tf32_cudnn": True, "tf32_override": None,
            "float32_matmul_precision": "highest"}  # fmt: skip
IDENTICAL = {"status": "identical", "first_difference": None}


def mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))


class Convolutional(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3)
        self.head = nn.Linear(4, 2)


class Recurrent(nn.Module):
    def __init__(self, rnn: nn.Module):
        super().__init__()
        self.rnn, self.head = rnn, nn.Linear(8, 2)


def reached(model: nn.Module, **flags) -> list[str]:
    return sorted(tf32_reach.scan(model, {**DEFAULTS, **flags})["reached"])


# ----------------------------------------------------------------------------- scan


def test_the_scan_finds_what_tf32_reaches_under_the_flags_in_force():
    assert reached(mlp()) == []  # Linear only, cuBLAS's flag off (the default)
    assert reached(mlp(), cublas=True) == ["cuBLAS matmuls"]
    assert reached(Convolutional()) == ["cuDNN convolutions"]
    assert reached(Convolutional(), cudnn=False) == []
    assert reached(nn.ConvTranspose1d(2, 2, 3)) == ["cuDNN convolutions"]
    assert reached(Recurrent(nn.GRU(4, 8))) == ["cuDNN RNNs"]
    assert reached(Recurrent(nn.LSTM(4, 8)), cudnn=False) == []
    assert reached(Recurrent(nn.GRUCell(4, 8))) == []  # a cell is cuBLAS matmuls, not cuDNN
    assert reached(Recurrent(nn.GRUCell(4, 8)), cublas=True) == ["cuBLAS matmuls"]
    # nn.MultiheadAttention (its eval fast path) counts with either flag on
    attention = nn.MultiheadAttention(8, 2).eval()
    assert reached(attention) == ["nn.MultiheadAttention's eval fast path"]
    assert reached(attention, cudnn=False, cublas=True) == [
        "cuBLAS matmuls",
        "nn.MultiheadAttention's eval fast path",
    ]
    assert reached(attention, cudnn=False) == []
    encoder = nn.TransformerEncoderLayer(8, 2, 16).eval()
    assert "nn.MultiheadAttention's eval fast path" in reached(encoder)
    # NVIDIA_TF32_OVERRIDE=0 switches TF32 off in the libraries whatever the flags
    assert reached(Convolutional(), cublas=True, override=True) == []


def test_the_scan_names_the_modules_it_found():
    assert tf32_reach.scan(mlp(), DEFAULTS)["modules"] == "Linear ×2 only"
    found = tf32_reach.scan(Convolutional(), DEFAULTS)
    assert found["modules"] == "Conv2d ×1, Linear ×1"
    assert found["found"]["cuBLAS matmuls"] == {"Linear": 1}
    assert tf32_reach.scan(nn.ReLU(), DEFAULTS)["modules"].startswith("no convolution")


# ----------------------------------------------------------------------------- decision


@pytest.mark.parametrize(
    ("model", "flags", "probed", "reaches", "by"),
    [
        (mlp(), {}, IDENTICAL, False, "scan and probe"),
        (mlp(), {}, {"status": "differs", "first_difference": "0 (Linear)"}, True, "probe"),
        (mlp(), {"cublas": True}, IDENTICAL, True, "scan"),
        (Convolutional(), {}, IDENTICAL, True, "scan"),
        (Convolutional(), {}, {"status": "differs", "first_difference": "conv"}, True,
         "scan and probe"),
        # the probe cannot rule a functional op out: TF32 assumed, the flags' class stands
        (mlp(), {}, {"status": "not reproducible", "first_difference": "0"}, True,
         "neither: assumed"),
        (mlp(), {}, {"status": "error", "reason": "RuntimeError: boom"}, True,
         "neither: assumed"),
        (mlp(), {"cudnn": False}, {"status": "not run", "reason": "no TF32 flag on"}, False,
         "settings"),
        (Convolutional(), {"override": True}, {"status": "error", "reason": "x"}, False,
         "settings"),
        (Convolutional(), {"override": True}, {"status": "differs", "first_difference": "c"},
         True, "probe"),
    ],
)  # fmt: skip
def test_the_scan_and_the_probe_decide_together(model, flags, probed, reaches, by):
    flags = {**DEFAULTS, **flags}
    found = tf32_reach.decide(tf32_reach.scan(model, flags), probed, flags)
    assert found["reaches"] is reaches and found["decided_by"] == by, found["why"]


def test_the_reason_says_what_the_scan_and_the_probe_found():
    found = tf32_reach.decide(tf32_reach.scan(mlp(), DEFAULTS), IDENTICAL, DEFAULTS)
    assert found["why"] == (
        "TF32 reaches no op of this model (scan: Linear ×2 only, cuDNN's TF32 flag on, "
        "cuBLAS's off; probe: outputs bit-identical with TF32 off)"
    )
    conv = tf32_reach.decide(tf32_reach.scan(Convolutional(), DEFAULTS), IDENTICAL, DEFAULTS)
    assert conv["why"].startswith("TF32 reaches cuDNN convolutions (Conv2d ×1) (scan:")
    hidden = {"status": "differs", "first_difference": "model (Own) (4, 2) torch.float32"}
    functional = tf32_reach.decide(tf32_reach.scan(mlp(), DEFAULTS), hidden, DEFAULTS)
    assert "an op the module scan cannot see" in functional["why"]
    assert "first at model (Own)" in functional["why"]


class FakeCtx(SimpleNamespace):
    pass


def cell(device: str, settings: dict, amp: str | None = None) -> FakeCtx:
    return FakeCtx(torch_device=SimpleNamespace(type=device), settings_in_force=dict(settings),
                   amp=SimpleNamespace(enabled=amp is not None, dtype=amp),
                   spec={})  # fmt: skip


@pytest.fixture
def flags_as_recorded(monkeypatch):
    """torch's flags read again give what the cell recorded (no CUDA here)."""
    monkeypatch.setattr(tf32_reach, "matmul_facts", lambda backend: dict(SETTINGS))


def test_measure_probes_only_a_cuda_float32_cell_with_a_flag_on(flags_as_recorded):
    calls = []

    def probe(parts, ctx):
        calls.append(ctx)
        return dict(IDENTICAL)

    parts = SimpleNamespace(model=mlp())
    found = tf32_reach.measure(parts, cell("cuda", SETTINGS), probe)
    assert found["reaches"] is False and len(calls) == 1
    assert tf32_reach.measure(parts, cell("cpu", {}), probe)["reaches"] is None
    assert tf32_reach.measure(parts, cell("mps", {}), probe)["probe"]["status"] == "not run"
    under_amp = tf32_reach.measure(parts, cell("cuda", SETTINGS, "bfloat16"), probe)
    assert under_amp["reaches"] is None and "autocast bfloat16" in under_amp["why"]
    assert len(calls) == 1  # neither off CUDA nor under autocast


def test_measure_reads_the_flags_again_and_says_when_they_changed(monkeypatch):
    now = {**SETTINGS, "tf32_matmul": True, "float32_matmul_precision": "high"}
    monkeypatch.setattr(tf32_reach, "matmul_facts", lambda backend: dict(now))
    found = tf32_reach.measure(SimpleNamespace(model=mlp()), cell("cuda", SETTINGS),
                               lambda parts, ctx: dict(IDENTICAL))  # fmt: skip
    assert found["reaches"] is True and found["ops"] == ["cuBLAS matmuls"]
    assert "flags changed during the cell: tf32_matmul False at the start, True now" in found["why"]


def test_record_never_raises_and_skips_a_reference_run():
    ctx = cell("cuda", SETTINGS)
    found = tf32_reach.record(SimpleNamespace(model=None), ctx)  # the scan raises
    assert found["reaches"] is None and found["why"].startswith("not decided: AttributeError")
    assert ctx.settings_in_force["tf32_reach"] is found
    reference = cell("cpu", {})
    reference.spec = {"reference": True}
    assert tf32_reach.record(SimpleNamespace(model=mlp()), reference) is None
    assert "tf32_reach" not in reference.settings_in_force


# ----------------------------------------------------------------------------- probe


class ReadsTheFlag(nn.Module):
    """A model whose one op behaves as a cuDNN kernel would with TF32: its result
    depends on torch's cuDNN TF32 flag (rounded to 10 mantissa bits when on)."""

    def __init__(self):
        super().__init__()
        self.body = nn.Linear(8, 8)
        self.head = nn.Linear(8, 2)

    def forward(self, x):
        h = self.body(x)
        if torch.backends.cudnn.allow_tf32:
            h = (h * 1024).round() / 1024
        return self.head(h)


class Noisy(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(8, 2)

    def forward(self, x):
        return self.body(x) + torch.rand(1)  # another draw each evaluation


def probe_parts(model: nn.Module, evaluate=None):
    batches = [{"x": torch.randn(4, 8, generator=torch.Generator().manual_seed(i))}
               for i in range(3)]  # fmt: skip

    def outputs(model, loader, ctx):
        return {"outputs": torch.cat([model(b["x"]) for b in loader]), "samples": 4}

    return SimpleNamespace(model=model, eval_loader=batches, evaluate=evaluate or outputs)


def probed(parts) -> dict:
    before = tf32_reach.tf32_state()
    parts.model.train()
    found = tf32_reach.probe(parts, cell("cpu", {}))
    assert tf32_reach.tf32_state() == before  # the flags restored
    assert parts.model.training  # and the model's mode
    return found


def test_the_probe_sees_what_the_flags_change_and_where():
    assert probed(probe_parts(mlp()))["status"] == "identical"
    found = probed(probe_parts(ReadsTheFlag()))
    assert found["status"] == "differs", found
    # the first output that differs: the op after the rounding, not the Linear before it
    assert found["first_difference"].startswith("head (Linear) (4, 2)")
    noisy = probed(probe_parts(Noisy()))
    assert noisy["status"] == "not reproducible"
    assert noisy["first_difference"].startswith("model (Noisy)")


def test_the_probe_evaluates_one_batch_and_metrics_only_models_are_probed_through_modules():
    seen = []

    def metrics_only(model, loader, ctx):
        batches = list(loader)
        seen.append(len(batches))
        hits = sum(int(model(b["x"]).argmax(1).sum()) for b in batches)
        return {"metrics": {"accuracy": hits / 4}, "samples": 4}

    found = probed(probe_parts(ReadsTheFlag(), metrics_only))
    assert seen == [1, 1, 1] and found["status"] == "differs"  # a module's output differs


def test_a_failing_probe_is_recorded_and_restores_the_flags():
    def fails_with_tf32_off(model, loader, ctx):
        if not torch.backends.cudnn.allow_tf32:
            raise RuntimeError("no kernel")
        return {"outputs": model(next(iter(loader))["x"]), "samples": 4}

    found = probed(probe_parts(mlp(), fails_with_tf32_off))
    assert found["status"] == "error" and found["reason"] == "RuntimeError: no kernel"
    empty = probed(SimpleNamespace(model=mlp(), eval_loader=[], evaluate=None))
    assert empty["status"] == "error" and empty["reason"].startswith("StopIteration")


def test_tf32_off_switches_both_flags_off_and_back():
    before = tf32_reach.tf32_state()
    torch.set_float32_matmul_precision("high")
    try:
        with tf32_reach.tf32_off():
            assert not torch.backends.cuda.matmul.allow_tf32
            assert not torch.backends.cudnn.allow_tf32
            assert torch.get_float32_matmul_precision() == "highest"
        assert torch.get_float32_matmul_precision() == "high"
        assert torch.backends.cudnn.allow_tf32
    finally:
        tf32_reach.restore_tf32(before)


def test_tf32_off_keeps_to_the_per_op_settings_where_the_apis_are_mixed():
    if not hasattr(torch._C, "_get_fp32_precision_getter"):
        pytest.skip("torch before 2.9: the legacy flags only")
    before = tf32_reach.tf32_state()
    try:
        torch.backends.cudnn.rnn.fp32_precision = "ieee"  # the legacy getters now raise
        mixed = tf32_reach.tf32_state()
        assert mixed["api"] == "per-op" and mixed["cuda.conv"] == "tf32"
        with tf32_reach.tf32_off():
            assert torch.backends.cudnn.conv.fp32_precision == "ieee"
            assert torch.backends.cuda.matmul.fp32_precision == "ieee"
        assert tf32_reach.tf32_state() == mixed
    finally:
        tf32_reach.restore_tf32(before)
    assert tf32_reach.tf32_state() == before and torch.backends.cudnn.allow_tf32


# ----------------------------------------------------------------------------- classes


def with_reach(reaches: bool | None, **settings) -> dict:
    facts = {**SETTINGS, **settings}
    if reaches is not None:
        facts["tf32_reach"] = {"reaches": reaches, "why": f"TF32 reaches {reaches}"}
    return facts


def test_the_evaluations_class_reads_the_reach_and_the_trainings_does_not():
    evaluation = {"honour_override": True, "honour_reach": True}
    assert precision_of(None, with_reach(False), **evaluation) == "float32"
    assert precision_of(None, with_reach(False)) == "tf32"  # training: the flags' class
    assert precision_of(None, with_reach(True), **evaluation) == "tf32"
    off = {"tf32_cudnn": False}
    assert precision_of(None, with_reach(True, **off), **evaluation) == "tf32"
    assert precision_of(None, with_reach(False, float32_matmul_precision="medium"),
                        **evaluation) == "float32"  # fmt: skip
    assert precision_of("bfloat16", with_reach(False), **evaluation) == "bfloat16"
    # a record without the reach (made before it): today's classes, unchanged
    assert precision_of(None, with_reach(None), **evaluation) == "tf32"
    assert precision_of(None, with_reach(None, tf32_override="0"), **evaluation) == "float32"
    assert tf32_reaches(with_reach(None)) is None
    assert tf32_reaches({"tf32_reach": {"reaches": None, "why": "off CUDA"}}) is None


def test_the_evaluation_class_and_its_reason_come_from_the_model():
    linear = mlp()
    ctx = cell("cuda", {})
    reach = tf32_reach.decide(tf32_reach.scan(linear, DEFAULTS), IDENTICAL, DEFAULTS)
    ctx.settings_in_force = {**SETTINGS, "tf32_reach": reach}
    precision, reasons = eval_parity.evaluation_precision(linear, ctx)
    assert precision == "float32"
    assert reasons == [reach["why"]] and reasons[0].startswith("TF32 reaches no op of this model")
    ctx.settings_in_force = dict(SETTINGS)  # an older record: the flags' class and reason
    assert eval_parity.evaluation_precision(linear, ctx) == (
        "tf32",
        ["TF32 allowed for cuDNN convolutions and RNNs"],
    )


def test_the_training_reason_keeps_tf32_and_says_why():
    text = training_reason(None, with_reach(False))
    assert text.startswith("TF32 allowed for cuDNN convolutions and RNNs; CUDA float32 training")
    assert "whatever ops its model runs" in text and "TF32 itself reaches no op" in text
    assert "reaches no op" not in training_reason(None, with_reach(None))
    assert training_reason("bfloat16", with_reach(False)) == "autocast bfloat16"
    assert training_reason(None, {}) == "float32"
    no_flag = {"tf32_cudnn": False, "tf32_matmul": False}
    assert training_reason(None, no_flag) == "float32: no TF32 flag on"
