# Two entry points, both self-contained on a fresh machine (only python3 and PyPI needed):
#   make demo   create .venv, install commgraph, run the main job on bundled data
#   make test   create .venv, install commgraph with test extras, run the whole suite (two pytest
#               processes, a test file to each: pytest-xdist)
# For a developer's loop (docs/testing.md):
#   make test-fast  the unit tier: no process started, no GPU, nothing slow
#   make lint       ruff check and ruff format --check
VENV   ?= .venv
PYTHON ?= python3
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test test-fast lint bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[test]"
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/commgraph train cora --workers 4

test: $(STAMP)
	$(PY) -m pytest -n 2 --dist loadfile

test-fast: $(STAMP)
	$(PY) -m pytest -m "not slow and not multiproc and not gpu"

lint: $(STAMP)
	$(PY) -m ruff check src tests benchmarks
	$(PY) -m ruff format --check src tests benchmarks

bench: $(STAMP)
	$(PY) benchmarks/load_edgelist.py

clean:
	rm -rf $(VENV) .pytest_cache
