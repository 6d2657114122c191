"""The synchronization contract of every host/device handoff in a cell
(docs/how-it-measures.md, "Handoffs between the host and the device").

The defect these guard against: a device-to-host copy with ``non_blocking=True``
returns before its data has arrived. Evaluation parity's CPU float64 reference read
the evaluation batches staged on a CUDA device through such copies, and on an H100 it
read another batch's bytes in about 1 run in 4 at batch 512 (an image_cnn labelled
"not working"). On the CPU the race cannot happen, so :class:`LateHostCopy` plays the
device: its non-blocking copy to the host returns a buffer whose data has not arrived
(zeros), as CUDA's does, while a blocking copy waits for the data. The GPU test at the
end reproduces it on a real device, with its stream kept busy so that the copy is late
every time.
"""

from __future__ import annotations

import ast
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from torch import nn
from trainbench.measure import eval_parity
from trainbench.measure.context import RunContext
from trainbench.measure.data import copy_to, to_device
from trainbench.workloads import common

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts" / "trainbench"


class LateHostCopy(torch.Tensor):
    """A tensor held "on a device": its non-blocking copy to the host returns before
    the data has arrived (the buffer reads as zeros); a blocking copy waits for it.
    Every other op keeps it on that device (the result is a LateHostCopy too)."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if func is torch.Tensor.to and _to_host(args[1:], kwargs):
            plain = args[0].as_subclass(torch.Tensor)
            late = kwargs.pop("non_blocking", False)
            copied = plain.to(*args[1:], **kwargs).clone()
            return torch.zeros_like(copied) if late else copied
        return super().__torch_function__(func, types, args, kwargs)


def _to_host(args: tuple, kwargs: dict) -> bool:
    targets = [*args, kwargs.get("device")]
    return any(str(t) == "cpu" or (isinstance(t, torch.device) and t.type == "cpu")
               for t in targets if t is not None)  # fmt: skip


def late(batch: dict) -> dict:
    return {k: v.as_subclass(LateHostCopy) for k, v in batch.items()}


def test_the_stand_in_device_reproduces_the_race():
    value = torch.arange(1.0, 5.0).as_subclass(LateHostCopy)
    assert torch.equal(value.to("cpu", non_blocking=True), torch.zeros(4))
    assert torch.equal(value.to("cpu"), torch.arange(1.0, 5.0))
    assert isinstance(value.to(torch.float64), LateHostCopy)  # a cast stays on the device


def test_a_copy_to_the_host_always_waits_for_its_data():
    batch = late({"x": torch.arange(1.0, 5.0), "y": torch.tensor([1, 2])})
    for moved in (to_device(batch, torch.device("cpu")), common.to_device(batch, "cpu")):
        assert torch.equal(moved["x"], torch.arange(1.0, 5.0))
        assert torch.equal(moved["y"], torch.tensor([1, 2]))
    assert torch.equal(copy_to(batch["x"], "cpu", non_blocking=True), torch.arange(1.0, 5.0))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 3)

    def forward(self, x):
        return self.fc(x)


def evaluate(model, loader, ctx):
    """As the bundled workloads evaluate: each batch moved by the shared helper."""
    logits, labels = [], []
    for batch in loader:
        batch = common.to_device(batch, ctx.torch_device)
        logits.append(model(batch["x"]))
        labels.append(batch["y"])
    return {"outputs": (torch.cat(logits).cpu(), torch.cat(labels).cpu())}


torch.manual_seed(0)
MODEL = Net().eval()


def over(batches) -> tuple[SimpleNamespace, RunContext]:
    """(parts, context) of a CPU cell evaluating ``batches``: what the reference reads."""
    ctx = RunContext(spec={}, device=None, torch_device=torch.device("cpu"), amp=None,
                     settings_in_force={})  # fmt: skip
    return SimpleNamespace(model=MODEL, eval_loader=batches, evaluate=evaluate), ctx


def test_the_float64_reference_reads_device_batches_only_after_they_arrived():
    torch.manual_seed(1)
    host = [{"x": torch.randn(8, 6), "y": torch.randint(0, 3, (8,))} for _ in range(3)]
    on_device = [late(b) for b in host]
    final = eval_parity.FinalEvaluation.take(MODEL, {})
    want = eval_parity.reference_evaluation(*over(host), final, torch.float64)
    batches = eval_parity.HostBatches(on_device, torch.float64)
    got = eval_parity.reference_evaluation(*over(on_device), final, torch.float64, batches)
    assert got["outputs"][0].dtype == torch.float64
    assert torch.equal(got["outputs"][0], want["outputs"][0])
    assert torch.equal(got["outputs"][1], want["outputs"][1])
    assert batches.sources == {"cpu"}  # the stand-in is a CPU tensor underneath
    assert "host batches" in batches.describe()


def test_reference_batches_name_the_device_they_were_copied_from():
    batches = eval_parity.HostBatches([], torch.float64)
    batches.sources = {"cuda"}
    assert batches.describe().startswith("batches staged on cuda, copied to the CPU with blocking")


def test_no_cell_code_copies_without_the_shared_helper():
    """Every copy in the package that may be non-blocking goes through measure/data.copy_to (which
    never makes one to the host), so no workload can bring the race back."""
    found = []
    for path in SCRIPTS.rglob("*.py"):
        if path.parts[-3:] == ("trainbench", "measure", "data.py") or "bench" in path.parts[-2:-1]:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            blocking = (
                isinstance(node, ast.keyword)
                and isinstance(node.value, ast.Constant)
                and (node.value.value is False)
            )
            if isinstance(node, ast.keyword) and node.arg == "non_blocking" and not blocking:
                found.append(f"{path.relative_to(SCRIPTS)}:{node.value.lineno}")
    assert not found, f"copies with non_blocking outside measure/data.py: {found}"


def test_the_record_names_what_the_devices_evaluation_read():
    staged = SimpleNamespace(on_device=True, device=torch.device("cpu"))
    assert eval_parity.evaluation_data(staged, "cpu") == "staged on cpu (gathered there)"
    pinned = SimpleNamespace(pin_memory=True)
    assert eval_parity.evaluation_data(pinned, "cuda") == "host DataLoader (pinned memory)"


# ----------------------------------------------------------------------------- on a GPU


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_on_cuda_the_reference_over_staged_batches_behind_a_busy_stream_is_exact():
    """The defect on a real device, made certain: the stream is kept busy (a spin
    kernel) before each staged batch is handed over, so a non-blocking copy to the
    host would return long before its data arrives. The reference must still equal
    the one computed from the host's own batches, every time."""
    from trainbench.measure.data import BatchTensorDataset, make_loader

    torch.manual_seed(2)
    dataset = BatchTensorDataset(x=torch.randn(2048, 6), y=torch.randint(0, 3, (2048,)))
    staged = make_loader(dataset, 512, False, None, {"stage_on_device": "cuda"})
    assert staged.on_device

    def busy(loader):
        for batch in loader:
            torch.cuda._sleep(20_000_000)  # ~10 ms of a spinning kernel ahead of the copy
            yield batch

    host = [dataset[list(range(i, min(i + 512, 2048)))] for i in range(0, 2048, 512)]
    final = eval_parity.FinalEvaluation.take(MODEL, {})
    want = eval_parity.reference_evaluation(*over(host), final, torch.float64)
    for _ in range(5):
        batches = eval_parity.HostBatches(busy(staged), torch.float64)
        got = eval_parity.reference_evaluation(*over([]), final, torch.float64, batches)
        assert batches.sources == {"cuda"}
        assert torch.equal(got["outputs"][0], want["outputs"][0])
        assert torch.equal(got["outputs"][1], want["outputs"][1])
    # the workload's own copies too: a staged batch moved to the host by the helper
    for _ in range(5):
        batch = next(iter(busy(staged)))
        torch.cuda._sleep(20_000_000)
        moved = to_device({k: v.to(torch.float64) for k, v in batch.items()}, "cpu")
        assert torch.equal(moved["x"], dataset.tensors["x"][:512].double())


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_on_cuda_prefetched_batches_arrive_before_the_step_reads_them():
    """The prefetch stream's handoff: each batch copied on the side stream, the compute
    stream kept busy while it is, must equal the host's batch when the step reads it."""
    from torch.utils.data import DataLoader
    from trainbench.measure.data import BatchTensorDataset, make_loader, staged_batches

    torch.manual_seed(3)
    dataset = BatchTensorDataset(x=torch.randn(4096, 64), y=torch.randint(0, 9, (4096,)))
    loader = make_loader(dataset, 512, False, None, {"pin_memory": True})
    assert isinstance(loader, DataLoader)
    for i, batch in enumerate(staged_batches(loader, torch.device("cuda"), True, True)):
        torch.cuda._sleep(20_000_000)  # the step's kernels, ahead of the next copy
        want = dataset[list(range(i * 512, (i + 1) * 512))]
        assert torch.equal(batch["x"].cpu(), want["x"]) and torch.equal(batch["y"].cpu(), want["y"])
