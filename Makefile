# Thin wrapper: every target installs what it needs first (once; again when pyproject.toml changes).
#   .venv       the package (make demo); with the light lane on top: a CPU build of torch, the test and
#               lint tools (make test, make lint, make docs)
#   .venv-full  the full lane: the pinned CUDA build of torch with torchvision, Lightning, Accelerate,
#               torchdata and ultralytics (make test-full runs the tests that need them, which make test
#               skips; make bench runs here, since its suites include torchvision's)
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
FULL := .venv-full
FULL_STAMP := $(FULL)/.installed
PIP := pip install --quiet --disable-pip-version-check
# The CPU wheel of torch (about 750 MB installed, against 5.5 GB for the CUDA build the full lane pins).
TORCH_CPU ?= torch==2.13.0
# Two test processes: most tests wait on worker processes, so two keep a 2-core machine busy. A file's
# tests run in one of them, in order (--dist loadfile): a module's fixtures (a local Ray, a moto server,
# the typing test's one mypy run) start once.
PYTEST := -m pytest -q -n 2 --dist loadfile

.PHONY: install install-full check test test-full lint bench demo docs docs-serve clean

# The package alone: what `make demo` needs.
$(VENV)/.installed-base: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/$(PIP) -e .
	touch $@

# The light lane: torch's CPU wheel first, so that the dev extra's torch>=2.4 is already met by it.
$(STAMP): $(VENV)/.installed-base
	$(BIN)/$(PIP) "$(TORCH_CPU)"
	$(BIN)/$(PIP) -e ".[dev]"
	touch $(STAMP)

$(FULL_STAMP): pyproject.toml
	$(PYTHON) -m venv $(FULL)
	$(FULL)/bin/$(PIP) -e ".[dev,full]"
	touch $(FULL_STAMP)

$(VENV)/.installed-docs: $(STAMP)
	$(BIN)/$(PIP) -e ".[dev,docs]"
	touch $@

install: $(STAMP)

install-full: $(FULL_STAMP)

# The quick lane, the inner loop of development (under 5 minutes on 2 cores): the lint checks, then the
# unit tests of the package's core, by directory: the house's static checks, htypes, the versioned table
# format, expressions and the transform engine, less the engine's slowest files (kill-and-resume runs,
# scripts in subprocesses, Hugging Face input), which `make test` runs with everything else (storage on
# S3, loaders, the viewer in a browser, vision, reliability kills, docs and examples).
CHECK_TESTS := tests/test_house.py tests/test_import_direction.py tests/test_layering.py \
	tests/test_errors_doc.py tests/test_docstrings.py tests/test_parsing.py tests/test_boxes.py \
	tests/test_localfiles.py tests/test_compression.py tests/htypes tests/versioned tests/select tests/compute
CHECK_SKIPS := test_fix_and_rerun test_reads_once test_errors test_failure_prefix test_huggingface_input \
	test_randomness test_tutorial

check: lint
	$(BIN)/python $(PYTEST) $(CHECK_TESTS) $(patsubst %,--ignore=tests/compute/%.py,$(CHECK_SKIPS))

# Everything but the tests marked `needs` (torchvision, Lightning, Accelerate, torchdata, ultralytics),
# which are skipped with their reason in the summary.
test: $(STAMP)
	$(BIN)/python $(PYTEST)

# Only the tests marked `needs`; a package they need that does not import fails them (--full-lane).
test-full: $(FULL_STAMP)
	$(FULL)/bin/python $(PYTEST) -m needs --full-lane

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports

bench: $(FULL_STAMP)
	$(FULL)/bin/python -m bench

demo: $(VENV)/.installed-base
	$(BIN)/lakecompute demo

docs: $(VENV)/.installed-docs
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

# The documentation site at http://127.0.0.1:8000, rebuilt as you edit docs/ or the docstrings.
docs-serve: $(VENV)/.installed-docs
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve --strict --watch lakecompute

clean:
	rm -rf $(VENV) $(FULL) .pytest_cache .mypy_cache .ruff_cache site demo-output
