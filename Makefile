# Two entry points for a fresh clone:
#   make report   set up .venv (runtime only) and run the default matrix -> results/report.md
#                 (CONFIG=configs/x.yaml: that config over config.yaml -> results/<run_name>/report.md)
#   make test     add the test tools to .venv and run the fast test suite (starts no daemon)
# More: make test-isa (the fast suite with oneDNN capped at AVX2), make test-slow (every
# real-process test), make test-durations (the fast suite's speed guard again), make
# test-browser (the HTML reports in a headless Chromium), make test-cluster (a real
# single-node Slurm: installs and starts daemons, root only), make test-mps-emulated
# (whole cells on the MPS emulator), make mps-ready CONFIG=... (would it run on Apple's
# GPU?), make lint, make rerun-failed, make redraw FOLDERS=... (the tables, figures and
# reports of results folders again, running no cell).
# A machine without network: make wheelhouse where the network is, then make
# offline-setup there (docs/offline-install.md).
PYTHON ?= python3
# Named by the user (command line or environment), PYTHON is also the Python .venv must have.
PYTHON_GIVEN := $(if $(filter-out default file,$(origin PYTHON)),--python-given)
VENV ?= .venv
BIN := $(VENV)/bin
RUNTIME := $(VENV)/.trainbench-runtime
DEV := $(VENV)/.trainbench-dev
SLURM := $(VENV)/.trainbench-slurm
PYTEST_ARGS ?=
# Extra Snakemake arguments for report and rerun-failed, e.g. SNAKEMAKE_ARGS=--dry-run
SNAKEMAKE_ARGS ?=
# The offline install's folder of wheels (git-ignored).
WHEELHOUSE ?= .whl

.PHONY: setup report redraw test test-durations test-isa test-slow test-browser test-cluster lint clean rerun-failed gpu-evidence evidence-check evidence-verify \
	wheelhouse offline-setup test-mps-emulated mps-ready mac-selftest FORCE

# $(VENV) itself, checked before every target that uses it (scripts/venv_python.py, run
# by $(PYTHON): standard library, any Python 3.6 or later). Its Python must lie in
# pyproject.toml's requires-python, and be PYTHON's when PYTHON is given (command line or
# environment); otherwise it is emptied (one line says so) and made anew here, and this
# file's new time makes $(RUNTIME) install again. A PYTHON outside that range stops the
# run with the command that fixes it. FORCE: the check runs every time, but leaves this
# file's time alone when $(VENV) is kept (then nothing is reinstalled).
$(VENV)/pyvenv.cfg: FORCE
	@command -v $(PYTHON) >/dev/null || { echo "make: PYTHON=$(PYTHON) is not a command here: name an installed Python 3, e.g. make $(MAKECMDGOALS) PYTHON=python3.13" >&2; exit 2; }
	@$(PYTHON) scripts/venv_python.py --venv $(VENV) --python "$(PYTHON)" --goals "$(MAKECMDGOALS)" $(PYTHON_GIVEN)
	@test -f $@ || { echo "$(PYTHON) -m venv $(VENV)"; $(PYTHON) -m venv $(VENV); }

FORCE:

# The runtime alone: what `make report` needs (no test tools, no Slurm plugin).
# This project's distribution was named `trainbench` before; that name on the package
# index is an unrelated project (docs/development.md). A venv holding either has it
# removed once, with the stale egg-info of the old name.
$(RUNTIME): pyproject.toml $(VENV)/pyvenv.cfg
	$(BIN)/python -m pip install --quiet --upgrade pip
	@rm -rf scripts/trainbench.egg-info
	@if $(BIN)/python -m pip show --quiet trainbench >/dev/null 2>&1; then \
		echo "$(BIN)/python -m pip uninstall --yes trainbench   # the old name (docs/development.md)"; \
		$(BIN)/python -m pip uninstall --quiet --yes trainbench; fi
	$(BIN)/python -m pip install --quiet -e .
	touch $(RUNTIME)

$(DEV): $(RUNTIME)
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	touch $(DEV)

$(SLURM): $(DEV)
	$(BIN)/python -m pip install --quiet -e ".[slurm]"
	touch $(SLURM)

setup: $(DEV)

# CONFIG="configs/a.yaml configs/b.yaml" adds config files over config.yaml; they are
# checked first (missing file, YAML error with its line: one clear line each).
# recover.py only acts after a killed run: it removes a stale lock when no
# Snakemake runs here (SIGINT/SIGTERM need nothing: rerun-incomplete reruns the cell).
report: $(RUNTIME)
	@$(BIN)/python scripts/check_config.py config.yaml $(CONFIG)
	$(BIN)/python scripts/recover.py
	$(BIN)/snakemake --cores 1 $(if $(CONFIG),--configfile $(CONFIG)) $(SNAKEMAKE_ARGS)

