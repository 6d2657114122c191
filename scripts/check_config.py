"""Check config files before Snakemake starts: each file exists and is valid YAML
(named with line and column), and their merge is a valid config, with the same
short messages the workflow gives. `make report CONFIG="configs/x.yaml"` runs it;
plain `snakemake --configfile` reports a missing or broken file itself.

    python scripts/check_config.py config.yaml configs/gpu-smoke.yaml
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from trainbench.config_checks import main_check  # noqa: E402

if __name__ == "__main__":
    sys.exit(main_check(sys.argv[1:]))
