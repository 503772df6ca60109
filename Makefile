# oncestream developer entry points. `make demo` and `make test` work on a fresh clone.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

export SPARK_LOCAL_IP := 127.0.0.1
export PYSPARK_PYTHON := $(abspath $(BIN)/python)
export PYSPARK_DRIVER_PYTHON := $(abspath $(BIN)/python)

.PHONY: setup setup-oldest setup-oldest-nats demo test test-services lint format bench bench-ref bench-peers bench-scale bench-pipeline soak torture check-java clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "error: Python >= 3.11 is required, found " + sys.version.split()[0])'
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[all]"
	@touch $(STAMP)

check-java:
	@scripts/check-java

demo: setup check-java
	$(BIN)/oncestream demo

lint: setup
	$(BIN)/ruff check src tests bench examples torture harness
	$(BIN)/ruff format --check src tests bench examples torture harness
	$(BIN)/mypy

format: setup
	$(BIN)/ruff format src tests bench examples torture harness
	$(BIN)/ruff check --fix src tests bench examples torture harness

# The Debian packages the suite uses (PostgreSQL, Prometheus, curl, iproute2, a Java 17+
# runtime): installed when missing as root; any other user is told the one command to run.
test-services:
	@scripts/install-test-services

# The publish, process and Spark-read tests again through nats-py's public API:
# the adapter's fallback path (src/oncestream/_nats) must stay correct.
FALLBACK_TESTS := tests/integration/test_nats_adapter.py tests/integration/test_publisher.py \
	tests/integration/test_publisher_fast_ingest.py tests/integration/test_atomic_publisher.py \
	tests/integration/test_processor.py tests/integration/test_processor_batch_handler.py \
	tests/integration/test_pull.py \
	tests/spark/test_partition_reader.py tests/spark/test_source_batch.py

# The oldest supported PySpark (pyproject: pyspark>=4.0,<4.4) in a second venv: installed
# first, then oncestream into it, which must keep it (checked). The Spark guarantee tests
# run there too (spark/_compat.py holds what differs between releases), less the sink's
# fast-ingest and atomic variants (OLDEST_SKIP: the Publisher's paths, the same on every
# PySpark) and the Connect variants of the kill tests (each kill starts a Connect server of
# its own; Connect on this PySpark is covered by test_delta_connect.py and the restarts).
# The kills after the window and on a reused path, the commit-record restarts and the
# delta-rs unit cases exercise our own code the same way on every PySpark: they run on
# the newest only, so that make test stays under 30 minutes on 2 cores.
OLDEST_PYSPARK := 4.0.0
OLD_VENV  := .venv-pyspark$(OLDEST_PYSPARK)
OLD_BIN   := $(OLD_VENV)/bin
OLD_STAMP := $(OLD_VENV)/.installed-stamp
OLDEST_SKIP := not fast and not atomic and not (kill and connect)
OLDEST_TESTS := tests/spark/test_compat.py tests/spark/test_source_kill.py \
	tests/spark/test_sink_kill.py tests/spark/test_foreach_batch.py \
	tests/spark/test_delta_spark.py tests/spark/test_delta_connect.py

setup-oldest: $(OLD_STAMP)

$(OLD_STAMP): pyproject.toml
	@test -x $(OLD_BIN)/python || $(PYTHON) -m venv $(OLD_VENV)
	$(OLD_BIN)/python -m pip install --quiet --upgrade pip
	$(OLD_BIN)/python -m pip install --quiet "pyspark==$(OLDEST_PYSPARK)"
	$(OLD_BIN)/python -m pip install --quiet -e ".[all]"
	@$(OLD_BIN)/python -c 'import sys, pyspark; v = pyspark.__version__; sys.exit(0 if v == "$(OLDEST_PYSPARK)" else f"error: installing oncestream replaced pyspark $(OLDEST_PYSPARK) with {v}")'
	@touch $(OLD_STAMP)

# The oldest nats-py the range admits (pyproject: nats-py>=2.10,<2.17) in a third venv
# (no Spark extras): the adapter's tests (src/oncestream/_nats) and the Publisher and pull
# tests that drive it, on its fast path (the probe must pass: test_nats_adapter checks the
# path taken) and on the public-API fallback.
OLDEST_NATS := 2.10.0
NATS_VENV  := .venv-nats$(OLDEST_NATS)
NATS_BIN   := $(NATS_VENV)/bin
NATS_STAMP := $(NATS_VENV)/.installed-stamp
NATS_TESTS := tests/integration/test_nats_adapter.py tests/unit/test_publisher_wire.py \
	tests/unit/test_source_wire.py tests/unit/test_headers.py \
	tests/integration/test_publisher.py tests/integration/test_pull.py

setup-oldest-nats: $(NATS_STAMP)

$(NATS_STAMP): pyproject.toml
	@test -x $(NATS_BIN)/python || $(PYTHON) -m venv $(NATS_VENV)
	$(NATS_BIN)/python -m pip install --quiet --upgrade pip
	$(NATS_BIN)/python -m pip install --quiet "nats-py==$(OLDEST_NATS)"
	$(NATS_BIN)/python -m pip install --quiet -e ".[dev]"
	@$(NATS_BIN)/python -c 'import sys, importlib.metadata as m; v = m.version("nats-py"); sys.exit(0 if v == "$(OLDEST_NATS)" else f"error: installing oncestream replaced nats-py $(OLDEST_NATS) with {v}")'
	@touch $(NATS_STAMP)

