"""Before `make gpu-evidence` on a machine you have not used: does it have what the
evidence needs, and how do its step times look? Needs only torch and the packages
trainbench's training loop imports (no Snakemake), so it runs before the offline
install (docs/offline-install.md) and tells you what that install must bring.

    python3 scripts/gpu_preflight.py OUT_DIR [--steps 300]

Writes OUT_DIR/preflight.json: Python, pip freeze, torch and CUDA, nvidia-smi, the CPU,
which of trainbench's runtime dependencies import (and their versions), and the
per-step times of the harness's own training loop on CUDA (image_cnn at batch 64
and 256, clip at 256, with the steady-state detection's verdict on each) — real series
for tests/data/steady/.
"""

from __future__ import annotations

import argparse
import importlib
import json
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
RUNTIME_MODULES = (
    "numpy", "pandas", "scipy", "sklearn", "matplotlib", "seaborn", "PIL", "snakemake",
    "jsonschema", "jinja2", "markdown", "tabulate", "tqdm", "psutil", "ruptures", "yaml",
    "transformers", "tokenizers", "faiss", "pynvml", "accelerate",
)  # fmt: skip


def _run(*command: str) -> str:
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as error:
        return f"{type(error).__name__}: {error}"
    return (done.stdout + done.stderr).strip()


def imports() -> dict:
    found = {}
    for name in RUNTIME_MODULES:
        try:
            module = importlib.import_module(name)
            found[name] = str(getattr(module, "__version__", "imported"))
        except Exception as error:  # noqa: BLE001 - any failure is the answer
            found[name] = f"MISSING: {type(error).__name__}: {str(error)[:200]}"
    return found


def step_series(workload: str, batch_size: int, steps: int, settings: dict) -> dict:
    """The harness's own loop on CUDA, the steady state left to the run's protocol."""
    from trainbench import config as tbconfig
    from trainbench import workloads
    from trainbench.launch.dispatch import run_workload
    from trainbench.measure.context import make_context

    config = {
        "seed": 0,
        "repeats": 1,
        "devices": ["cuda"],
        "launcher": {"progress": "never"},
        "timing": {"extend_short_windows": False},
        "workloads": {workload: {"batch_sizes": [batch_size], **settings}},
    }
    if workload != "image_cnn":
        config["workloads"]["image_cnn"] = {"enabled": False}
    config = tbconfig.validate_config(config)
    with tempfile.TemporaryDirectory() as data:
        workloads.get(workload).prepare_data(config["workloads"][workload], data, 0)
        spec = tbconfig.cell_spec(config, tbconfig.Cell(workload, "cuda", batch_size, 0), data)
        result = run_workload(make_context(spec))
    flat = [s for epoch in result["steps"]["seconds"] for s in epoch]
    return {
        "workload": workload,
        "batch_size": batch_size,
        "steps_requested": steps,
        "seconds": flat,
        "steady_state": result["steady_state"],
        "timed": result["timed"],
        "timing_method": result["timing_method"],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--steps", type=int, default=300)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    facts: dict = {
        "python": sys.version,
        "executable": sys.executable,
        "platform": platform.platform(),
        "pip_freeze": _run(sys.executable, "-m", "pip", "freeze").splitlines(),
        "nvidia_smi": _run("nvidia-smi"),
        "lscpu": _run("lscpu"),
        "imports": imports(),
    }
    import torch

    facts["torch"] = {
        "version": torch.__version__,
        "cuda": torch.version.cuda,
        "available": torch.cuda.is_available(),
        "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
    }
    series, errors = [], {}
    per_epoch = args.steps // 2
    for workload, batch_size, settings in (
        ("image_cnn", 64, {"epochs": 2, "data": {"n_train": 64 * per_epoch, "n_test": 512}}),
        ("image_cnn", 256, {"epochs": 2, "data": {"n_train": 256 * per_epoch, "n_test": 512}}),
        ("clip", 256, {"epochs": 2, "data": {"n_train": 256 * per_epoch, "n_heldout": 256}}),
    ):
        key = f"{workload}/bs{batch_size}"
        try:
            series.append(step_series(workload, batch_size, args.steps, settings))
            print(key, series[-1]["steady_state"]["classification"], flush=True)
        except Exception as error:  # noqa: BLE001 - recorded, the preflight goes on
            errors[key] = f"{type(error).__name__}: {str(error)[:1000]}"
            print(key, "failed:", errors[key], flush=True)
    facts["step_series"], facts["step_series_errors"] = series, errors
    (args.out / "preflight.json").write_text(json.dumps(facts, indent=1, default=str))
    print(json.dumps({k: facts[k] for k in ("torch", "imports")}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
