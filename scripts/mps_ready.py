"""Would each workload of a config run on Apple's GPU (MPS)? Its short cell on the MPS
emulator (CPU compute held to MPS's rules), on any machine; `make mps-ready CONFIG=...`.

    python scripts/mps_ready.py config.yaml examples/my_model.yaml
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from trainbench.launch.readiness import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
