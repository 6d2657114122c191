"""``make gpu-evidence``: every CUDA measurement the README quotes, made by one
command on a machine with a CUDA GPU, each part into its own evidence folder under
``docs/measured/`` (see :mod:`trainbench.evidence`).

Parts, in order (``PARTS="workloads canary"`` runs some), meant to fit together in the
10 minutes one command gets on a lent GPU machine; every folder the call makes records
the call's wall time per part and their sum (``call``), rewritten after each part, so a
call stopped part-way leaves ``finished: false`` and the parts it got through:

* ``workloads`` — the named run ``configs/gpu.yaml``: every bundled workload, cpu
  against cuda, through the workflow itself (``snakemake --cores all``; one run, so one
  fork-server start and one analysis), then its report, tables, figures and records
  into ``docs/measured/gpu/``;
* ``throughput`` — ``benchmarks/step_overhead.py`` (what the harness adds per step and
  its synchronizations per step, every training workload at a launch-bound size: the
  verdict that the harness does not tax what it times) and ``benchmarks/throughput.py
  benchmarks/suites/cuda.yaml --only text_multilabel:64`` (harness ÷ bare loop interleaved with the host's A/A
  floor, as information; harness ÷ Hugging Face Trainer; clock against CUDA events),
  results in ``benchmarks/results/``, provenance in ``docs/measured/cuda-throughput/``;
* ``canary`` — ``benchmarks/canary_cost.py`` on CUDA in float32, TF32, bf16 and fp16,
  provenance in ``docs/measured/cuda-canary/``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from trainbench.common.records import atomic_write_json
from trainbench.evidence import EVIDENCE_FILE, Made, collect_run, run_logged, write_evidence
from trainbench.evidence.source import (
    SourceRefused,
    bench_code,
    records_code,
    same_tree,
    tree_code,
)
from trainbench.launch.environment import git_commit, gpu_models, host_facts


@dataclass(frozen=True)
class ConfigPart:
    config: str

    def run_name(self, root: Path) -> str:
        return (yaml.safe_load((root / self.config).read_text()) or {})["run_name"]


@dataclass(frozen=True)
class BenchPart:
    folder: str  # docs/measured/<folder>
    commands: tuple[tuple[str, ...], ...]
    code: tuple[str, ...] = field(default=())  # extra measurement files of its own
    workloads: tuple[str, ...] = field(default=())  # whose code it runs


CANARY = "benchmarks/canary_cost.py"
PARTS: dict[str, ConfigPart | BenchPart] = {
    "workloads": ConfigPart("configs/gpu.yaml"),
    "throughput": BenchPart(
        "cuda-throughput",
        (
            # What the harness adds per step (profile, costs, synchronizations counted),
            # every training workload at a launch-bound size; a new file for the day.
            (
                "benchmarks/step_overhead.py",
                "benchmarks/suites/cuda.yaml",
                "image_cnn",
                "32",
                "two_tower",
                "64",
                "clip",
                "64",
                "text_multilabel",
                "64",
                "--steps",
                "30",
                "--fresh",
            ),  # fmt: skip
            # Harness ÷ bare and ÷ HF Trainer, clock against CUDA events, on the text
            # case at batch 64; step_overhead above judges all four workloads. The
            # suite's other cases are left out to keep the call within 10 minutes.
            (
                "benchmarks/throughput.py",
                "benchmarks/suites/cuda.yaml",
                "--only",
                "text_multilabel:64",
            ),  # fmt: skip
        ),
        ("benchmarks/suites/cuda.yaml",),
        ("text_multilabel", "image_cnn", "clip", "two_tower"),
    ),
    "canary": BenchPart(
        "cuda-canary",
        (
            (CANARY, "--device", "cuda"),
            (CANARY, "--device", "cuda", "--matmul-precision", "high"),
            (CANARY, "--device", "cuda", "--autocast", "bf16"),
            (CANARY, "--device", "cuda", "--autocast", "fp16"),
        ),
    ),
}


def cuda_problem() -> str | None:
    """Why this machine cannot make CUDA evidence (None: it can)."""
    probe = "import torch; print(torch.__version__, torch.cuda.is_available())"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    if done.returncode != 0:
        return f"torch does not import: {done.stderr.strip()[-400:]}"
    version, available = done.stdout.split()
    if available != "True":
        return f"torch {version} sees no CUDA GPU (torch.cuda.is_available() is False)"
    return None


def machine_facts() -> dict:
    import torch

    host = host_facts()
    return {
        "gpu_models": gpu_models(),
        "host": {k: host.get(k) for k in ("host", "os", "cpu_model", "logical_cores")},
        "torch": torch.__version__,
        "cuda_runtime": torch.version.cuda,
        "python": sys.version.split()[0],
    }


def _results_since(folder: Path, started: float) -> list[str]:
    return sorted(
        str(p.relative_to(folder.parent.parent))
        for p in folder.glob("*")
        if p.is_file() and p.stat().st_mtime >= started
    )


def run_part(name: str, root: Path, logs: Path) -> dict:
    """Run one part and write its evidence folder; its EVIDENCE.json content. Its
    ``code`` is taken from what measured (:mod:`.source`): raises
    :class:`~trainbench.evidence.source.SourceRefused`, writing nothing, when that
    cannot be named by one source fingerprint."""
    part, commit, python = PARTS[name], git_commit(root), sys.executable
    facts = machine_facts()
    if isinstance(part, ConfigPart):
        run_name = part.run_name(root)
        cores = str(os.cpu_count() or 1)
        command = [python, "-m", "snakemake", "--cores", cores, "--configfile", part.config,
                   "--", f"results/{run_name}/report.md"]  # fmt: skip
        seconds = run_logged(command, logs / f"{name}.log", root)
        results = root / "results" / run_name
        ran = sorted(p.name for p in (results / "runs").glob("*") if p.is_dir())
        code = records_code(results)
        made = Made(command, seconds, commit, ["config.yaml", part.config], ran, code=code)
        dest = root / "docs" / "measured" / run_name
        return collect_run(results, dest, root, made, facts)
    started, commands, walls = time.time() - 1, [], {}
    tree = tree_code(root, commit)  # the tree the benchmarks run in
    for args in part.commands:
        commands.append(" ".join(args))
        walls[commands[-1]] = round(run_logged([python, *args], logs / f"{name}.log", root), 1)
    seconds = sum(walls.values())
    same_tree(root, tree)
    results = _results_since(root / "benchmarks" / "results", started)
    made = Made(
        ["python", " && python ".join(commands)],
        seconds,
        commit,
        config_files=[],
        workloads=list(part.workloads),
        code_files=list(part.code),
        code=bench_code(root, results, tree),
    )
    dest = root / "docs" / "measured" / part.folder
    dest.mkdir(parents=True, exist_ok=True)
    return write_evidence(dest, root, made, {**facts, "results": results, "command_seconds": walls})


def make_evidence(parts: list[str], root: Path) -> int:
    """Every part asked for, in order; 0 when all were made, 2 when the machine has no
    CUDA GPU (nothing runs), 1 when a part failed (the others still run)."""
    unknown = [p for p in parts if p not in PARTS]
    if unknown:
        print(
            f"gpu-evidence: unknown part(s) {unknown}; parts: {', '.join(PARTS)}", file=sys.stderr
        )
        return 2
    problem = cuda_problem()
    if problem:
        print(f"gpu-evidence needs a CUDA GPU: {problem}", file=sys.stderr)
        return 2
    logs, failed, walls, made = root / "results" / "evidence-logs", [], {}, []
    for name in parts:
        started = time.perf_counter()
        try:
            meta = run_part(name, root, logs)
            made.append(_folder(name, root))
        except subprocess.CalledProcessError as error:
            failed.append(name)
            print(f"gpu-evidence: {name} failed; log tail:\n{error.output}", file=sys.stderr)
            continue
        except SourceRefused as error:
            failed.append(name)
            print(f"gpu-evidence: {name}: no evidence written: {error}", file=sys.stderr)
            continue
        finally:
            walls[name] = round(time.perf_counter() - started, 1)
            record_call(root, made, walls, failed, finished=False)
        print(
            f"gpu-evidence: {name} done in {walls[name]:.0f} s -> "
            f"docs/measured/{made[-1]}/{EVIDENCE_FILE} (commit {meta['commit']}; "
            f"{meta['code']['label']}, from the {meta['code']['source_from']})",
            flush=True,
        )
    call = record_call(root, made, walls, failed, finished=True)
    print(
        f"gpu-evidence: {call['total_seconds']:.0f} s in all "
        f"({', '.join(f'{k} {v:.0f} s' for k, v in walls.items())}; limit {CALL_LIMIT_S} s)",
        flush=True,
    )
    return 1 if failed else 0


CALL_LIMIT_S = 600  # what one command gets on a lent GPU machine


def _folder(name: str, root: Path) -> str:
    where = PARTS[name]
    return where.folder if isinstance(where, BenchPart) else where.run_name(root)


def record_call(
    root: Path, folders: list[str], walls: dict[str, float], failed: list[str], finished: bool
) -> dict:
    """The call's wall time per part so far (each part's own bookkeeping included) and
    their sum, written into every folder it made as EVIDENCE.json's ``call``;
    ``finished`` once every part asked for has run."""
    call = {
        "parts_seconds": dict(walls),
        "total_seconds": round(sum(walls.values()), 1),
        "limit_seconds": CALL_LIMIT_S,
        "failed_parts": list(failed),
        "finished": finished,
    }
    for folder in folders:
        path = root / "docs" / "measured" / folder / EVIDENCE_FILE
        atomic_write_json(path, {**json.loads(path.read_text()), "call": call})
    return call
