# oncestream developer entry points. `make demo` and `make test` work on a fresh clone.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

export SPARK_LOCAL_IP := 127.0.0.1
export PYSPARK_PYTHON := $(abspath $(BIN)/python)
export PYSPARK_DRIVER_PYTHON := $(abspath $(BIN)/python)

# The JVMs the tests start (each worker's Spark session, every driver a test kills, every
# Connect server) compile with C1 only and collect with the serial GC. A test's JVM lives
# for seconds: C2's compiler threads and G1's workers cost it more CPU than they save
# (a local driver's start and two small queries took 18 CPU s against 28-32 with the
# defaults, on this 2-core machine kind). Spark reads SPARK_SUBMIT_OPTS when it starts a
# driver or a Connect server; what the tests check does not depend on the JIT.
# They also map Spark's classes from a class-data-sharing archive of the venv whose Spark
# they run (scripts/spark_cds.py builds VENV/spark-cds.jsa: a driver's start costs about a
# third less CPU). An archive that does not fit the JVM is ignored in silence (speed only).
TEST_JVM_OPTS ?= -XX:TieredStopAtLevel=1 -XX:+UseSerialGC
cds_opts = -XX:SharedArchiveFile=$(abspath $(1)/spark-cds.jsa) -Xlog:cds=off,cds+dynamic=off
test_submit_opts = $(strip $(filter-out $(TEST_JVM_OPTS) -XX:SharedArchiveFile=% -Xlog:cds%,\
	$(SPARK_SUBMIT_OPTS)) $(TEST_JVM_OPTS) $(call cds_opts,$(1)))
test soak: export SPARK_SUBMIT_OPTS := $(call test_submit_opts,$(VENV))
test-%: export SPARK_SUBMIT_OPTS := $(call test_submit_opts,$(VENV))

.PHONY: test-apps venvs cds setup setup-oldest setup-pysparks test-pysparks setup-client setup-oldest-nats dist test-main test-chaos test-fallback test-nats test-nats-fallback test-client demo test test-services lint format bench bench-ref bench-peers bench-scale bench-pipeline soak torture pagecache check-java clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) scripts/venv.py $(VENV) --extras all
	@touch $(STAMP)

check-java:
	@scripts/check-java

# The sdist and the wheel, into dist/, checked (scripts/dist.py: metadata, contents);
# tests/dist/test_wheel_install.py builds them the same way and installs the wheel.
dist: setup
	$(BIN)/python scripts/dist.py

# make demo OUTPUT=delta (or iceberg, parquet): where the pipeline lands (demo --output).
demo: setup check-java
	$(BIN)/oncestream demo $(if $(OUTPUT),--output $(OUTPUT))

lint: setup
	$(BIN)/ruff check src tests bench examples torture harness scripts
	$(BIN)/ruff format --check src tests bench examples torture harness scripts
	$(BIN)/mypy

format: setup
	$(BIN)/ruff format src tests bench examples torture harness scripts
	$(BIN)/ruff check --fix src tests bench examples torture harness scripts

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

