# Two commands on a fresh clone: `make demo` and `make test`. Each sets up its own virtualenv.
#   make test                         the fast tier, before every commit: unit tests, contracts, planted circuits
#   make test-all                     everything: also the slow and smoke tests (experiment scripts, the CLI in
#                                     subprocesses, pools, Ray, real kills, the docs in Chromium, the notebook)
#   make test TL=3.9                  the fast tier against TransformerLens 3.9, in a second venv (.venv-tl3.9)
#   make test TORCH_BUILD=cuda|cpu    which torch build (default: cuda where nvidia-smi sees a GPU, else cpu)
#   make test TORCH=torch==2.13.0     a torch requirement of your own, of that build
#   make test VENV=.venv-cuda         another virtualenv (e.g. to keep both builds side by side)
#   make test TEST_WORKERS=0          the suite in one process (default: a pytest-xdist process per core)
#   make gpu-check DEVICE=cpu         everything on one device into assets/gpu_check.json (default DEVICE=cuda)

PYTHON ?= python3
TL ?=
TORCH ?= torch>=2.2
TORCH_BUILD ?= $(if $(shell nvidia-smi -L 2>/dev/null),cuda,cpu)
ifneq ($(filter-out cpu cuda,$(TORCH_BUILD)),)
$(error TORCH_BUILD must be cpu or cuda, got '$(TORCH_BUILD)')
endif
VENV ?= .venv$(if $(TL),-tl$(TL))
BIN := $(VENV)/bin
PYTEST_ARGS ?=
# pytest-xdist processes for `make test`, each with its share of the cores (tests/conftest.py)
TEST_WORKERS ?= auto
# the device of `make gpu-check`
DEVICE ?= cuda
# loadfile: a file's tests run on one worker, which builds the file's module-scoped fixtures (a trained run,
# the docs site) once, not once per worker, and runs them in the file's order
PYTEST := $(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile

# PyPI's Linux wheels of torch are CUDA builds (GBs of nvidia-* wheels); CPU builds are on PyTorch's own
# index (used where it answers), or in a wheel directory pip already knows (find-links).
CPU_INDEX := https://download.pytorch.org/whl/cpu
CPU_INDEX_ANSWERS = $(shell $(PYTHON) -c "import urllib.request as u; u.urlopen('$(CPU_INDEX)/torch/', timeout=10)" 2>/dev/null && echo yes)
# What only CUDA builds of torch require. Constrained to no version at all, they leave pip a CPU build or nothing.
CUDA_ONLY := triton cuda-toolkit nvidia-cudnn-cu11 nvidia-cudnn-cu12 nvidia-cudnn-cu13
REQUEST := $(TORCH) $(TORCH_BUILD) $(TL)
# constraints.txt: the CUDA_ONLY lines for a CPU build, then the torch installed, so that installing the rest
# never swaps it for another.

.PHONY: demo test test-all bench gpu-check docs clean FORCE

# Rewritten only when the torch asked for differs from the one the venv was made with, which remakes the venv.
$(VENV)/.request: FORCE
	@mkdir -p $(VENV); echo '$(REQUEST)' | cmp -s - $@ || echo '$(REQUEST)' > $@

$(VENV)/.installed: pyproject.toml $(VENV)/.request
	$(PYTHON) -m venv --clear $(VENV)
ifeq ($(TORCH_BUILD),cpu)
	printf '%s<0\n' $(CUDA_ONLY) > $(VENV)/constraints.txt
	$(BIN)/pip install --quiet $(if $(CPU_INDEX_ANSWERS),--extra-index-url $(CPU_INDEX)) --constraint $(VENV)/constraints.txt "$(TORCH)" \
	  || { echo "make: no CPU build of torch matching '$(TORCH)' found; TORCH_BUILD=cuda installs a CUDA build" >&2; exit 2; }
else
	: > $(VENV)/constraints.txt
	$(BIN)/pip install --quiet "$(TORCH)"
endif
	@$(BIN)/python -W ignore -c 'import torch; print(f"make: torch {torch.__version__}, the", f"CUDA {torch.version.cuda}" if torch.version.cuda else "CPU", "build (TORCH_BUILD=$(TORCH_BUILD))")'
	$(BIN)/python -c 'import importlib.metadata as m; print("torch==" + m.version("torch"))' >> $(VENV)/constraints.txt
	$(BIN)/pip install --quiet --constraint $(VENV)/constraints.txt -e ".[dev,devinterp,sae,hf,lightning,docs]" $(if $(TL),"transformer-lens==$(TL).*")
ifneq ($(filter 3.%,$(TL)),)
# tests/test_circuit_peers.py's peer (TransformerLens 3 only): auto-circuit, without the jax, dm-haiku, tracr and
# kaleido it also asks for (its edge attribution needs none of them)
	$(BIN)/pip install --quiet --no-deps "auto-circuit==1.0.1"
	$(BIN)/pip install --quiet --constraint $(VENV)/constraints.txt attrs plotly blobfile
# tests/test_sae_lens.py's peer: SAELens, which requires TransformerLens < 4
	$(BIN)/pip install --quiet --constraint $(VENV)/constraints.txt "sae-lens==6.54.*"
endif
	echo '$(REQUEST)' > $(VENV)/.request
	touch $@

demo: $(VENV)/.installed
	$(BIN)/mechsynth demo

# The fast tier: a hung test fails after 2 minutes (pyproject.toml gives the slow tier 10).
test: $(VENV)/.installed
	$(PYTEST) -m "not slow and not smoke" --timeout 120 $(PYTEST_ARGS)

test-all: $(VENV)/.installed
	$(PYTEST) $(PYTEST_ARGS)

bench: $(VENV)/.installed
	$(BIN)/python -m benchmarks.train_speed

# The first thing to run on a GPU: every kind, probe, circuit method, a sweep and the benchmarks there, in minutes.
gpu-check: $(VENV)/.installed
	$(BIN)/python -m benchmarks.gpu_check --device $(DEVICE)

# The docs site into site/: opens offline from the folder (index.html), search included.
docs: $(VENV)/.installed
	$(BIN)/python -m mkdocs build --strict --site-dir site

clean:
	rm -rf .venv .venv-* runs site
