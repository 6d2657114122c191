# Two entry points for a fresh clone:
#   make report   set up .venv and run the default matrix -> results/report.md
#   make test     set up .venv (with test tools) and run the test suite
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.trainbench-installed

.PHONY: setup report test lint clean rerun-failed

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	touch $(STAMP)

setup: $(STAMP)

# recover.py only acts after a killed run: it removes a stale lock when no
# Snakemake runs here (SIGINT/SIGTERM need nothing: rerun-incomplete reruns the cell).
report: $(STAMP)
	$(BIN)/python scripts/recover.py
	$(BIN)/snakemake --cores 1 results/report.md

test: $(STAMP)
	$(BIN)/pytest

lint: $(STAMP)
	$(BIN)/snakemake --lint
	$(BIN)/snakefmt --check .
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

clean:
	rm -rf results/* .snakemake

# Rerun exactly the failed cells (all devices, or DEVICE=mps) and rebuild what depends on them.
rerun-failed: $(STAMP)
	$(BIN)/snakemake --cores 1 results/report.md --forcerun $$($(BIN)/python scripts/failed_runs.py $(if $(DEVICE),--device $(DEVICE)))
