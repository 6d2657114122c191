"""``scripts/check_config.py``: check config files as Snakemake would, before it starts."""

from __future__ import annotations

import argparse
import sys

from trainbench.config import read_merged_config
from trainbench.config.files import ConfigRefused
from trainbench.config.matrix import enabled_workloads, repeat_settings


def main_check(paths: list[str]) -> int:
    """Exit status 0 when ``paths`` (config.yaml first, then overrides) make a valid
    config; else 2, with one line per problem on stderr, as Snakemake refuses them
    (rules/setup.smk each file, rules/common.smk the merged config)."""
    parser = argparse.ArgumentParser(
        prog="check_config.py",
        description="Check config files (config.yaml first, then overrides) as Snakemake "
        "would, before it starts: one line per problem naming the file, key and fix; "
        "when valid, the repeats each enabled workload will get.",
    )
    parser.add_argument("paths", nargs="+", metavar="config", help="YAML config files, in order")
    paths = parser.parse_args(paths).paths
    try:
        config, origins = read_merged_config(paths)
    except ConfigRefused as refused:
        for line in refused.lines:
            print(line, file=sys.stderr)
        return 2
    print(repeats_summary(config, origins))
    return 0


def repeats_summary(config: dict, origins: dict[str, dict[str, str]]) -> str:
    """One line: the repeats each enabled workload will get and which file decided."""
    parts = []
    for workload in enabled_workloads(config):
        value = repeat_settings(config, workload)
        count = (
            str(value["min"])
            if value["min"] == value["max"]
            else f"{value['min']}-{value['max']} (adaptive)"
        )
        origin = origins.get(workload, {}).get("repeats", "schema default")
        parts.append(f"{workload} {count} [{origin}]")
    return "trainbench: repeats per workload: " + "; ".join(parts)