# The fast suite: unit tests and one end-to-end run of a tiny matrix. Then, outside the
# timed tests, its speed guard: a test without the `slow` mark that took more than the
# limit of tests/speed_guard.py (8 s of its own; a shared session-scoped run 90 s) fails
# `make test`: mark it slow (make test-slow) or let it share one session-scoped run.
# The fast suites run in TEST_WORKERS pytest-xdist processes (auto: one per CPU), whole
# files to a worker, so a module's shared run is set up once; TEST_WORKERS=0: one process.
DURATIONS ?= .test-durations.json
TEST_WORKERS ?= auto
FAST_WORKERS := $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile)
test: $(DEV)
	$(BIN)/pytest -m "not slow and not cluster and not mps_emulated" $(FAST_WORKERS) --durations-file=$(DURATIONS) $(PYTEST_ARGS)
	$(BIN)/python tests/speed_guard.py $(DURATIONS)

# The speed guard again over the last `make test`'s durations.
test-durations:
	$(BIN)/python tests/speed_guard.py $(DURATIONS)

# The fast suite again with oneDNN capped at AVX2 (no AVX-512, no bf16 instructions), as
# on a CPU without them: a cell or test that needs a kernel this lacks must become
# `unavailable` or skip with the reason (trainbench.measure.cpu_features), never crash.
test-isa: $(DEV)
	ONEDNN_MAX_CPU_ISA=AVX2 $(BIN)/pytest -m "not slow and not cluster and not mps_emulated" $(FAST_WORKERS) $(PYTEST_ARGS)

# Every test with real processes, signals and workflows, but no cluster (nor browser).
test-slow: $(DEV)
	$(BIN)/pytest -m "slow and not cluster and not browser" $(PYTEST_ARGS)

# Whole cells under MPS's rules on any machine (trainbench.measure.mps_emulator): every
# bundled workload and the example own model with the canary, each of issue 50's MPS
# findings restored (each must fail), the emulator's rules one by one. About 4 minutes on
# 2 cores; needs a C++ compiler once (the emulator's 50-line shim). Never an MPS speed.
test-mps-emulated: $(DEV)
	$(BIN)/pytest -m mps_emulated $(PYTEST_ARGS)

# Would each workload of CONFIG run on Apple's GPU? A short cell per workload on the MPS
# emulator (CPU compute, MPS's rules): "ready", or the first rule broken and the line.
# Exit 0 when every workload is ready. CONFIG's workloads, or config.yaml's without it.
mps-ready: $(RUNTIME)
	$(BIN)/python scripts/mps_ready.py config.yaml $(CONFIG)

# The HTML reports (results/html/ and `snakemake --report`) in a real headless Chromium,
# the machine's own (Debian's `chromium`), driven by Playwright, which downloads no
# browser. Skips without one, unless TRAINBENCH_REQUIRE_BROWSER=1 (CI).
test-browser: $(DEV)
	$(BIN)/pytest -m browser $(PYTEST_ARGS)

# Installs (apt) and starts a single-node Slurm with munge, MariaDB and slurmdbd on
# this machine, runs the workflow through Snakemake's Slurm executor, then stops what
# it started. Needs root; CI runs it.
test-cluster: $(SLURM)
	@echo "test-cluster: this installs (apt) and starts a single-node Slurm (munge, MariaDB, slurmdbd, slurmctld, slurmd) on this machine; needs root."
	TRAINBENCH_REQUIRE_CLUSTER=1 $(BIN)/pytest -m cluster $(PYTEST_ARGS)

lint: $(DEV)
	$(BIN)/snakemake --lint
	$(BIN)/snakefmt --check .
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

