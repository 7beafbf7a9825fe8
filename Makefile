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

.PHONY: install test-deps lint sweep trial test test-long faults bench reproduce docker-smoke docker-cluster test-docker k8s-render k8s-spaces k8s-apply clean

$(BIN)/sweeper: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet torch==2.13.0 $(TORCH_PIP_ARGS)
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

install: $(BIN)/sweeper

# Ctrl-C pauses the sweep, which says so itself and resumes with the same command: on a terminal
# the sweep runs in its own process group (set -m), so make is not interrupted with it and a pause
# (exit 130) ends `make sweep` without make's error line.
sweep: install
	@if [ -t 0 ]; then set -m; fi; $(BIN)/sweeper launch search_spaces/switch_time.yaml; code=$$?; \
	  [ $$code -eq 130 ] || exit $$code

trial: install
	$(BIN)/sweeper trial hybrid_dat

# The UI tests drive Debian's chromium and one test runs MLflow on Debian's postgresql; as root we
# install them, otherwise those tests are skipped with the reason.
test-deps:
	@if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing chromium and chromium-driver (apt-get) for the MLflow UI test"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null; \
	  else echo "note: chromium/chromium-driver missing and not root: the browser test will be skipped"; fi; \
	fi
	@if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing postgresql (apt-get) for the MLflow-on-PostgreSQL test"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null; \
	  else echo "note: postgresql missing and not root: the MLflow-on-PostgreSQL test will be skipped"; fi; \
	fi

# The k8s tests need kubectl (kustomize inside) and the KubeRay CRDs ($$KUBERAY_CRDS, default
# ../shared/kuberay-crds); without them they are skipped with the reason.
	@command -v kubectl >/dev/null || echo "note: kubectl missing: the k8s/ manifest tests will be skipped"

# Two pytest workers (pytest-xdist, a file per worker at a time, the longest files first: tests/conftest.py's
# RUN_FIRST, in collection order, not xdist's by number of tests), then the tests marked `serial` alone:
# those start or look for Ray clusters machine-wide. TEST_WORKERS=0 runs the first part in one process.
# On 2 cores three workers measured no faster (the integration tests then slow each other down).
TEST_WORKERS ?= 2
# pyproject's addopts -m, restated: a second -m replaces it
DEFAULT_MARKS := not faults and not docker and not long
test: install test-deps lint
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder -m "$(DEFAULT_MARKS) and not serial"
	$(BIN)/python -m pytest -m "$(DEFAULT_MARKS) and serial"

# The longer variants `make test` leaves out (pytest marker `long`): every shipped space end to end,
# the kill-and-resume sweep on SQLite as well as PostgreSQL, an MLflow outage under the tracker, a
# killed driver's Ray ended by the next launch on a second, smaller sweep.
test-long: install test-deps
	$(BIN)/python -m pytest -m long

# The linter (rules in pyproject.toml, [tool.ruff]); part of `make test`.
lint: install
	$(BIN)/ruff check .

# The whole fault-injection matrix (tests/faults/, docs/reliability.md): every cue of sweeper/faults.py with
# SIGKILL, SIGINT and SIGTERM, an MLflow outage, a lost worker node, a read-only storage path, two drivers
# at once. `make test` runs one case of it (pyproject's addopts deselect the `faults` marker).
faults: install
	$(BIN)/python -m pytest tests/faults tests/test_single_driver.py -m "" -v

# Every benchmark (about 40 minutes on 2 cores; docs/benchmarks.md). BASELINE: the commit the
# trainer's speed and the CLI's start-up are compared with (before the speed work). gpu_share and gpu_sweep need
# CUDA; ssm_fused needs CUDA and mamba-ssm's kernel (MAMBA_SRC: an unpacked mamba-ssm sdist to build it from).
BASELINE ?= cbcfb6f
bench: install
	$(BIN)/python bench/trainer_speed.py --baseline $(BASELINE) --rounds 2 --memory
	$(BIN)/python bench/trainer_overhead.py
	$(BIN)/python bench/eval_subsets.py
	$(BIN)/python bench/sweep_overhead.py
	$(BIN)/python bench/sweep_scale.py --sizes 10 500
	$(BIN)/python bench/cli_startup.py --baseline $(BASELINE)
	$(BIN)/python bench/ssm_speed.py
	$(BIN)/python bench/othello_speed.py
	@if $(BIN)/python -c "import torch, sys; sys.exit(not torch.cuda.is_available())"; then \
	  $(BIN)/python bench/gpu_share.py && $(BIN)/python bench/gpu_sweep.py; \
	else echo "bench/gpu_share.py, gpu_sweep.py: not measured: no GPU"; fi
	@if [ -n "$(MAMBA_SRC)" ] || { $(BIN)/python -c "import torch, sys; sys.exit(not torch.cuda.is_available())" && \
	  $(BIN)/python -c "import mamba_ssm.ops.selective_scan_interface"; } 2>/dev/null; then \
	  $(BIN)/python bench/ssm_fused.py $(if $(MAMBA_SRC),--build-from $(MAMBA_SRC)); \
	else echo "bench/ssm_fused.py: not measured: no GPU with mamba-ssm (set MAMBA_SRC to an unpacked mamba-ssm sdist to build its kernel)"; fi

reproduce: install
	$(BIN)/sweeper reproduce --seeds 3

# Build the image for real (a local stand-in base where Docker Hub is out of reach) and run
# `sweeper validate` and a short `sweeper trial` in it. Slow (minutes); not part of `make test`.
docker-smoke:
	bash docker/smoke.sh

# The image as a real Ray cluster: a head and a worker container, an MLflow server container, and
# `sweeper submit search_spaces/smoke.yaml --follow` from this machine; trials on both nodes; all
# torn down after. Minutes; not part of `make test` (docs/deploy.md).
docker-cluster: install
	bash docker/cluster.sh

# The tests marked `docker` (left out of `make test`): tests/test_docker_cluster.py runs docker/cluster.sh.
test-docker: install
	$(BIN)/python -m pytest -m docker tests/test_docker_cluster.py

# The manifests of one overlay (k8s/overlays/$(OVERLAY)): what `kubectl apply -k` applies.
OVERLAY ?= gpu
k8s-render: k8s-spaces
	@kubectl kustomize k8s/overlays/$(OVERLAY)

k8s-apply: k8s-spaces
	kubectl apply -k k8s/overlays/$(OVERLAY)

# The ConfigMap of search spaces (k8s/base/search-spaces.yaml) from search_spaces/*.yaml.
k8s-spaces:
	@$(PYTHON) k8s/spaces.py >&2

clean:
	rm -rf $(VENV) *.egg-info
