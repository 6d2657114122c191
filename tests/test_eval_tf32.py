"""Evaluation parity on a TF32 cell (trainbench.run.eval_parity): outputs beyond the TF32
tolerance are evaluated again with TF32 off, and pass only when that is within
float32's tolerance. On the CPU the TF32 kernels are stood in for by an evaluation that
is off by 1% while ``torch.backends.cudnn.allow_tf32`` is on (as cuDNN's were on an
H100) and exact once it is off; a fault is off either way."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from torch import nn
from trainbench.run import eval_parity
from trainbench.run.context import RunContext


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, x):
        return self.fc(x)


def make_loop(off_by_with_tf32: float, off_by_always: float = 0.0) -> SimpleNamespace:
    torch.manual_seed(0)
    model = Net().eval()
    batches = [{"x": torch.randn(8, 4)} for _ in range(2)]

    def evaluate(model, loader, ctx):
        outs = [model(b["x"].to(ctx.torch_device)) for b in loader]
        out = torch.cat(outs).cpu()
        if out.dtype == torch.float32:  # the device side (the reference runs in float64)
            out = out * (1 + off_by_always)
            if torch.backends.cudnn.allow_tf32:
                out = out * (1 + off_by_with_tf32)
        return {"outputs": out, "samples": len(out)}

    ctx = RunContext(spec={"eval_parity": True}, device=None, torch_device=torch.device("cpu"),
                     amp=None, settings_in_force={})  # fmt: skip
    parts = SimpleNamespace(model=model, eval_loader=batches, evaluate=evaluate, score=None,
                            primary_metric="m")  # fmt: skip
    return SimpleNamespace(parts=parts, ctx=ctx, device=torch.device("cpu"), reference=None,
                           dev=SimpleNamespace(synchronize=lambda: None))  # fmt: skip


@pytest.fixture
def as_tf32(monkeypatch):
    monkeypatch.setattr(eval_parity, "tolerance_of", lambda ctx: ("tf32", 5e-3))
    monkeypatch.setattr(eval_parity, "fault_size", lambda ctx: None)
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", True)


def measured(loop) -> dict:
    final = eval_parity.FinalEvaluation.take(
        loop.parts.model, loop.parts.evaluate(loop.parts.model, loop.parts.eval_loader, loop.ctx)
    )
    with torch.no_grad():  # steps after the final evaluation move the weights
        loop.parts.model.fc.weight.add_(0.5)
    return eval_parity.measure(loop, final)


def test_a_tf32_difference_passes_with_the_finding(as_tf32):
    found = measured(make_loop(off_by_with_tf32=0.01))
    assert found["worst"] > 5e-3, "the TF32 side is beyond its tolerance"
    assert found["status"] == "pass", found
    assert found["tf32"]["status"] == "pass" and found["tf32"]["worst"] < 1e-6
    assert "TF32's" in found["tf32"]["finding"]
    assert torch.backends.cudnn.allow_tf32 is True  # restored


def test_a_fault_beyond_tf32_still_fails(as_tf32):
    found = measured(make_loop(off_by_with_tf32=0.01, off_by_always=0.01))
    assert found["status"] == "fail"
    assert found["tf32"]["status"] == "fail" and found["tf32"]["worst"] > 1e-3
    assert "not TF32's" in found["tf32"]["finding"]


def test_within_the_tf32_tolerance_no_recheck_runs(as_tf32):
    found = measured(make_loop(off_by_with_tf32=1e-3))
    assert found["status"] == "pass" and found["tf32"] is None


def test_tf32_off_restores_every_setting():
    before = (torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32,
              torch.get_float32_matmul_precision())  # fmt: skip
    with eval_parity.tf32_off():
        assert not torch.backends.cudnn.allow_tf32
        assert torch.get_float32_matmul_precision() == "highest"
    after = (torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32,
             torch.get_float32_matmul_precision())  # fmt: skip
    assert after == before


@pytest.fixture
def as_cuda_float32(monkeypatch):
    """A CUDA float32 cell (matmuls in float32, cuDNN's TF32 allowed: PyTorch's
    defaults), its evaluation run on the CPU with the kernels stood in for."""
    monkeypatch.setattr(eval_parity, "tolerance_of", lambda ctx: ("float32", 1e-4))
    monkeypatch.setattr(eval_parity, "fault_size", lambda ctx: None)
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", True)

    def on_cuda(loop):
        loop.device = SimpleNamespace(type="cuda")  # what tf32_possible reads
        return loop

    return on_cuda


def test_a_float32_cell_beyond_float32_is_rechecked_when_cudnn_tf32_is_allowed(as_cuda_float32):
    # clip on an H100: 1.6e-4 to 2.0e-4 from float64 through cuDNN's TF32 convolutions,
    # judged at float32's 1e-4 (the float32 class sees the matmuls only)
    found = measured(as_cuda_float32(make_loop(off_by_with_tf32=2e-4)))
    assert found["precision"] == "float32" and found["worst"] > 1e-4
    assert found["status"] == "pass" and found["tf32"]["status"] == "pass"
    found = measured(as_cuda_float32(make_loop(off_by_with_tf32=2e-4, off_by_always=1e-3)))
    assert found["status"] == "fail" and found["tf32"]["status"] == "fail"


def test_a_float32_cell_off_cuda_gets_no_recheck(as_tf32, monkeypatch):
    monkeypatch.setattr(eval_parity, "tolerance_of", lambda ctx: ("float32", 1e-4))
    found = measured(make_loop(off_by_with_tf32=2e-4))
    assert found["status"] == "fail" and found["tf32"] is None
