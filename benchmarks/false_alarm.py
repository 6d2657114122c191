"""False alarms of the parity rule at sizes nobody tuned it at: a clean sweep.

    python benchmarks/false_alarm.py --device cpu --workers 2
    python benchmarks/false_alarm.py --device cuda --workers 4      # on a CUDA machine
    python benchmarks/false_alarm.py --device cuda --agree-with benchmarks/results/false-alarm-cuda-<date>.json
    python benchmarks/false_alarm.py --render benchmarks/results/false-alarm-cpu-<date>.json

No fault anywhere: every training workload of the suite (default
benchmarks/suites/false-alarm.yaml: batch 32 to 512, text 32 to 256), 3 repeats, every
precision the device offers (CPU: float32 at 1 and 2 threads, bf16 autocast; CUDA:
float32, bf16 and fp16 autocast, data staged on the device and read from the host),
judged by the report's parity rule against a one-thread CPU float32 baseline and
float64 references. Writes benchmarks/results/false-alarm-<device>-<date>.json and
.md: rows, false_alarms, worst_ratio per row. With --agree-with, the sweep is a second
run of an earlier one (its JSON gets -run2) and the agreement is reported. The logic is
in scripts/trainbench/bench/false_alarm.py.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import shlex
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "scripts"))

from trainbench.bench import false_alarm as fa  # noqa: E402
from trainbench.bench import parity_power as pp  # noqa: E402
from trainbench.bench.parity_analysis import analyse  # noqa: E402
from trainbench.common.atomic_files import atomic_write_text  # noqa: E402


def write(out: Path, results: dict, facts: dict, agreed: dict | None) -> dict:
    summary = fa.summarize(results)
    document = {"benchmark": "false_alarm", **facts, **{k: summary[k] for k in
                ("rows", "false_alarms", "worst_ratio", "batch_sizes", "incomplete")},
                "agreement": agreed, "per_row": summary["per_row"], "parity_power": results}  # fmt: skip
    atomic_write_text(out, json.dumps(document, indent=1, default=str) + "\n")
    atomic_write_text(out.with_suffix(".md"), fa.markdown(summary, facts, agreed))
    return document


def from_raw(args: argparse.Namespace) -> int:
    """The sweep's document from a parity-power JSON filled by several invocations."""
    results = analyse(json.loads(Path(args.from_raw).read_text()))
    calls = results["invocations"]
    machine = results["machine"]
    gpu = machine.get("gpu")
    facts = {
        "device": args.device, "made_at": max(c["finished"] or c["started"] for c in calls),
        "command": " ; ".join(c["command"] for c in calls),
        "commit": ", ".join(dict.fromkeys(c["commit"] or "unknown" for c in calls)),
        "machine": f"{machine.get('cpu_model')}, {machine.get('logical_cores')} logical cores"
                   + (f", {gpu}" if gpu else ""),
        "wall_seconds": sum(c["wall_seconds"] or 0 for c in calls),
        "config": Path(results["config"]["path"]).name,
        "columns": {n: c for n, c in results["columns"].items()
                    if any(r["column"] == n for r in results["runs"])},
        "note": " ".join(filter(None, [args.code_note, "Cells ran several at a time: the speed "
                "verdicts compare throughputs measured under that load (on both sides of each "
                "ratio), not a quiet machine."])),
    }  # fmt: skip
    agreed = None
    if args.agree_with:
        first = json.loads(Path(args.agree_with).read_text())
        agreed = {"first": Path(args.agree_with).name,
                  **fa.agreement(first["per_row"], fa.rows(results))}  # fmt: skip
    document = write(Path(args.out), results, facts, agreed)
    print(f"{document['rows']} rows, {document['false_alarms']} false alarms; {args.out}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawTextHelpFormatter)  # fmt: skip
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument(
        "--config",
        help="the suite (default benchmarks/suites/"
        "false-alarm.yaml, false-alarm-cuda.yaml on cuda)",
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--only", nargs="*", default=[], help="workload or workload:batch_size")
    parser.add_argument(
        "--columns",
        nargs="*",
        default=[],
        help="some of the device's columns (default all; baseline and reference always run)",
    )
    parser.add_argument("--workers", type=int, default=1, help="cells run at the same time")
    parser.add_argument("--out", help="results JSON (default benchmarks/results/"
                        "false-alarm-<device>-<date>.json)")  # fmt: skip
    parser.add_argument("--agree-with", help="an earlier sweep's JSON: this run is its second")
    parser.add_argument("--workdir", help="where the cells' records go (default: temporary)")
    parser.add_argument(
        "--resume",
        action="store_true",
        help="continue the runs already in --workdir's parity-power.json",
    )
    parser.add_argument("--render", help="re-judge a sweep's JSON and rewrite it and its .md")
    parser.add_argument(
        "--from-raw",
        help="write the sweep's JSON and .md (--out) from the "
        "parity-power JSON its --workdir holds (a sweep run in several calls)",
    )
    parser.add_argument(
        "--code-note",
        default="",
        help="with --from-raw: which commits' code ran, where git could not say",
    )
    args = parser.parse_args()
    if args.render:
        document = json.loads(Path(args.render).read_text())
        results = analyse(document["parity_power"])
        facts = {k: document[k] for k in ("device", "made_at", "command", "commit", "machine",
                                          "wall_seconds", "config", "columns", "note")}  # fmt: skip
        write(Path(args.render), results, facts, document.get("agreement"))
        print(Path(args.render).with_suffix(".md").read_text())
        return 0
    suite = "false-alarm-cuda.yaml" if args.device == "cuda" else "false-alarm.yaml"
    args.config = args.config or str(HERE / "suites" / suite)
    if args.from_raw:
        return from_raw(args)
    today = dt.date.today().isoformat()
    suffix = "-run2" if args.agree_with else ""
    out = Path(args.out or HERE / "results" / f"false-alarm-{args.device}-{today}{suffix}.json")
    chosen, extra = fa.columns_for(args.device)
    if args.columns:
        known = [*chosen, *(c.name for c in extra if c.name not in chosen)]
        unknown = sorted(set(args.columns) - set(known))
        if unknown:
            parser.error(f"--columns: unknown {unknown}; known: {' '.join(known)}")
        chosen = [c for c in known if c in (pp.BASELINE, pp.REFERENCE, *args.columns)]
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="trainbench-false-alarm-"))
    raw = workdir / "parity-power.json"
    command = shlex.join(["python", "benchmarks/false_alarm.py", *sys.argv[1:]])
    options = pp.Options(sizes=(), repeats=args.repeats, only=args.only, columns=chosen,
                         workers=args.workers, command=command, extra_columns=extra,
                         resume=args.resume)  # fmt: skip
    try:
        results = pp.run_benchmark(args.config, raw, workdir, options)
    finally:
        if not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    invocation = results["invocations"][-1]
    machine = results["machine"]
    gpu = machine.get("gpu")
    facts = {
        "device": args.device, "made_at": invocation["finished"], "command": command,
        "commit": invocation["commit"],
        "machine": f"{machine.get('cpu_model')}, {machine.get('logical_cores')} logical cores"
                   + (f", {gpu}" if gpu else ""),
        "wall_seconds": invocation["wall_seconds"], "config": str(Path(args.config).name),
        "columns": {n: c for n, c in results["columns"].items()
                    if any(r["column"] == n for r in results["runs"])},
        "note": f"Cells ran {args.workers} at a time: the speed verdicts compare throughputs "
                "measured under that load (on both sides of each ratio), not a quiet machine.",
    }  # fmt: skip
    agreed = None
    if args.agree_with:
        first = json.loads(Path(args.agree_with).read_text())
        agreed = {"first": Path(args.agree_with).name,
                  **fa.agreement(first["per_row"], fa.rows(results))}  # fmt: skip
    document = write(out, results, facts, agreed)
    print(f"{document['rows']} rows, {document['false_alarms']} false alarms, worst ratio "
          f"{document['worst_ratio']}; {out}")  # fmt: skip
    if agreed:
        print(f"agreement: {agreed}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
