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

.PHONY: help install lab test test-fast test-stress lint notebooks bench book exercises translate clean

help:
	@echo "make lab     install the course and open JupyterLab on chapters/"
	@echo "             (make lab LAB=chapters/zh: the Chinese edition, 中文版)"
	@echo "make translate  build chapters/zh, solutions/zh, exercises/zh from translations/zh"
	@echo "make test    install and run every test: ruff, pytest, the stress lane, notebooks"
	@echo "make test-stress  the tests marked stress again, with every core kept busy"
	@echo "make bench   engine vs transformers vs the naive loop (docs/benchmarks.md)"
	@echo "make book    build the book into book/_build/html"
	@echo "make test-browser  run chapters in JupyterLab and open the book in headless chromium"

$(PY):
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml constraints.txt | $(PY)
	$(PIP_INSTALL) -e ".[course,dev]"
	@touch $@

install: $(STAMP)

# `make lab LAB=chapters/zh` opens the Chinese edition (中文版); LAB=exercises the exercises.
LAB ?= chapters
lab: install
	$(PY) -c "import minimodel as mm; print('tiny model at', mm.resolve_model('tiny'))"
	$(VENV)/bin/jupyter lab $(if $(filter 0,$(shell id -u)),--allow-root) $(LAB)/

lint: install
	$(VENV)/bin/ruff check minimodel tests

test-fast: install
	HF_HUB_OFFLINE=1 $(VENV)/bin/pytest -q -m "not browser" tests

# The stress lane: the tests that use processes, sockets, threads or deadlines (marker
# `stress`) run again while scripts/busy.py keeps every core busy, as a learner's busy laptop
# would; it stops its busy processes by their ids when pytest ends.
test-stress: install
	HF_HUB_OFFLINE=1 $(PY) scripts/busy.py -- $(VENV)/bin/pytest -q -p no:cacheprovider \
		-m "stress and not browser" tests

# Stored outputs must not depend on the machine: the chapters and solutions run twice, with the
# default threads and then with one thread (other reduction orders in every matmul and sum), and
# both runs must reproduce every stored output.
ONE_THREAD := OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
# The Chinese chapters and solutions (chapters/zh, solutions/zh) hold the English ones' code and
# stored outputs (tests/test_translation.py): nbval runs those once, in English. The Chinese
# exercises run, as they grade themselves and load the learner's own exercises/zh notebooks.
NO_ZH := --ignore=chapters/zh --ignore=solutions/zh

notebooks: install
	$(PY) -c "import minimodel as mm; mm.resolve_model('tiny')"
	HF_HUB_OFFLINE=1 $(VENV)/bin/pytest -q --nbval $(NBVAL) $(NO_ZH) chapters solutions
	HF_HUB_OFFLINE=1 $(VENV)/bin/pytest -q --nbval-lax $(NBVAL) exercises
	$(ONE_THREAD) $(PY) -c "import torch; assert torch.get_num_threads() == 1, torch.get_num_threads()"
	HF_HUB_OFFLINE=1 $(ONE_THREAD) $(VENV)/bin/pytest -q --nbval $(NBVAL) $(NO_ZH) chapters solutions

test: lint test-fast test-stress notebooks test-browser

exercises: install
	$(PY) -m minimodel exercises

translate: install
	$(PY) -m minimodel translate

bench: install
	$(PY) -m minimodel bench

# The book's source folder is the repository root (chapters/ and docs/ are read in place);
# book/_toc.yml is written from the chapters present, so the book builds at every stage;
# --all writes every page again (~15 s), so each page's chapter list matches the chapters present.
BOOK_STAMP := $(VENV)/.installed-book
$(BOOK_STAMP): $(STAMP) pyproject.toml constraints.txt
	$(PIP_INSTALL) -e ".[book]"
	@touch $@

book: $(BOOK_STAMP)
	$(PY) scripts/book_toc.py
	$(VENV)/bin/jupyter-book build . --all --config book/_config.yml --toc book/_toc.yml \
		--path-output book
	@echo "book: open book/_build/html/index.html"

.PHONY: browser-deps test-browser
# Debian's chromium for tests/test_browser.py, and CJK fonts so that 中文 renders in screenshots.
# Needs root (CI is); elsewhere it says so, and the browser test skips, saying why.
BROWSER_PKGS := chromium chromium-driver fonts-noto-cjk
browser-deps:
	@if dpkg -s $(BROWSER_PKGS) >/dev/null 2>&1; then \
		echo "browser-deps: $$(chromium --version 2>/dev/null)"; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		(apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
			$(BROWSER_PKGS)) || echo "browser-deps: apt-get failed; the browser test will skip"; \
	else echo "browser-deps: run 'sudo apt-get install $(BROWSER_PKGS)' for the browser test" \
		"(without chromium it skips)"; fi

# The browser test: JupyterLab runs chapters in headless chromium; the built book is opened.
test-browser: book browser-deps
	HF_HUB_OFFLINE=1 $(VENV)/bin/pytest -q -m browser tests/test_browser.py

clean:
	rm -rf $(VENV) book/_build build .pytest_cache
