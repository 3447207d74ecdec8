# Two entry points for a fresh machine: `make demo` and `make test` (`make docs` builds the site).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# every folder of Python code, linted and formatted by `make lint` and checked by `make test`
PYTHON_DIRS := src tests benchmarks reproductions examples lab
# ../shared/data when it exists; otherwise vbnn's own default (~/.cache/vbnn/data)
export VBNN_DATA_DIR ?= $(if $(wildcard ../shared/data),$(abspath ../shared/data),)
# pytest's worker processes (pytest-xdist), one torch thread each: the CI machine's 2 cores.
# `--dist loadgroup` keeps the Ray tests in one worker (one local Ray cluster at a time).
TEST_WORKERS ?= 2

# the extra `laplace` without its declared torchvision (which has no CPU build here and which
# the last-layer Laplace never imports): laplace-torch and the packages it imports, pinned
LAPLACE := laplace-torch==0.3 curvlinops-for-pytorch==3.0.1 backpack-for-pytorch==1.7.1 \
	asdfghjkl==0.1a4 einconv==0.1.0 einops==0.8.2 unfoldNd==0.2.3 linear_operator==0.6.1 \
	torchmetrics==1.9.0 lightning-utilities==0.15.3

.PHONY: install demo test docs lint clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# torch first, pinned: any other version of it would pull CUDA packages; then the library and
# the papers' reproductions beside it (lab/, the vbnn-lab package, which adds `vbnn reproduce`)
$(VENV)/.installed: $(BIN)/python pyproject.toml lab/pyproject.toml
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e '.[dev,jax,ray,ivon,hf]'
	$(BIN)/pip install --quiet --no-deps $(LAPLACE)
	$(BIN)/pip install --quiet -e ./lab
	touch $@

install: $(VENV)/.installed

# the quick reproduction of the overpruning paper (about 5 minutes on 2 cores)
demo: install
	$(BIN)/vbnn reproduce overpruning --quick --out results/overpruning-quick

test: install
	$(BIN)/ruff check $(PYTHON_DIRS)
	$(BIN)/ruff format --check $(PYTHON_DIRS)
	$(BIN)/mkdocs build --strict --quiet
	$(BIN)/pytest -q -n $(TEST_WORKERS) --dist loadgroup

# the documentation site (docs/, mkdocs.yml) into site/; --strict: any warning is an error
docs: install
	$(BIN)/mkdocs build --strict

lint: install
	$(BIN)/ruff check --fix $(PYTHON_DIRS)
	$(BIN)/ruff format $(PYTHON_DIRS)

clean:
	rm -rf $(VENV) build dist site src/*.egg-info lab/build lab/src/*.egg-info