# Every PySpark release the package admits (pyproject: pyspark>=4.0,<4.4), one per minor:
# the newest is the main venv's; each other one gets a venv of its own,
# .venv-pyspark<version>, where that pyspark is installed first and then oncestream, which
# must keep it (checked). The Spark guarantee tests (SPARK_RELEASE_TESTS) run on the
# oldest (spark/_compat.py holds what differs between releases), less the sink's
# fast-ingest and atomic variants (SPARK_RELEASE_SKIP: the Publisher's paths, the same on
# every PySpark) and the Connect variants of the kill tests (each kill starts a Connect
# server of its own; Connect on these releases is covered by test_delta_connect.py and
# the restarts). The kills after the window and on a reused path, the commit-record
# restarts and the delta-rs unit cases exercise our own code the same way on every
# PySpark: they run on the newest only.
# The releases between the oldest and the newest run, in make test, the part of those
# that meets what differs between releases (MIDDLE_TESTS, MIDDLE_SELECT): the version
# flags and read limits (test_compat), a driver killed mid-stream (the source), a driver
# killed before Spark's commit (the sink), a first batch's checkpoint leftover (4.1 added
# the check that refuses it), and foreachBatch's crash after the commit on
# SQLite (which query a batch belongs to is read from Spark), on classic Spark; Connect
# on 4.2 runs through the thin client's server (test-client). `make test-pysparks` runs
# them the oldest's full set.
OLDEST_PYSPARK := 4.0.0
PYSPARK_RELEASES := $(OLDEST_PYSPARK) 4.1.4 4.2.0
SPARK_RELEASE_SKIP := not fast and not atomic and not (kill and connect)
MIDDLE_SKIP := and not postgres
# The oldest runs beside the main suite: of foreachBatch it keeps the crash and restart
# on SQLite, classic and Connect (what a batch's query is, read from Spark, is the part
# that differs between releases); the other foreachBatch cases run on the newest and
# through the thin client.
OLDEST_SKIP := and not (foreach_batch and (postgres or not crash_after_commit))
MIDDLE_TESTS := tests/spark/test_compat.py tests/spark/test_source_kill.py \
	tests/spark/test_sink_kill.py tests/spark/test_foreach_batch.py \
	tests/spark/test_checkpoint_leftovers.py
MIDDLE_SELECT := not connect and not fast and not atomic and not postgres \
	and not (foreach_batch and not crash_after_commit)
SPARK_RELEASE_TESTS := tests/spark/test_compat.py tests/spark/test_source_kill.py \
	tests/spark/test_sink_kill.py tests/spark/test_foreach_batch.py \
	tests/spark/test_delta_spark.py tests/spark/test_delta_connect.py \
	tests/spark/test_iceberg_kill.py
pyspark_venv = .venv-pyspark$(1)
PYSPARK_STAMPS := $(foreach v,$(PYSPARK_RELEASES),$(call pyspark_venv,$(v))/.installed-stamp)
.PRECIOUS: .venv-pyspark%/.installed-stamp

setup-oldest: $(call pyspark_venv,$(OLDEST_PYSPARK))/.installed-stamp
setup-pysparks: $(PYSPARK_STAMPS)

.venv-pyspark%/.installed-stamp: pyproject.toml
	$(PYTHON) scripts/venv.py .venv-pyspark$* --first "pyspark==$*" --extras all
	@touch $@

# A thin Spark Connect client: pyspark-client (the Connect client alone, no JVM, no classic
# pyspark; its newest release is CLIENT_PYSPARK) in .venv-connect-client<version>, with
# oncestream[spark-client]; it must not have pyspark (checked). Its tests (CLIENT_TESTS:
# the jetstream source, the sink and `transactional` through Connect) run against a Connect
# server of the same release, started from that release's venv above
# (ONCESTREAM_CONNECT_SERVER_PYTHON: tests/spark/_connect_server.py).
CLIENT_PYSPARK := 4.2.0
CLIENT_VENV  := .venv-connect-client$(CLIENT_PYSPARK)
CLIENT_STAMP := $(CLIENT_VENV)/.installed-stamp
CLIENT_TESTS := tests/thin_client tests/spark/test_connect.py tests/spark/test_foreach_batch.py
# (test_local_session_in_a_connect_process_is_refused is classic pyspark's case; on the thin
# client local_session() gives the thin client's message: tests/thin_client. PostgreSQL:
# as on the middle releases, MIDDLE_SKIP.)
CLIENT_SELECT := (connect or thin_client or bad_arguments) and not local_session_in_a_connect \
	$(MIDDLE_SKIP)

setup-client: $(CLIENT_STAMP)

$(CLIENT_STAMP): pyproject.toml
	$(PYTHON) scripts/venv.py $(CLIENT_VENV) --first "pyspark-client==$(CLIENT_PYSPARK)" \
		--extras spark-client,postgres,dev --absent pyspark
	@touch $@

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
	$(PYTHON) scripts/venv.py $(NATS_VENV) --first "nats-py==$(OLDEST_NATS)" --extras dev
	@touch $(NATS_STAMP)

