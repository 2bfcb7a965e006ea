# User-facing commands. `make run` and `make test` install everything they need first.
#
# The environment is a virtualenv outside the checkout, keyed by the lock file's hash, so a fresh
# clone (or CI) reuses it and a changed lock builds a new one. Override with VENV=/path (an
# overridden path is not keyed: delete it to rebuild after the lock changes).

SHELL := /bin/bash
LOCK_HASH := $(shell sha256sum requirements.lock | cut -c1-12)
VENV ?= $(HOME)/.cache/textgen-tfx/venv-$(LOCK_HASH)
UV_VERSION := 0.13.9
# The first interpreter that really is Python 3.10 (a pyenv shim may exist without answering).
PYTHON310 ?= $(shell for p in python3.10 $$HOME/.pyenv/versions/3.10*/bin/python3.10 /usr/local/bin/python3.10 /usr/bin/python3.10; do \
	"$$p" -c 'import sys; assert sys.version_info[:2] == (3, 10)' 2>/dev/null && { echo "$$p"; break; }; done)
PY := $(VENV)/bin/python
export TF_USE_LEGACY_KERAS := 1
export TF_CPP_MIN_LOG_LEVEL := 2

DATA_ROOT ?= data/corpus
OUTPUT_ROOT ?= runs/local
PYTEST_ARGS ?=
# pytest-xdist workers for `make test` and `make test-fast` (auto: one per core; 0: one process).
TEST_WORKERS ?= auto
PYTEST_PARALLEL := -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

.PHONY: help install run lint format test test-fast compile compile-settings docs docs-serve lock clean

help:  ## list the commands
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

# No prerequisite on purpose: the path already carries the lock's hash, and a fresh clone's lock
# file is always newer than the stamp, which would rebuild the environment on every CI run.
$(VENV)/.installed:
	@test -n "$(PYTHON310)" || { echo "error: no Python 3.10 interpreter found (tried python3.10 and ~/.pyenv/versions/3.10*)"; exit 1; }
	@echo ">> creating $(VENV) with $(PYTHON310) (keyed by requirements.lock)"
	rm -rf "$(VENV)"
	"$(PYTHON310)" -m venv "$(VENV)"
	"$(PY)" -m pip install --quiet --disable-pip-version-check "uv==$(UV_VERSION)"
	"$(VENV)/bin/uv" pip install --python "$(PY)" -r requirements.lock
	touch "$@"

# The environment sets PYTHONDONTWRITEBYTECODE=1, so without this every Python process (each test
# subprocess, each Beam worker) would compile TensorFlow and TFX from source again, which triples
# their import time (benchmarks/README.md). Compiled once per environment; a file that does not
# compile (some packages ship Python 2 test data) is skipped.
$(VENV)/.bytecode: $(VENV)/.installed
	@echo ">> compiling the environment's Python bytecode (once per environment)"
	-"$(PY)" -m compileall -q -j 0 "$(VENV)/lib" > /dev/null 2>&1
	touch "$@"

install: $(VENV)/.bytecode  ## create the pinned environment and install this project into it
	@"$(VENV)/bin/uv" pip install --quiet --python "$(PY)" --no-deps --no-build-isolation -e .

run: install  ## run the full local pipeline on the bundled corpus, then print generations
	"$(VENV)/bin/textgen" run --data-root "$(DATA_ROOT)" --output-root "$(OUTPUT_ROOT)"

lint: install  ## check formatting and lint the tree (ruff, configured in ruff.toml)
	"$(VENV)/bin/ruff" format --check .
	"$(VENV)/bin/ruff" check .

format: install  ## format the tree and apply ruff's safe fixes
	"$(VENV)/bin/ruff" format .
	"$(VENV)/bin/ruff" check --fix .

test: lint  ## lint, then run the whole test suite (slow end-to-end tests included)
	"$(PY)" -m pytest tests $(PYTEST_PARALLEL) $(PYTEST_ARGS)

test-fast: install  ## run the unit tests only (skips tests marked slow)
	"$(PY)" -m pytest tests -m "not slow" $(PYTEST_PARALLEL) $(PYTEST_ARGS)

# Compiling for a cluster needs that cluster's settings (docs/kubeflow.md): the image, a gs:// or
# s3:// pipeline root and an MLflow server every pod reaches; COMPILE_ARGS adds any other
# `textgen compile` flags, e.g. COMPILE_ARGS='--data-root gs://my-bucket/corpus --serving-dir gs://my-bucket/serving'.
IMAGE ?=
PIPELINE_ROOT ?=
REGISTRY_URI ?=
COMPILE_ARGS ?=

compile: compile-settings install  ## compile the pipeline to a KFP v2 spec (runs/kubeflow/pipeline.yaml): needs IMAGE, PIPELINE_ROOT, REGISTRY_URI
	"$(VENV)/bin/textgen" compile --output-dir runs/kubeflow --image "$(IMAGE)" --pipeline-root "$(PIPELINE_ROOT)" \
		--set registry.tracking_uri="$(REGISTRY_URI)" $(COMPILE_ARGS)

compile-settings:
	@test -n "$(IMAGE)" -a -n "$(PIPELINE_ROOT)" -a -n "$(REGISTRY_URI)" || { echo "make compile needs the cluster's settings: make compile IMAGE=REPO/textgen-tfx@sha256:DIGEST PIPELINE_ROOT=gs://BUCKET/textgen/root REGISTRY_URI=http://MLFLOW-HOST:5000 (see docs/kubeflow.md)"; exit 2; }

# NO_MKDOCS_2_WARNING: Material for MkDocs 9.7 prints a banner about MkDocs 2.0 on every build.
docs: install  ## build the documentation site into site/ (regenerates docs/config-reference.md; mkdocs build --strict)
	"$(PY)" -m pipeline.config_reference
	NO_MKDOCS_2_WARNING=1 "$(VENV)/bin/mkdocs" build --strict

docs-serve: install  ## serve the documentation at http://localhost:8000, rebuilt on every edit
	NO_MKDOCS_2_WARNING=1 "$(VENV)/bin/mkdocs" serve --dev-addr localhost:8000

lock: $(VENV)/.installed  ## re-resolve requirements.in into requirements.lock
	"$(VENV)/bin/uv" pip compile --python-version 3.10 --python-platform x86_64-manylinux_2_36 requirements.in -o requirements.lock

clean:  ## remove local run outputs
	rm -rf runs
