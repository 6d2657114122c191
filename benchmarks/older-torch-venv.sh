#!/usr/bin/env bash
# A second virtual environment with torch 2.5.1 (pypi.org's CUDA 12.4 build; 5.9 GB with
# its NVIDIA wheels, which it needs to import even on a machine without a GPU) beside the
# project's pinned torch, with trainbench installed editable from this checkout: what
# benchmarks/suites/torch-versions.yaml compares (docs/report.md, "Comparing runs").
#   bash benchmarks/older-torch-venv.sh [VENV]        (after `make setup`)
# Default VENV: .venv-torch-2.5.1 in the checkout. Needs pypi.org (about 2 minutes).
set -euo pipefail
CHECKOUT=$(cd "$(dirname "$0")/.." && pwd)
VENV=${1:-$CHECKOUT/.venv-torch-2.5.1}
HERE=$(mktemp -d)  # the constraint and requirement files made below
TORCH_WHEEL=${TORCH_WHEEL:-torch==2.5.1}   # or the downloaded wheel's path

python3.11 -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --upgrade pip

# 1. torch 2.5.1 and its CUDA wheels from pypi.org. --isolated: no pip.conf (its
#    constraint file caps torch, its extra indexes are local); -c: the packages torch
#    shares with the main venv at the main venv's versions (sympy is torch's own pin).
PIP_CONSTRAINT=/dev/null "$VENV/bin/pip" install --isolated \
    --index-url https://pypi.org/simple --cert /etc/ssl/certs/ca-certificates.crt \
    "$TORCH_WHEEL" filelock==4.3.1 typing_extensions==4.16.0 networkx==3.6.1 \
    Jinja2==3.1.6 MarkupSafe==3.0.4 fsspec==2026.9.0 mpmath==1.3.0

# 2. The runtime dependencies of pyproject.toml but torch, at the main venv's versions
#    (its pip freeze as constraints), except transformers: 5.23.0 disables PyTorch below
#    2.6 ("PyTorch >= 2.6 is required but found 2.5.1"), 5.18-5.19 accept 2.5 but call
#    torch.accelerator at import; 5.17.0 is the newest that works. It needs
#    huggingface-hub < 2.0 (1.33.0 from pypi.org).
"$CHECKOUT/.venv/bin/pip" freeze \
    | grep -v -i -e '^#' -e '^-e' -e '^torch==' -e '^sympy==' -e '^transformers==' \
        -e '^huggingface.hub==' > "$HERE/constraints-main.txt"
"$CHECKOUT/.venv/bin/python" - "$CHECKOUT/pyproject.toml" > "$HERE/runtime-requirements.txt" <<'EOF'
import sys, tomllib
for req in tomllib.load(open(sys.argv[1], "rb"))["project"]["dependencies"]:
    if not req.startswith(("torch==", "transformers==")):
        print(req)
EOF
PIP_CONSTRAINT="$HERE/constraints-main.txt" "$VENV/bin/python" -m pip install --quiet \
    -r "$HERE/runtime-requirements.txt"
PIP_CONSTRAINT=/dev/null "$VENV/bin/pip" install --isolated --quiet \
    --index-url https://pypi.org/simple --cert /etc/ssl/certs/ca-certificates.crt \
    -c "$HERE/constraints-main.txt" transformers==5.17.0 huggingface-hub==1.33.0

# 3. trainbench itself, without its pins (they would bring torch 2.13 back).
"$VENV/bin/python" -m pip install --quiet --no-deps -e "$CHECKOUT"

# 4. Check.
cd /tmp
"$VENV/bin/python" -c "import torch, transformers, trainbench; \
assert torch.__version__.split('+')[0] == '2.5.1', torch.__version__; \
from transformers import DistilBertForSequenceClassification; \
print('torch', torch.__version__, 'transformers', transformers.__version__)"
"$VENV/bin/snakemake" --version
"$VENV/bin/pip" check || true  # names trainbench's own pins (torch, transformers) only
