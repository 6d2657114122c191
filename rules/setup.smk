# Read first, before the config: this checkout's package on the path, and the config
# file checked for YAML errors with file, line and column (Snakemake's own message
# names neither).
import sys
from pathlib import Path

from snakemake.exceptions import WorkflowError

sys.path.insert(0, str(Path(workflow.basedir) / "scripts"))

from trainbench.config_checks import config_file_problems  # noqa: E402

_config_problems = config_file_problems(["config.yaml"])
if _config_problems:
    raise WorkflowError("\n".join(_config_problems))
