# The two commands of README.md: `make demo` and `make test`. Everything else is a helper.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
INSTALLED := $(VENV)/.installed

.PHONY: demo test lint docs browser bench clean

include frontend.mk
include compat.mk

$(INSTALLED): pyproject.toml setup.py constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q -c constraints.txt -e ".[torch,jax,lightning,transformers,test,docs]"
	touch $@

demo: $(INSTALLED)
	$(BIN)/python demo/make_demo.py --logdir demo/runs
	$(BIN)/tensorboard --logdir demo/runs --port 6006 --bind_all

test: $(INSTALLED) browser lint docs frontend-check
	$(BIN)/python -m pytest -q -p no:cacheprovider
	$(MAKE) compat

lint: $(INSTALLED)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# The documentation site (docs/conf.py says why Sphinx), built afresh into site/. Strict: a
# warning, a broken link or anchor, a missing include or a name autodoc cannot import fails it.
docs: $(INSTALLED)
	rm -rf site
	$(BIN)/sphinx-build -W --keep-going -q -b html docs site

# Debian's Chromium for the browser tests (Playwright's own browser download fails here).
browser:
	@command -v chromium >/dev/null || (apt-get update -q && apt-get install -y -q chromium)

bench: $(INSTALLED)
	$(BIN)/python bench/stats_kernel.py

clean:
	rm -rf $(VENV) demo/runs .compat site
