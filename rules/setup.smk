# Read first, before the config: this checkout's package on the path, and every config
# source (config.yaml, each --configfile, --config) checked on its own: a readable
# file of valid YAML holding a mapping, each key once, string keys, the schema's
# structure; each problem one line with its file, line, key and fix (Snakemake's own
# messages name none of them). The merged config is checked in rules/common.smk.
import sys
from pathlib import Path

from snakemake.exceptions import WorkflowError

sys.path.insert(0, str(Path(workflow.basedir) / "scripts"))

from trainbench.config.files import REFUSAL_PREFIX, workflow_layers  # noqa: E402

_config_problems = [
    problem
    for layer in workflow_layers(workflow.configfiles, workflow.config_settings.config)
    for problem in layer.problems
]
if _config_problems:
    raise WorkflowError("\n".join(REFUSAL_PREFIX + p for p in _config_problems))
