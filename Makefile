# Two entry points do all their own set-up on a fresh Debian machine as root:
#   make demo   — the whole stack on localhost with a simulated fleet (ARGS="..." passed through)
#   make test   — the whole test suite
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# Every Python process the demo and the tests start (a hundred and more in `make test`) imports
# pandas, numpy and our packages. Without cached bytecode each one compiles all of that from source
# again, ~3 CPU-seconds apiece: pip installs with --no-compile (below), and some machines and CI
# images set PYTHONDONTWRITEBYTECODE. So bytecode is written, once per module, by whichever process
# imports it first, into one tree inside the venv (the sources stay free of __pycache__ folders).
export PYTHONDONTWRITEBYTECODE :=
export PYTHONPYCACHEPREFIX := $(abspath $(VENV))/pycache
# binary -> Debian package; the demo and the tests run their own servers on free ports.
SYSTEM_BINARIES := promtool:prometheus prometheus:prometheus prometheus-alertmanager:prometheus-alertmanager \
	redis-server:redis-server victoria-metrics:victoria-metrics chromium:chromium
SERVICES := prometheus prometheus-alertmanager prometheus-node-exporter redis-server victoria-metrics postgresql
# The store tests' PostgreSQL server (they start their own, on a socket): Debian keeps its binaries
# outside PATH, one folder per major version.
POSTGRES_BINDIRS := /usr/lib/postgresql/*/bin

.PHONY: demo test test-vllm fuzz-long bench lint doctor setup system-deps venv vllm-env clean

setup: system-deps venv

system-deps:
	@missing=""; for pair in $(SYSTEM_BINARIES); do \
		bin=$${pair%%:*}; pkg=$${pair##*:}; \
		command -v $$bin >/dev/null 2>&1 || missing="$$missing $$pkg"; \
	done; \
	if ! $(PYTHON) -c 'import venv, ensurepip' >/dev/null 2>&1; then missing="$$missing python3-venv python3-pip"; fi; \
	ls $(POSTGRES_BINDIRS)/initdb >/dev/null 2>&1 || missing="$$missing postgresql"; \
	if [ -n "$$missing" ]; then \
		pkgs=$$(echo $$missing | tr ' ' '\n' | sort -u | tr '\n' ' '); \
		echo "installing Debian packages:$$pkgs"; \
		if [ "$$(id -u)" != 0 ]; then echo "need root to apt-get install $$pkgs (see 'make doctor')" >&2; exit 1; fi; \
		export DEBIAN_FRONTEND=noninteractive; \
		apt-get update -qq && apt-get install -y -qq --no-install-recommends $$pkgs >/dev/null; \
		for s in $(SERVICES); do service $$s stop >/dev/null 2>&1 || true; done; \
	fi

venv: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@# The venv's bundled pip (23+ on Debian 12) installs an editable pyproject package; upgrading it
	@# first only cost every fresh clone a download and a few seconds. --no-compile: pip would
	@# byte-compile every installed module (half its CPU time here, ~30 s); the first process that
	@# imports a module compiles it instead, into PYTHONPYCACHEPREFIX (above).
	$(BIN)/python -m pip install -q --disable-pip-version-check --no-compile -e '.[dev]'
	@touch $(STAMP)

# vLLM's CPU build in its own environment (its pins are not Oximeter's), with the tiny model the real-engine
# tests and `make demo ENGINE=vllm` serve (docs/real-vllm.md): built once per user and lock file under ~/.cache/oximeter
# (stack/vllm/env.py; about 1 GB to download the first time, nothing after), reused by every clone.
vllm-env: venv
	@$(BIN)/python -m stack.vllm.env >/dev/null

# ENGINE=vllm: real vLLM engines (the CPU build) instead of the simulator's.
ENGINE ?= sim
demo: setup $(if $(filter vllm,$(ENGINE)),vllm-env)
	$(BIN)/oximeter demo --engine $(ENGINE) $(ARGS)

# Workers: the live-stack tests mostly wait out real (scaled) persistence while the others compute;
# tests/conftest.py schedules: the live-stack tests share one worker, the drill replays another.
TEST_WORKERS ?= 3

# Collecting once first fills the bytecode cache (PYTHONPYCACHEPREFIX) for the workers, which would
# otherwise all compile the same modules at once on a fresh clone: ~12 CPU-seconds less in all.
# The real vLLM engine's tests (tests/real_vllm) run in it, on one worker, against one engine: its
# environment is built first (once per user, reused by every clone), and the summary lists them.
test: setup vllm-env
	@$(BIN)/python -m pytest -q --collect-only -p no:cacheprovider $(ARGS) >/dev/null || true
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --durations=15 $(ARGS)

# The real vLLM engine's tests alone.
test-vllm: setup vllm-env
	$(BIN)/python -m pytest -q --durations=10 tests/real_vllm $(ARGS)

# The fuzz tests with a long budget (nightly): thousands of cases per input instead of a hundred.
fuzz-long: setup
	OXIMETER_FUZZ_EXAMPLES=5000 $(BIN)/python -m pytest -q tests/test_fuzz_inputs.py $(ARGS)

bench: setup
	@for b in bench/*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

lint: venv
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/lint-imports

doctor:
	@echo "python:  $$($(PYTHON) --version 2>&1)"
	@for pair in $(SYSTEM_BINARIES); do bin=$${pair%%:*}; \
		if command -v $$bin >/dev/null 2>&1; then \
			printf '%-24s %s\n' "$$bin:" "$$($$bin --version 2>&1 | head -n1)"; \
		else printf '%-24s %s\n' "$$bin:" "MISSING (make setup installs it)"; fi; done
	@pg=$$(ls $(POSTGRES_BINDIRS)/postgres 2>/dev/null | tail -n1); \
		printf '%-24s %s\n' "postgres:" "$$( [ -n "$$pg" ] && $$pg --version || echo 'MISSING (make setup installs it)')"
	@if [ -x $(BIN)/python ]; then $(BIN)/python -m pip list 2>/dev/null | grep -iE '^(aiohttp|prometheus.client|nvidia-ml-py|pandas|pydantic|grafanalib|scikit-learn|loguru|requests) ' ; \
		else echo "$(VENV): not created (make setup)"; fi

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .oximeter