# Two workers, one test file each at a time (module fixtures stay whole; each worker
# has its own SparkSession): most tests wait on servers and JVMs, not on the CPU.
test: setup setup-oldest setup-oldest-nats test-services lint
	$(BIN)/pytest -n 2 --dist loadfile
	ONCESTREAM_NATS_FASTPATH=0 $(BIN)/pytest -n 2 --dist loadfile -q -p no:cacheprovider $(FALLBACK_TESTS)
	$(NATS_BIN)/pytest -n 2 --dist loadfile -q -p no:cacheprovider $(NATS_TESTS)
	ONCESTREAM_NATS_FASTPATH=0 $(NATS_BIN)/pytest -n 2 --dist loadfile -q -p no:cacheprovider $(NATS_TESTS)
	PYSPARK_PYTHON=$(abspath $(OLD_BIN)/python) PYSPARK_DRIVER_PYTHON=$(abspath $(OLD_BIN)/python) \
		$(OLD_BIN)/pytest -n 2 --dist loadfile -q -p no:cacheprovider -k "$(OLDEST_SKIP)" $(OLDEST_TESTS)

soak: setup check-java
	$(BIN)/pytest -m soak -p no:cacheprovider

# The micro table (each path beside naive nats-py, ratios), then every path beside its
# nats.go counterpart (bench-ref) at SCALE_NS, default 1e5,1e6, with CPU per message;
# bench-scale adds 10^7 and the plot.
bench: setup check-java bench-ref
	$(BIN)/python bench/run.py
	SCALE_NS=$${SCALE_NS:-1e5,1e6} $(BIN)/python bench/scale.py

# nats.go reference program (bench/go), built offline from Debian's packages, which are
# installed when missing (root: apt-get; otherwise sudo). Never committed: bench/go/natsref.
GO_ENV := GO111MODULE=off GOPATH=/usr/share/gocode GOFLAGS= GOCACHE=$(abspath bench/go/.cache) GOPROXY=off
bench-ref: bench/go/natsref

bench/go/natsref: bench/go/main.go
	@if ! command -v go >/dev/null 2>&1 || ! test -d /usr/share/gocode/src/github.com/nats-io/nats.go; then \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	    golang-go golang-github-nats-io-go-nats-dev >/dev/null; fi
	cd bench/go && $(GO_ENV) go build -o natsref .

# oncestream beside its peers (issue 26): Kafka (KRaft, from Maven Central; needs Debian's
# maven once) with Spark's kafka source and sink, `nats bench` and the current nats.go
# jetstream package + orbit.go (Go module proxy), nats.go 1.22 (bench-ref). Installs what
# is missing into .peers/ (ignored; ~2-3 min the first time, printed), then: the table and
# docs/img/peers.png (PEERS_N=1e6), the fault table, and re-records Kafka's answers to the
# Kafka-habit queries in tests/spark/kafka_habits.json (compared by make test).
bench-peers: setup check-java bench-ref
	$(BIN)/python bench/peers/run.py
	$(BIN)/python bench/peers/faults.py
	$(BIN)/python bench/peers/habits.py

# Every path at SCALE_NS (default 1e5,1e6,1e7) with RSS and store size, each beside its
# nats.go counterpart (bench-ref, built first), each side on a fresh server.
# SCALE_NS=1e4 for a quick check; SCALE_CASES to pick paths. Then group_scale.py: 1, 2, 4
# group members over 8 partitions, each held to a cgroup CPU share (root), and uncapped.
bench-scale: setup check-java bench-ref
	$(BIN)/python bench/scale.py --plot docs/img/scale.png
	$(BIN)/python bench/group_scale.py

# publish -> Spark -> jetstream sink -> Processor(SQLite), full speed then at a rate.
bench-pipeline: setup check-java
	$(BIN)/python bench/bench_pipeline.py

# Randomized fault campaign (issues 11, 20): needs root (network namespaces, tmpfs).
# Writes torture/results/<timestamp>/ and torture/results/latest.json. Exit 0 only
# when every input record of every producer is stored once and applied once in each
# database (and once in each Spark output: SPARK_EVERY=N runs the Spark job in one
# trial of N, 0 never; without Java the run stops unless SPARK_EVERY=0), no worker
# failed and both stream readers agree with the server; 1 names the violations;
# 2 bad usage or a harness crash (the verdict is unknown).
# FAULTS=partition-pair,cluster-kill restricts the campaign to those fault kinds
# (python -m torture --help lists the options; --fault-kinds for FAULTS).
# SABOTAGE=drop-acked|apply-twice|skip-position|drop-row is the negative control:
# the system is broken on purpose and the run must exit 1 naming the violation,
# e.g. make torture TRIALS=1 SABOTAGE=skip-position (drop-row: SPARK_EVERY=1).
TRIALS ?= 100
SEED   ?= 7
FAULTS ?=
SPARK_EVERY ?= 10
SABOTAGE ?=
torture: setup
	$(BIN)/python -m torture --trials $(TRIALS) --seed $(SEED) --spark-every $(SPARK_EVERY) \
		$(if $(FAULTS),--fault-kinds $(FAULTS)) $(if $(SABOTAGE),--sabotage $(SABOTAGE))

clean:
	rm -rf $(VENV) $(OLD_VENV) $(NATS_VENV) .peers build .mypy_cache .pytest_cache .ruff_cache src/*.egg-info
