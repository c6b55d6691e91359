# The two commands of the README: `make demo` (the embedded default: clusters, Airflow, the example flow) and
# `make test`.
# Both set up everything from a fresh clone: Java and Maven if missing (Debian), uv, the locked venv; `make test`
# also Debian's Chromium for the browser test.
SHELL := /bin/bash
PYTHON ?= python3.11
UV_VERSION := 0.13.9
VENV := .venv
BIN := $(VENV)/bin
export UV_PYTHON_DOWNLOADS := never

.PHONY: setup demo test test-unit lint docs browser toxiproxy drill chaos bench bench-batch bench-state bench-fence bench-eos bench-slice bench-scale bench-takeover bench-mesh stop clean

# The class archive local Spark sessions start from (once per JDK and jar set; spark/class_archive.py).
setup: $(BIN)/mirrorflow
	@$(BIN)/python -m mirrorflow.spark.class_archive

$(BIN)/mirrorflow: pyproject.toml uv.lock
	@command -v java >/dev/null && command -v mvn >/dev/null || { \
	  echo "installing Java 17 and Maven (Kafka brokers and jars come from Maven Central)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jre-headless maven; }
	@$(PYTHON) -m uv --version 2>/dev/null | grep -q "$(UV_VERSION)" || $(PYTHON) -m pip install -q "uv==$(UV_VERSION)"
	$(PYTHON) -m uv sync --frozen --compile-bytecode --python $(PYTHON)
	@touch $@

demo: setup
	$(BIN)/mirrorflow local up
	$(BIN)/mirrorflow validate
	$(BIN)/mirrorflow stop --flow "backup->primary" --reason "standby: the failover runbook starts it"
	$(BIN)/mirrorflow start --flow "primary->backup" --reason "make demo"
	$(BIN)/mirrorflow airflow up
	@echo "waiting for the scheduler to launch the primary->backup stream (mirrorflow_stream__primary_to_backup)"
	$(BIN)/mirrorflow start --flow "primary->backup" --reason "make demo" --wait 300
	$(BIN)/mirrorflow traffic start
	$(BIN)/mirrorflow health
	@echo "Look at: the Airflow UI above: Flows in its navigation bar; then trigger mirrorflow_failover as it comes (a dry run)"
	@echo "         and read its 'mirrorflow report' tab (README: A first tour). Terminal: .venv/bin/mirrorflow status | health | topology"
	@echo "         Stop everything with: make stop"

# docs/configuration.md is made from the key table (plugins/mirrorflow/model/keys.py); tests/test_docs.py holds it.
docs: setup
	$(BIN)/python -c "from mirrorflow.model import key_docs; print(key_docs.markdown(), end='')" > docs/configuration.md

lint: setup
	$(BIN)/ruff check plugins tests dags spark_jobs
	$(BIN)/mypy

# The browser test drives Debian's Chromium with Playwright (never a browser download).
browser:
	@command -v chromium >/dev/null || { echo "installing Debian's Chromium for the browser test"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; }

# Toxiproxy (network faults between the mirror and its clusters) built from the Go module proxy with `go install`.
TOXIPROXY := .mirrorflow/bin/toxiproxy-server
TOXIPROXY_VERSION := v2.5.0
toxiproxy: $(TOXIPROXY)
$(TOXIPROXY):
	@command -v go >/dev/null || { echo "installing Go (Debian) to build Toxiproxy"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq golang-go; }
	GOBIN=$(abspath .mirrorflow/bin/go) go install github.com/Shopify/toxiproxy/v2/cmd/server@$(TOXIPROXY_VERSION)
	mv .mirrorflow/bin/go/server $@ && rmdir .mirrorflow/bin/go

# Two pytest sessions side by side (tests/support/lanes.py: the suite mostly waits on brokers and streams).
test: setup lint browser toxiproxy
	PYTHONPATH=tests $(BIN)/python -m support.lanes

# The pure tests only (no Kafka, Spark, Airflow or Java: the markers say which need them), about a minute.
test-unit: setup
	$(BIN)/pytest -m "not kafka and not spark and not airflow and not java"

# DR drill: planned and unplanned failover and failback on two three-broker clusters under steady traffic, through
# the runbook DAGs; prints one report (RPO, audit-measured loss, RTO, records the moved group lost and re-read).
# About 8 minutes; not part of `make test`.
drill: setup
	PYTHONPATH=tests $(BIN)/python -m support.dr_drill --seconds 30

# Chaos: in every delivery mode, 20 SIGKILLs of a copying Python worker, the planner, the whole stream and a target
# broker under steady traffic, then every record checked on the target; prints the table of docs/guarantees.md.
# About 40 minutes; not part of `make test` (tests/test_chaos.py runs one kill of each kind).
chaos: setup
	PYTHONPATH=tests $(BIN)/python -m support.chaos --kills 20

# MirrorMaker 2 vs mirrorflow in every mode (and with lz4, zstd; across a WAN through Toxiproxy) vs Kafka's perf
# tools, one run (about 50 minutes, 11 of them idle spells; not part of `make test`).
bench: setup toxiproxy
	$(BIN)/python tests/benchmarks/mirror.py --compression lz4,zstd

# Backfill and audit cost on this machine, one run (about 3 minutes; not part of `make test`).
bench-batch: setup
	$(BIN)/python tests/benchmarks/batch.py

# Offset-sync state and checkpoint rounds as history and groups grow, one run (about 75 minutes; not part of
# `make test`).
bench-state: setup
	$(BIN)/python tests/benchmarks/state.py

bench-fence: setup
	$(BIN)/python tests/benchmarks/fence.py

# The stream at 12 and 1,200 partitions in its three delivery modes (about 10 minutes; not part of `make test`).
bench-eos: setup
	$(BIN)/python tests/benchmarks/eos.py

# One lingering task's slice (a small transaction) on a bare broker, with and without the broker's check of each
# partition's first write in a transaction (about 2 minutes; not part of `make test`).
bench-slice: setup
	$(BIN)/python tests/benchmarks/slice.py

# One flow at 2,400, 12,000 and 24,000 partitions against 12, with 5,000 groups: copy, restart, idle cost, state and
# checkpoint rounds on the LAN and across a WAN link, and the ingest ceiling of Kafka's Java producer, compiled here
# (not part of `make test`).
bench-scale: setup toxiproxy
	@command -v javac >/dev/null || { echo "installing a Java 17 compiler (the bench's Java producer)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jdk-headless; }
	$(BIN)/python tests/benchmarks/scale.py

# A mesh of three clusters in active/active (6 flows): mirrorflow beside MirrorMaker 2 running the same flows in one
# process, memory and cores idle and at a trickle (about 10 minutes; not part of `make test`).
bench-mesh: setup
	$(BIN)/python tests/benchmarks/mesh.py

# A takeover from MirrorMaker 2 and a hand-back to it on 1,000,000 mirrored records under traffic (about 10
# minutes; not part of `make test`).
bench-takeover: setup
	$(BIN)/python tests/benchmarks/takeover.py

stop:
	-[ -x $(BIN)/mirrorflow ] && $(BIN)/mirrorflow traffic stop
	-[ -x $(BIN)/mirrorflow ] && $(BIN)/mirrorflow traffic stop --cluster backup
	-[ -x $(BIN)/mirrorflow ] && $(BIN)/mirrorflow stop --flow "primary->backup" --reason "make stop" --timeout 90
	-[ -x $(BIN)/mirrorflow ] && $(BIN)/mirrorflow airflow down
	-[ -x $(BIN)/mirrorflow ] && $(BIN)/mirrorflow local down

clean: stop
	rm -rf .mirrorflow $(VENV)
