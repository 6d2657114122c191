"""Offline install for a machine without network (docs/offline-install.md).

python3 scripts/offline_install.py wheelhouse --python-version 3.12 --target-freeze FILE
python3 scripts/offline_install.py install      # on the target: .venv from .whl/
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from trainbench.offline.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
