"""Check config files before Snakemake starts: each file on its own (readable, valid
YAML, a mapping, each key once, the schema's structure), then their merge (values,
the paths it names, your own model's entry), one line per problem naming the file,
line, key and fix: the lines a plain `snakemake` refuses the same config with.
`make report CONFIG="configs/x.yaml"` runs it first.

    python scripts/check_config.py config.yaml configs/gpu.yaml
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from trainbench.config.cli import main_check  # noqa: E402

if __name__ == "__main__":
    sys.exit(main_check(sys.argv[1:]))
