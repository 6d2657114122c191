"""The sub-commands of scripts/offline_install.py (docs/offline-install.md).

    wheelhouse  where the network is: the wheels the target lacks, with a manifest
    install     on the target, no network: .venv over the machine's torch, checked
    check       inside that .venv: versions, imports, torch (install runs it)

Each sub-command imports its own module when it runs: ``install`` needs nothing
beyond the standard library, since it runs before anything is installed.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from trainbench.common.atomic_files import atomic_write_text
from trainbench.offline import OfflineError

REPO = Path(__file__).resolve().parents[3]
MIB = 2**20


def _mib(size: int) -> str:
    return f"{size / MIB:.1f} MiB"


def _add_wheelhouse(commands: argparse._SubParsersAction) -> None:
    build = commands.add_parser("wheelhouse", help="build the wheelhouse (needs the network)")
    add = build.add_argument
    add("--python-version", required=True, help="the target's Python, e.g. 3.12")
    add(
        "--platform",
        action="append",
        metavar="TAG",
        help="a platform tag of the target (repeat it; pip adds older macOS versions itself): "
        "default manylinux x86_64, glibc >= 2.28; a Mac: macosx_14_0_arm64",
    )
    add(
        "--target-freeze",
        type=Path,
        metavar="FILE",
        help="`python3 -m pip freeze` of the target; without it, all but torch is downloaded",
    )
    add(
        "--extras",
        nargs="*",
        default=None,
        metavar="EXTRA",
        help="extras besides the runtime (default: bench apple; apple's pins only for a Mac "
        "target); none: the runtime alone",
    )
    add(
        "--keep-target",
        nargs="+",
        default=[],
        metavar="NAME",
        help="use the target's own version of these (a deviation from the pins, in the manifest)",
    )
    add("--dest", type=Path, default=REPO / ".whl", help="the wheelhouse folder (default .whl)")
    add(
        "--pip-python",
        default=sys.executable,
        help="the python whose pip resolves and downloads (best: the target's Python version)",
    )
    add("--max-mib", type=float, help="fail when the wheelhouse is larger than this")
    add(
        "--allow-torch",
        action="store_true",
        help="accept a target torch outside the supported range",
    )
    add(
        "--with-torch",
        action="store_true",
        help="put the pinned torch and its dependencies in the wheelhouse, for a target "
        "without its own torch (a Mac); default: the target's torch is used",
    )
    add(
        "--prefer-target",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="hold unpinned packages at the target's version where it meets every requirement (default)",
    )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="offline_install.py", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    _add_wheelhouse(commands)
    setup = commands.add_parser("install", help="make .venv from the wheelhouse (no network)")
    setup.add_argument("--wheelhouse", type=Path, default=REPO / ".whl")
    setup.add_argument("--venv", type=Path, default=REPO / ".venv")
    setup.add_argument("--base-python", default=sys.executable,
                       help="the machine's python, whose torch is used (default: the one running this)")  # fmt: skip
    setup.add_argument("--allow-torch", action="store_true", help="use a torch outside the supported range")  # fmt: skip
    setup.add_argument("--recreate", action="store_true", help="replace a .venv the offline install did not make")  # fmt: skip
    check = commands.add_parser("check", help="check the running venv against the manifest")
    check.add_argument("--wheelhouse", type=Path, default=REPO / ".whl")
    check.add_argument("--allow-torch", action="store_true")
    check.add_argument("--facts", type=Path, help="write the torch facts (JSON) here")
    return parser


def _print_wheelhouse(manifest: dict, dest: Path) -> None:
    wheels = sorted(manifest["wheels"], key=lambda row: -row["bytes"])
    target = manifest["target"]
    print(
        f"wheelhouse {dest}: {len(wheels)} wheels, {_mib(manifest['total_bytes'])} "
        f"({manifest['total_bytes']:,} bytes) for Python {target['python_version']} on "
        f"{target['platforms'][0]} and older"
    )
    print(f"  used from the target (same version): {len(manifest['from_target'])} packages")
    for row in manifest["dropped"]:
        print(f"  not in the wheelhouse: {row['name']} {row['version']} ({row['reason']})")
    for row in manifest["deviations"]:
        print(
            f"  deviation: {row['name']} {row['used']} instead of {row['pinned']} ({row['reason']})"
        )
    for row in wheels[:8]:
        print(f"  {_mib(row['bytes']):>9}  {row['filename']}  ({row['reason']})")
    preferred = manifest["preferred_target_versions"]
    if preferred:
        print(f"  unpinned, held at the target's version: {len(preferred)} packages")
    for note in (manifest["resolved_with"].get("note"), manifest.get("preference_note")):
        if note:
            print(f"  note: {note}")
    sys.stdout.flush()


def _over_budget(manifest: dict, max_mib: float) -> str:
    candidates = [
        f"{row['name']} ({_mib(row['bytes'])}, {row['reason']})"
        for row in sorted(manifest["wheels"], key=lambda row: -row["bytes"])
        if row["reason"].startswith("the target has")
    ]
    return (
        f"the wheelhouse is {_mib(manifest['total_bytes'])}, over --max-mib {max_mib:g} (written "
        "anyway). The largest the target has at another version, for --keep-target: "
        + ("; ".join(candidates[:6]) or "none")
    )


def wheelhouse(args: argparse.Namespace) -> int:
    try:
        from trainbench.offline import wheelhouse
    except ModuleNotFoundError as error:
        if error.name == "tomllib":  # the standard library's from Python 3.11
            raise OfflineError(
                f"this step needs Python 3.11 or later, and {sys.executable} is "
                f"{sys.version.split()[0]}: run it with the project's .venv/bin/python"
            ) from None
        raise OfflineError(
            f"this step needs the Python package {error.name!r}, which {sys.executable} lacks: "
            f"{sys.executable} -m pip install {error.name}, or run it with the project's .venv/bin/python"
        ) from None

    request = wheelhouse.Request(
        repo=REPO,
        dest=args.dest.resolve(),
        target=wheelhouse.Target(
            args.python_version, tuple(args.platform or wheelhouse.manylinux_platforms())
        ),
        freeze=args.target_freeze,
        extras=tuple(args.extras if args.extras is not None else wheelhouse.reqs.DEFAULT_EXTRAS),
        keep_target=tuple(args.keep_target),
        pip_python=args.pip_python,
        prefer_target=args.prefer_target,
        allow_torch=args.allow_torch,
        with_torch=args.with_torch,
    )
    manifest = wheelhouse.build(request)
    _print_wheelhouse(manifest, request.dest)
    if args.max_mib is not None and manifest["total_bytes"] > args.max_mib * MIB:
        print(f"offline_install: {_over_budget(manifest, args.max_mib)}", file=sys.stderr)
        return 1
    return 0


def install(args: argparse.Namespace) -> int:
    from trainbench.offline import venv

    request = venv.InstallRequest(
        repo=REPO,
        venv=args.venv.absolute(),
        wheelhouse=args.wheelhouse.resolve(),
        base_python=args.base_python,
        allow_torch=args.allow_torch,
        recreate=args.recreate,
    )
    record = venv.install(request)
    action = "reused (same wheelhouse, same interpreter)" if record["reused"] else "made"
    print(f"{request.venv} {action} over {request.base_python}; its packages after the venv's:")
    for directory in record["machine_site_dirs"]:
        print(f"  {directory}")
    for row in record["deviations"]:
        print(
            f"  deviation: {row['name']} {row['used']} instead of {row['pinned']} ({row['reason']})"
        )
    torch = record["torch"]
    print(
        f"torch that will run: {torch['version']} (CUDA {torch['cuda'] or 'none'}, "
        f"{torch.get('device') or 'no CUDA device'}) from {torch['location']}; {torch['support']}"
    )
    return 0


def check_venv(args: argparse.Namespace) -> int:
    from trainbench.offline import check

    manifest = check.read_manifest(args.wheelhouse / "manifest.json")
    facts = check.run_check(manifest, args.allow_torch)
    if args.facts:
        atomic_write_text(args.facts, json.dumps(facts))
    print(
        f"ok: {len(check.expected_versions(manifest))} packages at the manifest's versions; torch {facts['version']}"
    )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    command = {"wheelhouse": wheelhouse, "install": install, "check": check_venv}[args.command]
    try:
        return command(args)
    except OfflineError as error:
        print(f"offline_install {args.command}: {error}", file=sys.stderr)
        return 2
