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

# CONFIG="configs/a.yaml configs/b.yaml" adds config files over config.yaml; they are
# checked first (missing file, YAML error with its line: one clear line each).
# recover.py only acts after a killed run: it removes a stale lock when no
# Snakemake runs here (SIGINT/SIGTERM need nothing: rerun-incomplete reruns the cell).
report: $(STAMP)
	@$(BIN)/python scripts/check_config.py config.yaml $(CONFIG)
	$(BIN)/python scripts/recover.py
	$(BIN)/snakemake --cores 1 results/report.md $(if $(CONFIG),--configfile $(CONFIG))

test: $(STAMP)
	$(BIN)/pytest

lint: $(STAMP)
	$(BIN)/snakemake --lint
	$(BIN)/snakefmt --check .
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

clean:
	rm -rf results/* .snakemake

# Rerun exactly the failed cells (all devices, or DEVICE=mps; INCLUDE_UNAVAILABLE=1 adds
# the unavailable ones) and rebuild what depends on them; cells no longer in the
# config are skipped and listed.
rerun-failed: $(STAMP)
	@cells=$$($(BIN)/python scripts/failed_runs.py $(if $(DEVICE),--device $(DEVICE)) $(if $(INCLUDE_UNAVAILABLE),--include-unavailable)) || exit 1; \
	if [ -z "$$cells" ]; then echo "rerun-failed: nothing to rerun"; \
	else $(BIN)/snakemake --cores 1 results/report.md --forcerun $$cells; fi
