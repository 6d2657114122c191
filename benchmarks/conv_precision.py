"""How far from float64 is one convolution or matmul on this CUDA device, per precision?

    python benchmarks/conv_precision.py OUT.json

Why: on an H100, evaluation parity found a float32 cell's outputs (cuDNN's TF32
convolutions, PyTorch's default; matmuls in float32 under "highest") 6.5e-3 to 1.4e-2
from CPU float64, more than fp16 autocast's (below 1.1e-3). This isolates the kernels:
the layers of the bundled CNN and CLIP's patch embedding at batch 32 and 512, inputs
drawn as after a ReLU (non-negative, so that a rounding bias does not cancel), each
computed in float32 with TF32 off, float32 with cuDNN's TF32 on, fp16 and bf16
autocast; the normwise error max|out - ref| / max|ref| against the same op in float64
on the CPU (the canary's measure), median and max over 5 draws.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F  # noqa: N812

CASES = {
    "image_cnn conv1 3->32 k3": ((3, 32, 32), (32, 3, 3, 3), {"padding": 1}),
    "image_cnn conv3 64->128 k3": ((64, 8, 8), (128, 64, 3, 3), {"padding": 1}),
    "clip patch 3->64 k4 s4": ((3, 32, 32), (64, 3, 4, 4), {"stride": 4}),
}
MODES = ("float32", "tf32", "float16", "bfloat16")


def error(out: torch.Tensor, ref: torch.Tensor) -> float:
    return float((out.double().cpu() - ref).abs().max() / ref.abs().max())


def run_case(shape, weight_shape, options, batch: int, mode: str, seed: int) -> float:
    g = torch.Generator().manual_seed(seed)
    x = torch.rand((batch, *shape), generator=g, dtype=torch.float64)
    w = torch.randn(weight_shape, generator=g, dtype=torch.float64) / (weight_shape[1] * 9) ** 0.5
    ref = F.conv2d(x, w, **options)
    torch.backends.cudnn.allow_tf32 = mode == "tf32"
    xc, wc = x.float().cuda(), w.float().cuda()
    if mode in ("float16", "bfloat16"):
        with torch.autocast("cuda", dtype=getattr(torch, mode)):
            out = F.conv2d(xc, wc, **options)
    else:
        out = F.conv2d(xc, wc, **options)
    return error(out, ref)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawTextHelpFormatter)  # fmt: skip
    parser.add_argument("out", help="the results JSON")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("conv_precision: needs a CUDA device")
        return 2
    torch.backends.cudnn.benchmark = True
    rows = []
    for name, (shape, weight, options) in CASES.items():
        for batch in (32, 512):
            for mode in MODES:
                errors = sorted(run_case(shape, weight, options, batch, mode, s) for s in range(5))
                rows.append({"case": name, "batch": batch, "mode": mode,
                             "median": errors[2], "max": errors[-1]})  # fmt: skip
                print(
                    f"{name:28s} bs{batch:<4d} {mode:9s} median {errors[2]:.2e} max {errors[-1]:.2e}"
                )
    torch.backends.cudnn.allow_tf32 = True
    out = {"benchmark": "conv_precision", "gpu": torch.cuda.get_device_name(),
           "torch": torch.__version__, "cudnn": torch.backends.cudnn.version(),
           "made_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "rows": rows}  # fmt: skip
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
