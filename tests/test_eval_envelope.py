"""Evaluation parity's rule (trainbench.common.eval_envelope) on constructed outputs: a
deep float32 network computed another way passes, a 1% fault on a quarter of its
outputs fails; TF32 and bfloat16 arithmetic pass in their own class and not in
float32's; the error measure does not grow with the output's size; a floor of 0 leaves
the absolute term to decide; and the evaluation's precision class names what ran."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from torch import nn
from trainbench.common import eval_envelope as rule
from trainbench.common.precision_classes import UNIT_ROUNDOFF, precision_of
from trainbench.measure import eval_parity
from trainbench.measure.canary import relative_error
from trainbench.measure.eval_outputs import compare_outputs, corrupt_outputs, relative_rmse

U32 = UNIT_ROUNDOFF["float32"]


def deep_network(seed: int = 0, depth: int = 24, width: int = 128):
    g = torch.Generator().manual_seed(seed)
    weights = [torch.randn(width, width, generator=g, dtype=torch.float64) / width**0.5
               for _ in range(depth)]  # fmt: skip
    x = torch.randn(256, width, generator=g, dtype=torch.float64)
    return weights, x


def forward(weights, x, dtype, matmul=None):
    """tanh(x W) layer after layer in ``dtype``; ``matmul`` replaces x @ W (another
    arithmetic for the same network)."""
    h = x.to(dtype)
    for w in weights:
        w = w.to(dtype)
        h = torch.tanh(matmul(h, w) if matmul else h @ w)
    return h


def reversed_sum(h, w):
    """float32 matmul summed in another order: the dot products in 8 chunks, last first."""
    parts = [h[:, i::8] @ w[i::8, :] for i in range(8)]
    out = torch.zeros_like(parts[0])
    for p in reversed(parts):
        out = out + p
    return out


def tf32_round(t: torch.Tensor) -> torch.Tensor:
    """``t`` rounded to TF32's 10 stored mantissa bits (round to nearest)."""
    bits = t.contiguous().view(torch.int32)
    rounded = (bits + 0x1000) & ~0x1FFF
    return rounded.view(torch.float32)


def tf32_matmul(h, w):
    return tf32_round(h) @ tf32_round(w)


def bf16_matmul(h, w):
    """What bfloat16 autocast does to a matmul: inputs rounded to bfloat16, float32
    accumulation, the product rounded to bfloat16."""
    return (h.to(torch.bfloat16).float() @ w.to(torch.bfloat16).float()).to(torch.bfloat16).float()


@pytest.fixture(scope="module")
def network():
    weights, x = deep_network()
    reference = forward(weights, x, torch.float64)
    floor = forward(weights, x, torch.float32)
    return weights, x, reference, floor


def judged(device, reference, floor, precision):
    compared = compare_outputs((device,), (reference,), (floor,))
    return rule.judge(compared["outputs"], precision, mismatched=compared["mismatched"])


def test_a_deep_float32_network_computed_another_way_passes_and_a_1pc_fault_fails(network):
    weights, x, reference, floor = network
    device = forward(weights, x, torch.float32, reversed_sum)
    found = judged(device, reference, floor, "float32")
    assert found["status"] == "pass", found["rule"]
    assert found["device_error"] != found["floor"] and found["decided_by"] == rule.FLOOR
    faulted = judged(corrupt_outputs(device, 0.01), reference, floor, "float32")
    assert faulted["status"] == "fail" and faulted["ratio"] > 100, faulted["rule"]


def test_tf32_and_bfloat16_pass_in_their_class_and_not_in_float32s(network):
    """The envelope scales the float32 floor by the unit roundoff: one rule covers TF32
    and bfloat16 on principle, without re-running anything with TF32 off."""
    weights, x, reference, floor = network
    for precision, matmul in (("tf32", tf32_matmul), ("bfloat16", bf16_matmul)):
        device = forward(weights, x, torch.float32, matmul)
        assert judged(device, reference, floor, precision)["status"] == "pass", precision
        assert judged(device, reference, floor, "float32")["status"] == "fail", precision
        ratio = judged(device, reference, floor, precision)["ratio"]
        assert ratio < 0.5, (precision, ratio)  # autocast rounds a part of the network only
    device = forward(weights, x, torch.float32, tf32_matmul)
    assert judged(corrupt_outputs(device, 0.01), reference, floor, "tf32")["status"] == "fail"


def test_the_error_measure_does_not_grow_with_the_outputs_size():
    """A max over elements grows with their number; the relative RMSE does not: the
    reason clip's 512 × 512 similarities failed a max-norm tolerance its 32 × 32 passed."""
    g = torch.Generator().manual_seed(1)
    rms, worst = [], []
    for n in (32, 512):  # bounded values (similarities), errors of one size
        ref = 2 * torch.rand(n, n, generator=g, dtype=torch.float64) - 1
        out = ref + 1e-4 * torch.randn(n, n, generator=g, dtype=torch.float64)
        rms.append(relative_rmse(out, ref))
        worst.append(relative_error(out, ref))
    assert rms[1] == pytest.approx(rms[0], rel=0.1)
    assert worst[1] > 1.2 * worst[0]