# Every venv make test uses, three built at a time when missing (pip waits on the index as
# much as on the CPU); each is a copy of an earlier build when one matches (scripts/venv.py).
VENV_STAMPS := $(STAMP) $(PYSPARK_STAMPS) $(CLIENT_STAMP) $(NATS_STAMP)
venvs:
	@$(MAKE) --no-print-directory -j 3 --output-sync=target $(VENV_STAMPS)

# The test JVMs' class-data-sharing archives (TEST_JVM_OPTS above), one per venv with a
# Spark, rebuilt with its venv; they need Java (test-services installs it).
CDS_ARCHIVES := $(VENV)/spark-cds.jsa $(foreach v,$(PYSPARK_RELEASES),$(call pyspark_venv,$(v))/spark-cds.jsa)
.PRECIOUS: %/spark-cds.jsa
%/spark-cds.jsa: %/.installed-stamp
	$(PYTHON) scripts/spark_cds.py $*
cds: venvs
	@$(MAKE) --no-print-directory -j 2 --output-sync=target $(CDS_ARCHIVES)

# The stages of make test. The main suite runs on two workers, one test file each at a
# time (module fixtures stay whole; each worker has its own SparkSession). The other
# stages (the adapter's fallback, the oldest nats-py, the oldest PySpark, the thin Connect
# client, the releases between) run one after another in a second lane beside it
# (scripts/stages.py): most tests wait on servers, JVMs and timeouts, not on the CPU. TEST_LANES=1 runs every stage
# in one lane; a stage runs alone as `make <stage>`. A stage still running after
# STAGE_TIMEOUT seconds is stopped and fails (a hang must not eat CI's budget).
TEST_LANES ?= 2
STAGE_TIMEOUT ?= 3600
MIDDLE_RELEASES := $(filter-out $(OLDEST_PYSPARK),$(PYSPARK_RELEASES))
OTHER_STAGES := test-fallback test-nats test-nats-fallback test-pyspark$(OLDEST_PYSPARK) test-client \
	$(MIDDLE_RELEASES:%=test-middle%) test-chaos test-apps
MIDDLE_STAGES := $(MIDDLE_RELEASES:%=test-pyspark%)
test: test-services venvs cds lint
	@# Bytecode for this checkout's sources, once: with PYTHONDONTWRITEBYTECODE set (as on
	@# CI) every test process, CLI run and Spark worker would compile them again (~0.3 s).
	$(BIN)/python -m compileall -q -j 2 src tests torture harness >/dev/null
ifeq ($(TEST_LANES),1)
	$(PYTHON) scripts/stages.py --timeout $(STAGE_TIMEOUT) --lane "test-main $(OTHER_STAGES)"
else
	$(PYTHON) scripts/stages.py --timeout $(STAGE_TIMEOUT) --lane "test-main" --lane "$(OTHER_STAGES)"
endif

test-pysparks: test-services setup-pysparks
	$(PYTHON) scripts/stages.py --timeout $(STAGE_TIMEOUT) --lane "$(MIDDLE_STAGES)"

test-main: setup
	$(BIN)/pytest -n 2 --dist loadfile -m "not soak and not connect_stage" \
		--ignore=tests/chaos $(APP_TESTS:%=--ignore=%)

# The whole programs (the demo, a packed environment submitted to a standalone cluster),
# each in processes of its own with no session to share: in the second lane, which
# otherwise ends minutes before the main one.
APP_TESTS := tests/spark/test_demo.py tests/spark/test_deploy.py
test-apps: setup
	$(BIN)/pytest -n 2 --dist loadfile -q -p no:cacheprovider $(APP_TESTS)

# The chaos tests (kills, freezes, faults; real servers, no Spark session) as a stage of
# their own: in the second lane, after the other stages, the lanes end about together.
test-chaos: setup pagecache
	$(BIN)/pytest -n 2 --dist loadfile -q -p no:cacheprovider tests/chaos

test-fallback: setup
	ONCESTREAM_NATS_FASTPATH=0 $(BIN)/pytest -n 2 --dist loadfile -q -p no:cacheprovider $(FALLBACK_TESTS)

test-nats: $(NATS_STAMP)
	$(NATS_BIN)/pytest -n 2 --dist loadfile -q -p no:cacheprovider $(NATS_TESTS)

