# The two commands of the README: `make sweep` (the main job) and `make test`.
# Everything installs into .venv; nothing else on the machine is touched.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# torch first, pinned: where a local CPU build of 2.13.0 is on pip's find-links (as on
# CPU-only machines of this project) pip takes it and no CUDA wheel is downloaded; on a
# GPU host the same line installs the normal CUDA build. On another CPU-only machine,
# `make TORCH_PIP_ARGS="--index-url https://download.pytorch.org/whl/cpu" ...` avoids CUDA.
TORCH_PIP_ARGS ?=

.PHONY: install sweep trial test bench clean

$(BIN)/sweeper: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet torch==2.13.0 $(TORCH_PIP_ARGS)
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

install: $(BIN)/sweeper

sweep: install
	$(BIN)/sweeper launch search_spaces/switch_time.yaml

trial: install
	$(BIN)/sweeper trial hybrid_dat

test: install
	$(BIN)/python -m pytest

bench: install
	$(BIN)/python bench/trainer_overhead.py

clean:
	rm -rf $(VENV) *.egg-info
