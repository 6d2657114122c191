"""Does a device-to-host copy read data before it has arrived? The cause of the
intermittent evaluation mismatch of image_cnn on CUDA at batch 512 (issue: "verdicts
that hold at sizes nobody tuned"), measured on a CUDA device.

    python benchmarks/eval_handoff_race.py OUT.json [--tries 200]

Two parts, each run with the trainbench on ``sys.path`` (``PYTHONPATH=scripts``, or an
older tree's ``scripts`` to measure the code before the fix):

* ``mechanism``: two batches of 512 CIFAR-sized images staged on the device, in turn
  cast to float64 there and copied to the host, then read at once, ``--tries`` times; with
  the stream idle (as after training) and busy (a spin kernel queued first, as when
  the host runs ahead of the device). Copies: ``.to("cpu", non_blocking=True)`` (what
  ``workloads.common.to_device`` did) and the tree's own ``to_device(batch, "cpu")``.
  A try is wrong when the host's values differ from the device's.
* ``reference``: evaluation parity's float64 reference
  (``eval_parity.reference_evaluation``, the tree's own) over an evaluation loader
  staged on the device, whose batches are handed over behind a busy stream, against
  the same reference over the host's batches; an evaluate written as the bundled
  workloads write theirs (``workloads.common.to_device``). Counts the passes whose
  outputs differ, and the largest normwise error.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import torch

SPIN_CYCLES = 20_000_000  # ~10 ms of torch.cuda._sleep on an H100


def mechanism(tries: int) -> list[dict]:
    from trainbench.workloads.common import to_device

    cuda = torch.device("cuda")
    # two batches in turn, as an evaluation hands over one batch after another: a copy
    # read too early shows the pinned buffer's last contents, the other batch's
    staged = [torch.randn(512, 3, 32, 32, device=cuda) for _ in range(2)]
    truth = [batch.double().cpu() for batch in staged]
    copies = {
        "non_blocking=True": lambda t: t.to("cpu", non_blocking=True),
        "workloads.common.to_device": lambda t: to_device({"x": t}, torch.device("cpu"))["x"],
    }
    rows = []
    for stream in ("idle", "busy"):
        for name, copy in copies.items():
            wrong = 0
            for i in range(tries):
                torch.cuda.synchronize()
                if stream == "busy":
                    torch.cuda._sleep(SPIN_CYCLES)
                host = copy(staged[i % 2].to(torch.float64))
                wrong += not torch.equal(host, truth[i % 2])  # read at once, as the CPU model does
            torch.cuda.synchronize()
            rows.append({"stream": stream, "copy": name, "tries": tries, "wrong": wrong})
            print(f"mechanism: {stream} stream, {name}: {wrong} of {tries} wrong", flush=True)
    return rows


def reference(passes: int) -> dict:
    from torch import nn
    from trainbench.measure import eval_parity
    from trainbench.measure.context import RunContext
    from trainbench.measure.data import BatchTensorDataset, make_loader
    from trainbench.workloads.common import to_device

    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 30 * 30, 10))
    model = model.cuda().eval()
    data = BatchTensorDataset(x=torch.randn(2048, 3, 32, 32), y=torch.randint(0, 10, (2048,)))
    staged = make_loader(data, 512, False, None, {"stage_on_device": "cuda"})
    host = [data[list(range(i, i + 512))] for i in range(0, 2048, 512)]

    def evaluate(model, loader, ctx):
        logits, labels = [], []
        for batch in loader:
            batch = to_device(batch, ctx.torch_device)
            logits.append(model(batch["x"]))
            labels.append(batch["y"])
        return {"outputs": (torch.cat(logits).cpu(), torch.cat(labels).cpu())}

    def busy(loader):
        for batch in loader:
            torch.cuda._sleep(SPIN_CYCLES)
            yield batch

    def over(batches):
        ctx = RunContext(spec={}, device=None, torch_device=torch.device("cuda"), amp=None,
                         settings_in_force={})  # fmt: skip
        return SimpleNamespace(model=model, eval_loader=batches, evaluate=evaluate), ctx

    final = eval_parity.FinalEvaluation.take(model, {})
    want = eval_parity.reference_evaluation(*over(host), final, torch.float64)["outputs"][0]
    wrong, worst = 0, 0.0
    for _ in range(passes):
        got = eval_parity.reference_evaluation(*over(busy(staged)), final, torch.float64)
        error = float((got["outputs"][0] - want).abs().max() / want.abs().max())
        wrong += error > 0
        worst = max(worst, error)
    print(f"reference: {wrong} of {passes} passes differ, worst normwise error {worst:.3g}")
    return {"passes": passes, "differ": wrong, "worst_normwise_error": worst}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawTextHelpFormatter)  # fmt: skip
    parser.add_argument("out")
    parser.add_argument("--tries", type=int, default=200)
    parser.add_argument("--passes", type=int, default=10)
    parser.add_argument("--code", default="", help="which tree ran (a label for the results)")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("eval_handoff_race: needs a CUDA device")
        return 2
    import trainbench

    started = time.perf_counter()
    results = {
        "benchmark": "eval_handoff_race",
        "code": args.code,
        "trainbench_from": str(list(trainbench.__path__)[0]),
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "made_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "mechanism": mechanism(args.tries),
        "reference": reference(args.passes),
    }
    results["seconds"] = time.perf_counter() - started
    Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
