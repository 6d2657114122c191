"""Print the metrics.json paths of failed cells, for `snakemake --forcerun`:

snakemake --cores 1 results/report.md --forcerun $(python scripts/failed_runs.py --device mps)
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from trainbench.launch.rerun import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