test-nats-fallback: $(NATS_STAMP)
	ONCESTREAM_NATS_FASTPATH=0 $(NATS_BIN)/pytest -n 2 --dist loadfile -q -p no:cacheprovider $(NATS_TESTS)

# The part of them make test runs on a release between the oldest and the newest.
# pyspark_pytest(version, -k selection, tests): pytest in that release's venv, its python
# the workers' too.
pyspark_pytest = SPARK_SUBMIT_OPTS="$(call test_submit_opts,.venv-pyspark$(1))" \
	PYSPARK_PYTHON=$(abspath .venv-pyspark$(1)/bin/python) \
	PYSPARK_DRIVER_PYTHON=$(abspath .venv-pyspark$(1)/bin/python) \
	.venv-pyspark$(1)/bin/pytest -n 2 --dist loadfile -q -p no:cacheprovider -k "$(2)" $(3)

test-middle%: .venv-pyspark%/.installed-stamp
	$(call pyspark_pytest,$*,$(MIDDLE_SELECT),$(MIDDLE_TESTS))

# The Spark guarantee tests on one of PYSPARK_RELEASES, in its venv (make test-pyspark4.1.4).
test-pyspark%: .venv-pyspark%/.installed-stamp
	$(call pyspark_pytest,$*,$(SPARK_RELEASE_SKIP) $(if $(filter $*,$(OLDEST_PYSPARK)),$(OLDEST_SKIP),$(MIDDLE_SKIP)),$(SPARK_RELEASE_TESTS))

test-client: $(CLIENT_STAMP) $(call pyspark_venv,$(CLIENT_PYSPARK))/.installed-stamp
	SPARK_SUBMIT_OPTS="$(call test_submit_opts,$(call pyspark_venv,$(CLIENT_PYSPARK)))" \
	ONCESTREAM_CONNECT_SERVER_PYTHON=$(abspath $(call pyspark_venv,$(CLIENT_PYSPARK))/bin/python) \
		$(CLIENT_VENV)/bin/pytest -n 2 --dist loadfile -q -p no:cacheprovider -k "$(CLIENT_SELECT)" $(CLIENT_TESTS)

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

# The campaign's lost-page-cache file system (torture/pagecache: our own FUSE loopback in
# Go, on github.com/hanwen/go-fuse from the Go module proxy): the os-crash and power-loss
# faults mount each node's store on it. Built into the git-ignored torture/.pagecache,
# again only when its sources change (go's build cache makes a rebuild quick).
PAGECACHE_SRC := $(wildcard torture/pagecache/*.go) torture/pagecache/go.mod torture/pagecache/go.sum
PAGECACHE_BIN := torture/.pagecache/pagecache
pagecache: $(PAGECACHE_BIN)

$(PAGECACHE_BIN): $(PAGECACHE_SRC)
	@command -v go >/dev/null 2>&1 || { echo "error: building torture/pagecache needs Go 1.26 or newer (go.dev/dl), and 'go' is not on PATH" >&2; exit 1; }
	cd torture/pagecache && go build -trimpath -o $(abspath $(PAGECACHE_BIN)) .

# Randomized fault campaign (issues 11, 20, 52): needs root (network namespaces, tmpfs).
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
# OPTIONS="window=short dead_letters=replay" pins drawn options (--option, each NAME=VALUE).
TRIALS ?= 100
SEED   ?= 7
FAULTS ?=
SPARK_EVERY ?= 10
SABOTAGE ?=
OPTIONS ?=
torture: setup setup-oldest pagecache
	$(BIN)/python -m torture --trials $(TRIALS) --seed $(SEED) --spark-every $(SPARK_EVERY) \
		$(if $(FAULTS),--fault-kinds $(FAULTS)) $(if $(SABOTAGE),--sabotage $(SABOTAGE)) \
		$(foreach o,$(OPTIONS),--option $(o))

clean:
	rm -rf $(VENV) $(foreach v,$(PYSPARK_RELEASES),$(call pyspark_venv,$(v))) $(CLIENT_VENV) $(NATS_VENV) .peers build dist .mypy_cache .pytest_cache .ruff_cache src/*.egg-info torture/.pagecache
