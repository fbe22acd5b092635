# Thin wrapper: every target installs into .venv first when needed.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install test lint bench demo docs docs-serve clean

# The package alone (what `make demo` needs), then the dev toolchain on top (tests, lint, bench).
$(VENV)/.installed-base: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -e .
	touch $@

$(STAMP): $(VENV)/.installed-base
	$(BIN)/pip install --quiet --disable-pip-version-check -e ".[dev]"
	touch $(STAMP)

$(VENV)/.installed-docs: $(STAMP)
	$(BIN)/pip install --quiet -e ".[dev,docs]"
	touch $@

install: $(STAMP)

test: $(STAMP)
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports

bench: $(STAMP)
	$(BIN)/python -m bench

demo: $(VENV)/.installed-base
	$(BIN)/lakecompute demo

docs: $(VENV)/.installed-docs
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

# The documentation site at http://127.0.0.1:8000, rebuilt as you edit docs/ or the docstrings.
docs-serve: $(VENV)/.installed-docs
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve --strict --watch lakecompute

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache site demo-output
