"""Two torch versions on one machine: the results file of their comparison.

    make setup && bash benchmarks/older-torch-venv.sh      # torch 2.5.1 in .venv-torch-2.5.1
    .venv/bin/snakemake --cores 1 --configfile benchmarks/suites/torch-versions.yaml \
        --config run_name=torch-2.13.0
    .venv-torch-2.5.1/bin/snakemake --cores 1 --configfile benchmarks/suites/torch-versions.yaml \
        --config run_name=torch-2.5.1
    make redraw FOLDERS="results/torch-2.13.0 results/torch-2.5.1" NAME=torch-compare \
        CONFIG=benchmarks/suites/torch-versions.yaml
    cp -r results/torch-2.5.1 results/torch-2.5.1-copy
    make redraw FOLDERS="results/torch-2.13.0 results/torch-2.5.1 results/torch-2.5.1-copy" \
        NAME=torch-twice CONFIG=benchmarks/suites/torch-versions.yaml
    python benchmarks/torch_versions.py results/torch-compare --twice results/torch-twice \
        --records results/torch-2.13.0 results/torch-2.5.1

Writes benchmarks/results/torch-versions-<date>.{json,md} and the records as
torch-versions-<date>/records.tgz. The logic is in scripts/trainbench/bench/torch_versions.py.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "scripts"))

from trainbench.bench import torch_versions as tv  # noqa: E402
from trainbench.common.code_identity import code_identity  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("merged", type=Path, help="the records-only run over both folders")
    parser.add_argument("--twice", type=Path, help="the run with a folder included twice")
    parser.add_argument("--records", type=Path, nargs="*", default=[])
    parser.add_argument("--how", default="", help="the commands and machine, in words")
    args = parser.parse_args()
    made = dt.datetime.now(dt.UTC)
    result = {
        "made_at": made.isoformat(timespec="seconds"),
        "command": " ".join(sys.argv),
        "code": code_identity().get("label"),
        **tv.summary(args.merged, args.twice),
    }
    stem = HERE / "results" / f"torch-versions-{made:%Y-%m-%d}"
    tv.write(result, args.how or __doc__, stem.with_suffix(".json"), stem.with_suffix(".md"))
    if args.records:
        tv.pack_records(args.records, stem / "records.tgz")
    print(stem.with_suffix(".md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
