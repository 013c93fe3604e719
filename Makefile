# Two commands on a fresh machine: `make repro` (set up, run the pipeline) and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# The CPU wheel; installed before the project so its torch range never pulls a CUDA build.
# Elsewhere, e.g.: make setup TORCH_SPEC=torch==2.13.0 TORCH_PIP_ARGS="--index-url <cpu index>"
TORCH_SPEC ?= torch==2.13.0
TORCH_PIP_ARGS ?=
PIP_QUIET ?= -q
STAMP := $(VENV)/.gnnpipe-installed
# test files run on this many pytest-xdist workers (each test pins one thread: tests/conftest.py)
TEST_JOBS ?= 2

.PHONY: exp setup repro repro-scale repro-typed-scale test clean-data help docs docs-check generate

help:
	@echo "make repro   set up $(VENV) and run the whole pipeline (dvc repro, warm stages; WARM= cold)"
	@echo "make test    set up $(VENV) and run the test suite"
	@echo "make exp     dvc exp show narrowed to 120 columns (headline metrics, model params)"
	@echo "make repro-scale  the 1M-node profile (profiles/scale.yaml) as a dvc experiment"
	@echo "make repro-typed-scale  the typed 2M-node profile (profiles/typed_scale.yaml)"
	@echo "make setup   only create $(VENV) and install gnnpipe with its test extras"
	@echo "make docs    build the user guide (docs/) into site/ with mkdocs --strict"
	@echo "make docs-check  run every documented shell command in a scratch copy (minutes)"
	@echo "make generate  rewrite dvc.yaml and the params tables from gnnpipe/pipeline.py, config.py"

# The project and its extras through uv: the same versions as pip, in seconds where pip takes
# minutes (torch, installed first, already satisfies them and stays); pip if uv cannot be had.
# Bytecode compiled here as pip does: under PYTHONDONTWRITEBYTECODE every process would
# otherwise compile every module it imports, each time.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -c "import torch" 2>/dev/null || \
		$(BIN)/python -m pip install $(PIP_QUIET) $(TORCH_PIP_ARGS) "$(TORCH_SPEC)"
	( $(BIN)/python -m pip install $(PIP_QUIET) uv && \
		$(BIN)/python -m uv pip install $(PIP_QUIET) --compile-bytecode --python $(BIN)/python \
			-e ".[test]" ) || \
		$(BIN)/python -m pip install $(PIP_QUIET) -e ".[test]"
	touch $@

setup: $(STAMP)

# preflight: params checked (and dataset.path present) before DVC removes any output. The stages
# run in forks of a warm server that imported torch & co. once (same output bytes; `make repro
# WARM=` runs each stage cold: docs/pipeline.md, "What a run costs besides the stages")
WARM ?= $(BIN)/gnnpipe warm --
# gnnpipe's bytecode first (a no-op when current): under PYTHONDONTWRITEBYTECODE each stage
# process and each warm fork would otherwise compile the modules it imports (~0.1 s of CPU each)
COMPILE = $(BIN)/python -m compileall -q gnnpipe stages > /dev/null
repro: setup
	$(BIN)/python -m gnnpipe.preflight
	$(COMPILE)
	PATH="$(CURDIR)/$(BIN):$$PATH" $(WARM) $(BIN)/dvc repro
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/dvc metrics show

# experiments side by side in 120 columns (the headline and the model's params; more: ARGS=...)
exp: setup
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python -m gnnpipe.experiments $(ARGS)

# a profile applied with one -S per key (checked first); set -f: [10,5] is no glob
define run_profile
	$(COMPILE)
	set -f; args="$$($(BIN)/python -m gnnpipe.runtime.profiles $(1))" && \
		PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/dvc exp run $$args
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/dvc metrics show
endef

repro-scale: setup
	$(call run_profile,profiles/scale.yaml)

repro-typed-scale: setup
	$(call run_profile,profiles/typed_scale.yaml)

# gnnpipe's and the tests' bytecode once (seconds), not in every stage process a test starts;
# the 25 slowest tests are printed, so a CI log shows where the 10-minute budget goes
test: setup
	$(BIN)/python -m compileall -q -j 0 gnnpipe tests bench stages > /dev/null
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python -m pytest -n $(TEST_JOBS) --dist loadfile \
		--durations=25

# the generated files: dvc.yaml (stage table + import closure) and the params tables of the docs
generate: setup
	$(BIN)/python -m gnnpipe.dvc_yaml --write
	$(BIN)/python -m gnnpipe.params_doc --write

DOCS_STAMP := $(VENV)/.gnnpipe-docs-installed

$(DOCS_STAMP): pyproject.toml $(STAMP)
	$(BIN)/python -m pip install $(PIP_QUIET) -e ".[test,docs]"
	touch $@

docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/python -m mkdocs build --strict

# release check: every unmarked shell block of README.md and docs/ for real (tests/pipeline/test_docs.py)
docs-check: setup
	GNNPIPE_DOCS_CHECK=1 PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python -m pytest -s -q \
		tests/pipeline/test_docs.py -k docs_check_runs_every_unmarked_block --timeout 7200

clean-data:
	rm -rf data/prepared data/split data/partition data/propagate data/baseline data/model \
		metrics reports dvc_plots