def test_a_floor_of_zero_leaves_the_absolute_term_to_decide():
    """Outputs exact in float32 (the CPU float32 pass equals float64): the floor is 0,
    and one rounding of every value in the device's precision is what it may differ by."""
    reference = torch.arange(-64, 64, dtype=torch.float64) / 8
    floor = reference.to(torch.float32)
    device = (reference * (1 + 2**-9)).to(torch.bfloat16).float()
    found = judged(device, reference, floor, "bfloat16")
    assert found["floor"] == 0.0 and found["decided_by"] == rule.ABSOLUTE
    assert found["envelope"] == UNIT_ROUNDOFF["bfloat16"] and found["status"] == "pass"
    assert "the absolute term decides" in found["rule"]
    assert judged(device * 1.01, reference, floor, "bfloat16")["status"] == "fail"


def test_integer_outputs_must_match_and_a_missing_error_fails():
    compared = compare_outputs({"ids": torch.tensor([1, 2])}, {"ids": torch.tensor([1, 3])}, {})
    assert (
        rule.judge(compared["outputs"], "float32", mismatched=compared["mismatched"])["status"]
        == "fail"
    )
    nan = compare_outputs(
        (torch.tensor([float("nan")]),), (torch.tensor([1.0]),), (torch.tensor([1.0]),)
    )
    found = rule.judge(nan["outputs"], "float32")
    assert found["status"] == "fail" and found["ratio"] is None and "inf" in found["rule"]


def test_envelopes_and_allowances():
    floor = 2.7e-7  # clip 512's on an H200
    bf16, decided = rule.envelope("bfloat16", floor, 1.0)
    assert bf16 == pytest.approx(2**16 * floor + 2**-8) and decided == rule.FLOOR
    assert rule.envelope("tf32", floor, 1.0)[0] == pytest.approx(2**13 * floor + 2**-11)
    assert rule.envelope("float32", floor, 17.0)[0] == pytest.approx(17 * floor + U32)
    assert rule.allowance_for("float16") == rule.ALLOWANCES["float16"]
    assert rule.allowance_for("float32", {"float32": 8}) == 8.0


# ----------------------------------------------------------------------------- precision


def test_nvidia_tf32_override_makes_a_cuda_evaluation_float32_not_its_training():
    allowed = {"tf32_matmul": False, "tf32_cudnn": True, "float32_matmul_precision": "highest"}
    off = {**allowed, "tf32_override": "0"}
    assert (
        precision_of(None, allowed) == precision_of(None, allowed, honour_override=True) == "tf32"
    )
    assert precision_of(None, off, honour_override=True) == "float32"
    assert precision_of(None, off) == "tf32"  # training: torch's flags (the module docstring)
    assert precision_of(None, {**allowed, "tf32_override": "1"}, honour_override=True) == "tf32"
    assert precision_of("bfloat16", off, honour_override=True) == "bfloat16"


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        layer = nn.TransformerEncoderLayer(16, 2, 32, batch_first=True)
        self.body = nn.TransformerEncoder(layer, 1, enable_nested_tensor=False)


def on(device_type: str, model: nn.Module, settings: dict, amp: str | None = None):
    """(model, context) of a cell on ``device_type``: what evaluation_precision reads."""
    ctx = SimpleNamespace(amp=SimpleNamespace(enabled=amp is not None, dtype=amp),
                          settings_in_force=settings,
                          torch_device=SimpleNamespace(type=device_type))  # fmt: skip
    return model, ctx


def test_the_evaluation_class_names_what_ran():
    off = {"tf32_matmul": False, "tf32_cudnn": False, "float32_matmul_precision": "highest"}
    linear = nn.Linear(4, 4)
    assert eval_parity.evaluation_precision(*on("cuda", linear, off)) == (
        "float32",
        ["float32"],
    )
    found = eval_parity.evaluation_precision(*on("cuda", linear, {**off, "tf32_cudnn": True}))
    assert found == ("tf32", ["TF32 allowed for cuDNN convolutions and RNNs"])
    assert eval_parity.evaluation_precision(*on("cuda", linear, off, "bfloat16"))[0] == "bfloat16"
    half = eval_parity.evaluation_precision(*on("cuda", nn.Linear(4, 4).half(), off))
    assert half == ("float16", ["the model's parameters are float16", "float32"])


def test_the_attention_fast_path_on_cuda_is_tf32_with_the_finding(monkeypatch):
    off = {"tf32_matmul": False, "tf32_cudnn": False, "tf32_override": "0"}
    precision, reasons = eval_parity.evaluation_precision(*on("cuda", Encoder(), off))
    assert precision == "tf32" and reasons[0] == eval_parity.FAST_PATH
    assert "NVIDIA_TF32_OVERRIDE=0" in reasons[1]
    assert eval_parity.evaluation_precision(*on("cpu", Encoder(), {}))[0] == "float32"
    if hasattr(torch.backends.mha, "set_fastpath_enabled"):
        monkeypatch.setattr(torch.backends.mha, "get_fastpath_enabled", lambda: False)
        assert eval_parity.evaluation_precision(*on("cuda", Encoder(), off))[0] == "float32"
