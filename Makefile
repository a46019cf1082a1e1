# minimodel: `make lab` opens the course, `make test` proves it works. Both set up .venv first.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
# torch 2.13.0 (CPU build) lies on this machine's disk; an unpinned torch pulls a CUDA build.
FIND_LINKS := $(if $(wildcard /opt/wheels),--find-links /opt/wheels)
PIP_INSTALL := $(PIP) install --disable-pip-version-check -q $(FIND_LINKS) -c constraints.txt
STAMP := $(VENV)/.installed
NBVAL := --nbval-current-env --nbval-sanitize-with tests/nbval_sanitize.cfg -p no:cacheprovider
export PYTHONHASHSEED := 0

.PHONY: help install lab test test-fast lint notebooks bench book exercises clean

help:
	@echo "make lab     install the course and open JupyterLab on chapters/"
	@echo "make test    install and run every test: ruff, pytest, notebooks"
	@echo "make bench   engine vs transformers vs the naive loop (docs/benchmarks.md)"
	@echo "make book    build the book into book/_build/html"

$(PY):
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml constraints.txt | $(PY)
	$(PIP_INSTALL) -e ".[course,dev]"
	@touch $@

install: $(STAMP)

lab: install
	$(PY) -c "import minimodel as mm; print('tiny model at', mm.resolve_model('tiny'))"
	$(VENV)/bin/jupyter lab chapters/

lint: install
	$(VENV)/bin/ruff check minimodel tests

test-fast: install
	HF_HUB_OFFLINE=1 $(VENV)/bin/pytest -q tests

notebooks: install
	$(PY) -c "import minimodel as mm; mm.resolve_model('tiny')"
	HF_HUB_OFFLINE=1 $(VENV)/bin/pytest -q --nbval $(NBVAL) chapters solutions
	HF_HUB_OFFLINE=1 $(VENV)/bin/pytest -q --nbval-lax $(NBVAL) exercises

test: lint test-fast notebooks

exercises: install
	$(PY) -m minimodel exercises

bench: install
	$(PY) -m minimodel bench

book: install
	$(PIP_INSTALL) -e ".[book]"
	$(VENV)/bin/jupyter-book build book

clean:
	rm -rf $(VENV) book/_build build .pytest_cache
