"""Before a run: clean up after a Snakemake that was killed (stale lock, orphaned cells)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from trainbench.launch.recover import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
