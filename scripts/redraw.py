"""Redraw results folders without running a cell (make redraw): their records' tables,
figures and reports made again into results/NAME/. See trainbench.analysis.redraw.

python scripts/redraw.py --name redraw results/old-run path/to/mac/results
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from trainbench.analysis.redraw import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