clean:
	rm -rf results/* .snakemake

# On a machine with a CUDA GPU: every CUDA measurement the README quotes, into
# docs/measured/ (PARTS="workloads throughput canary", or some of them; meant to fit the
# 10 minutes one command gets on a lent GPU machine: 562 s on an H200 on 2026-11-28; each
# folder's EVIDENCE.json records the call's wall per part). See
# scripts/trainbench/evidence/run.py.
PARTS ?= workloads throughput canary
gpu-evidence: $(RUNTIME)
	$(BIN)/python scripts/evidence.py run $(PARTS)

# On a Mac with Apple silicon: the CPU against its GPU (MPS) with every check
# (configs/mac-selftest.yaml, a short matrix), then one file to send back
# (results/mac-selftest/trainbench-mac-selftest-*.tgz: records, report, macOS and torch).
# Elsewhere it refuses (exit 2): see make mps-ready. See scripts/trainbench/evidence/mac.py.
mac-selftest: $(RUNTIME)
	$(BIN)/python scripts/evidence.py mac-selftest

# The measurement code changed since each docs/measured/ folder was made; fails when the
# README's evidence block does not say exactly that.
evidence-check: $(RUNTIME)
	$(BIN)/python scripts/evidence.py check --readme README.md

# Each docs/measured/ folder's commit against the source fingerprint of the code that
# measured (EVIDENCE.json's code): fails for a folder whose commit's tree has another
# source, and for one made before EVIDENCE.json named its source. Rewrites nothing.
evidence-verify: $(RUNTIME)
	$(BIN)/python scripts/evidence.py verify

# Offline install, step 1, where the network is (docs/offline-install.md): the wheels
# that a machine without network lacks for the pins (runtime + bench + apple), into
# $(WHEELHOUSE) with manifest.json. TARGET_PYTHON=3.12 (required); TARGET_FREEZE=that
# machine's `python3 -m pip freeze`; KEEP_TARGET="numpy scipy" uses its own versions of
# those; WHEELHOUSE_MIB=62 fails when larger; PIP_PYTHON=a python of the target's version;
# TARGET_PLATFORM=macosx_14_0_arm64 (default manylinux x86_64); WITH_TORCH=1 adds the
# pinned torch, for a machine without its own (a Mac); EXTRAS="bench dev" (default bench apple).
wheelhouse:
	@test -n "$(TARGET_PYTHON)" || { echo "wheelhouse: set TARGET_PYTHON, e.g. make wheelhouse TARGET_PYTHON=3.12 TARGET_FREEZE=target-freeze.txt"; exit 2; }
	$(if $(wildcard $(BIN)/python),$(BIN)/python,$(PYTHON)) scripts/offline_install.py wheelhouse \
		--python-version $(TARGET_PYTHON) --dest $(WHEELHOUSE) \
		$(if $(TARGET_FREEZE),--target-freeze $(TARGET_FREEZE)) \
		$(if $(KEEP_TARGET),--keep-target $(KEEP_TARGET)) \
		$(if $(WHEELHOUSE_MIB),--max-mib $(WHEELHOUSE_MIB)) \
		$(if $(PIP_PYTHON),--pip-python $(PIP_PYTHON)) \
		$(foreach tag,$(TARGET_PLATFORM),--platform $(tag)) \
		$(if $(WITH_TORCH),--with-torch) $(if $(EXTRAS),--extras $(EXTRAS))

# Offline install, step 2, on that machine, no network: $(VENV) over its $(PYTHON), whose
# torch and CUDA stack are used; the wheelhouse with --no-index; checked; the runtime
# marker written so `make report` runs without reinstalling. ALLOW_TORCH=1 accepts a
# torch outside the supported range; RECREATE=1 replaces a $(VENV) it did not make.
# Cheap to repeat (reuses a current $(VENV)).
offline-setup:
	$(PYTHON) scripts/offline_install.py install --wheelhouse $(WHEELHOUSE) --venv $(VENV) \
		$(if $(ALLOW_TORCH),--allow-torch) $(if $(RECREATE),--recreate)

# Redraw results folders already made, running no cell: their records' tables, figures
# (PNG and figures/paper/) and reports made again with this checkout's code, into
# results/$(NAME)/ (a records-only run through aggregate.include_results). FOLDERS="results/old
# path/to/mac/results"; NAME=redraw (default); COMPARE=folder|software (aggregate.compare.by);
# CONFIG=the runs' config files (their workloads, targets, baseline); FORCE_REDRAW=1 draws
# every figure and report again though up to date (the same bytes). scripts/redraw.py.
NAME ?= redraw
redraw: $(RUNTIME)
	$(BIN)/python scripts/redraw.py --name "$(NAME)" $(if $(COMPARE),--compare $(COMPARE)) \
		$(foreach c,$(CONFIG),--configfile $(c)) $(if $(FORCE_REDRAW),--force) \
		$(if $(SNAKEMAKE_ARGS),--snakemake "$(SNAKEMAKE_ARGS)") $(FOLDERS)

# Rerun exactly the failed cells (all devices, or DEVICE=mps; INCLUDE_UNAVAILABLE=1 adds
# the unavailable ones) and rebuild what depends on them; cells no longer in the
# config are skipped and listed.
rerun-failed: $(RUNTIME)
	@cells=$$($(BIN)/python scripts/failed_runs.py $(if $(DEVICE),--device $(DEVICE)) $(if $(INCLUDE_UNAVAILABLE),--include-unavailable) $(if $(CONFIG),--configfile $(CONFIG))) || exit 1; \
	if [ -z "$$cells" ]; then echo "rerun-failed: nothing to rerun"; \
	else $(BIN)/snakemake --cores 1 $(if $(CONFIG),--configfile $(CONFIG)) --forcerun $$cells $(SNAKEMAKE_ARGS); fi
