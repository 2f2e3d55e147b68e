# Two commands on a fresh clone: `make demo` and `make test`. Each sets up its own virtualenv.
#   make test TL=3.9      runs the suite against TransformerLens 3.9 in a second venv (.venv-tl3.9)
#   make demo TORCH=...   picks the torch build to install (default: plain `torch` from PyPI)

PYTHON ?= python3
TL ?=
TORCH ?= torch
VENV := .venv$(if $(TL),-tl$(TL))
BIN := $(VENV)/bin
PYTEST_ARGS ?=

.PHONY: demo test bench clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet "$(TORCH)"
	$(BIN)/pip install --quiet -e ".[dev,devinterp]" $(if $(TL),"transformer-lens==$(TL).*")
	touch $@

demo: $(VENV)/.installed
	$(BIN)/mechsynth demo

test: $(VENV)/.installed
	$(BIN)/python -m pytest $(PYTEST_ARGS)

bench: $(VENV)/.installed
	$(BIN)/python benchmarks/train_speed.py

clean:
	rm -rf .venv .venv-tl* runs
