"""Evidence under docs/measured/: make it on a CUDA machine, check it is current, render it again.

    python scripts/evidence.py run [workloads throughput canary]   # make gpu-evidence
    python scripts/evidence.py check            # measurement code changed since each folder was made
    python scripts/evidence.py check --readme README.md   # and fail when README does not say so
    python scripts/evidence.py check --update-readme README.md   # write that list into README
    python scripts/evidence.py render docs/measured/gpu        # tables/figures/reports from its records
    python scripts/evidence.py verify           # each folder's commit has the source that measured
    python scripts/evidence.py mac-selftest     # make mac-selftest: CPU against MPS, one file to send

See scripts/trainbench/evidence/__init__.py and evidence_run.py.
"""

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

from trainbench.evidence import render  # noqa: E402
from trainbench.evidence.check import check_readme, staleness_lines, update_readme  # noqa: E402
from trainbench.evidence.mac import run_selftest  # noqa: E402
from trainbench.evidence.run import PARTS, make_evidence  # noqa: E402
from trainbench.evidence.source import RECENT, verify_lines  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="make the CUDA evidence (needs a CUDA GPU)")
    run.add_argument("parts", nargs="*", default=list(PARTS), help=f"of {', '.join(PARTS)}")
    check = sub.add_parser("check", help="list measurement code changed since each evidence")
    check.add_argument("--readme", help="fail unless this README lists exactly that")
    check.add_argument("--update-readme", metavar="README", help="write that list into it")
    again = sub.add_parser("render", help="remake an evidence folder's analysis from its records")
    again.add_argument("folders", nargs="+", type=Path)
    again.add_argument("--cores", type=int, default=2)
    sub.add_parser(
        "mac-selftest",
        help="on a Mac with Apple silicon: the CPU against MPS with every check, one file to send",
    )
    verify = sub.add_parser(
        "verify", help="check each folder's commit against the source fingerprint that measured"
    )
    verify.add_argument(
        "--recent", type=int, default=RECENT, help="commits of `git log --all` searched"
    )
    args = parser.parse_args(argv)
    if args.command == "run":
        return make_evidence(args.parts, ROOT)
    if args.command == "check":
        print("\n".join(staleness_lines(ROOT)))
        if args.update_readme:
            update_readme(ROOT, Path(args.update_readme))
        return check_readme(ROOT, Path(args.readme)) if args.readme else 0
    if args.command == "mac-selftest":
        return run_selftest(ROOT)
    if args.command == "verify":
        lines, passed = verify_lines(ROOT, limit=args.recent)
        print("\n".join(lines))
        return 0 if passed else 1
    for folder in args.folders:
        written = render(folder.resolve(), ROOT, args.cores)
        print(f"{folder}: {len(written)} files rendered from its records")
    return 0


if __name__ == "__main__":
    sys.exit(main())
