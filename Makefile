# Two entry points, both self-contained on a fresh machine (only python3 and PyPI needed):
#   make demo   create .venv, install commgraph, run the main job on bundled data
#   make test   create .venv, install commgraph with test extras, run the whole suite
VENV   ?= .venv
PYTHON ?= python3
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[test]"
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/commgraph train cora --workers 4

test: $(STAMP)
	$(PY) -m pytest

bench: $(STAMP)
	$(PY) benchmarks/load_edgelist.py

clean:
	rm -rf $(VENV) .pytest_cache
