# The two commands of the README: `make demo` (run the embedded default) and `make test`.
# Both set up everything from a fresh clone: Java and Maven if missing (Debian), uv, the locked venv.
SHELL := /bin/bash
PYTHON ?= python3.11
UV_VERSION := 0.13.9
VENV := .venv
BIN := $(VENV)/bin
export UV_PYTHON_DOWNLOADS := never

.PHONY: setup demo test lint bench stop clean

setup: $(BIN)/mirrorflow

$(BIN)/mirrorflow: pyproject.toml uv.lock
	@command -v java >/dev/null && command -v mvn >/dev/null || { \
	  echo "installing Java 17 and Maven (Kafka brokers and jars come from Maven Central)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jre-headless maven; }
	@$(PYTHON) -m uv --version 2>/dev/null | grep -q "$(UV_VERSION)" || $(PYTHON) -m pip install -q "uv==$(UV_VERSION)"
	$(PYTHON) -m uv sync --frozen --python $(PYTHON)
	@touch $@

demo: setup
	$(BIN)/mirrorflow local up
	$(BIN)/mirrorflow validate
	$(BIN)/mirrorflow local status
	@echo "Mirroring primary->backup until Ctrl-C (status: .venv/bin/mirrorflow status; brokers: make stop)"
	$(BIN)/mirrorflow stream --flow "primary->backup" --metrics-port 9464

lint: setup
	$(BIN)/ruff check plugins tests dags spark_jobs
	$(BIN)/mypy

test: setup lint
	$(BIN)/pytest

# MirrorMaker 2 vs mirrorflow vs Kafka's perf tools, one run (about 15 minutes; not part of `make test`).
bench: setup
	$(BIN)/python tests/benchmark_mirror.py

stop:
	-[ -x $(BIN)/mirrorflow ] && $(BIN)/mirrorflow local down

clean: stop
	rm -rf .mirrorflow $(VENV)
