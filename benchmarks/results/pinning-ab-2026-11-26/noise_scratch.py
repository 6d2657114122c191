"""Scratch: per-round noise of the interleaved A/A under process settings (not committed)."""
import sys, tempfile, json, time
sys.path.insert(0, "scripts")
import numpy as np
from trainbench.bench.throughput_suite import load_suite, trainbench_config, cell_spec, Variant
from trainbench.bench.interleaved import measure_interleaved, InterleavedPlan
from trainbench import workloads
import torch
label, rounds, block = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
suite = load_suite("benchmarks/suites/cuda.yaml")
out = {}
for w, bs in [("image_cnn", 32), ("text_multilabel", 64)]:
    config = trainbench_config(suite, w)
    d = tempfile.mkdtemp()
    workloads.get(w).prepare_data(config["workloads"][w], d, config["seed"])
    spec = cell_spec(config, w, Variant("harness"), bs, d)
    rows = [r for r in measure_interleaved(spec, InterleavedPlan(rounds=rounds, block_seconds=block)) if r["round"] >= 0]
    by = {}
    for r in rows: by.setdefault(r["round"], {})[r["variant"]] = r
    aa = [np.log(v["bare-aa"]["samples_per_s"] / v["bare"]["samples_per_s"]) for v in by.values()]
    hb = [np.log(v["harness"]["samples_per_s"] / v["bare"]["samples_per_s"]) for v in by.values()]
    blocks = [b["seconds"] / b["steps"] for r in rows for b in r["blocks"]]
    out[f"{w}{bs}"] = dict(sd_aa=float(np.std(aa)), sd_hb=float(np.std(hb)), mean_hb=float(np.mean(hb)),
                           block_cv=float(np.std(blocks) / np.mean(blocks)), step_ms=float(np.median(blocks) * 1e3))
print(label, torch.get_num_threads(), json.dumps({k: {a: round(b, 4) for a, b in v.items()} for k, v in out.items()}), flush=True)
