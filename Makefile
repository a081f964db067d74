# The two commands of the README: `make run` and `make test`. Everything the project needs is
# installed from here (virtualenv from PyPI, system tools from Debian), never by hand.
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip --disable-pip-version-check -q
CONFIG ?= config/server.properties

.PHONY: run secure cluster test test-quick bench bench-targets bench-cluster chaos chaos-cluster soak failover fuzz tools postgresql clean

$(PY):
	python3 -m venv $(VENV)

# setup.py compiles these with mypyc; an editable install keeps the .so beside the .py, and Python
# prefers the .so, so a change to them must rebuild.
COMPILED = src/offsetd/records/scan.py src/offsetd/coordinator/offsets_table.py

$(VENV)/.run-deps: pyproject.toml setup.py $(COMPILED) | $(PY)
	$(PIP) install -e .
	touch $@

$(VENV)/.test-deps: pyproject.toml setup.py $(COMPILED) | $(PY)
	$(PIP) install -e '.[test,bench,spark]'
	touch $@ $(VENV)/.run-deps

run: $(VENV)/.run-deps
	$(VENV)/bin/offsetd serve $(CONFIG)

# The secure example (config/secure.properties): SASL_SSL with SCRAM-SHA-512 and a PLAIN admin on
# 127.0.0.1:9093, PLAINTEXT for local tools on 127.0.0.1:9092, ACLs on; a test CA and certificates
# are made in secure-certs/ the first time.
secure: $(VENV)/.run-deps
	test -f secure-certs/ca.pem || $(PY) -m offsetd.dev.certs secure-certs
	$(VENV)/bin/offsetd serve config/secure.properties

# Cluster mode on one machine: a PostgreSQL in a temporary directory and three brokers on
# 127.0.0.1:9092-9094 (CLUSTER_ARGS: --brokers N, --dir DIR, --base-port P, --override k=v;
# --standby: a primary and a synchronous standby, the brokers on both, to try a failover).
cluster: $(VENV)/.run-deps postgresql
	$(PY) -m offsetd.dev.cluster --config $(CONFIG) $(CLUSTER_ARGS)

# System tools the suite drives, from Debian's packages, installed when missing (as root or via
# sudo): kcat, a Java 17+ runtime for Spark, Chromium (the Spark report, the lag console's browser
# tests), Prometheus (promtool and a server that scrapes a broker for the shipped dashboard's
# queries) and PostgreSQL (cluster mode's engine; the tests start their own throwaway servers).
APT_INSTALL = SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq

tools: postgresql
	@command -v kcat >/dev/null 2>&1 || { echo "installing kcat (Debian package)"; \
	  $(APT_INSTALL) kcat >/dev/null; }
	@java -version 2>&1 | grep -Eq 'version "(1[7-9]|[2-9][0-9])' || { \
	  echo "installing a Java runtime for Spark (Debian package default-jre-headless)"; \
	  $(APT_INSTALL) default-jre-headless >/dev/null; }
	@command -v chromium >/dev/null 2>&1 || { echo "installing chromium (Debian package)"; \
	  $(APT_INSTALL) chromium >/dev/null; }
	@command -v promtool >/dev/null 2>&1 || { echo "installing prometheus and promtool (Debian package)"; \
	  $(APT_INSTALL) prometheus >/dev/null; }

postgresql:
	@{ ls /usr/lib/postgresql/*/bin/initdb || command -v initdb; } >/dev/null 2>&1 || { \
	  echo "installing PostgreSQL (Debian package postgresql)"; $(APT_INSTALL) postgresql >/dev/null; }

# The whole suite on TEST_WORKERS pytest-xdist workers: most tests wait on brokers, clients and
# timeouts rather than the CPU, so more workers than cores pay. Each worker has its own session
# fixtures (PostgreSQL, a SparkSession); a test file stays on one worker and the slowest files start
# first (tests/conftest.py).
TEST_WORKERS ?= 4
test: $(VENV)/.test-deps tools
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

# The inner loop: the sans-IO cores, codecs and other unit tests (no broker processes, no Spark).
test-quick: $(VENV)/.test-deps
	$(PY) -m pytest -q -n 2 tests/unit

bench: $(VENV)/.test-deps
	$(PY) bench/run.py

# Issue 24's targets in one run, side by side with Tansu and the cluster beside the single node,
# judged in one table (bench/targets.py; about 7 min; BENCH_ARGS: --repeat N).
bench-targets: $(VENV)/.test-deps postgresql
	$(PY) bench/targets.py $(BENCH_ARGS)

# offsetd single-node vs 3 brokers + PostgreSQL vs Tansu (docs/performance.md "Cluster mode"; about 13 min).
bench-cluster: $(VENV)/.test-deps postgresql
	$(PY) bench/cluster.py $(BENCH_ARGS)

# The chaos harness at full length (make test runs a bounded form): faults against a real broker,
# every client operation logged, a history checker after each round.
chaos: $(VENV)/.test-deps
	$(PY) -m tests.chaos.run $(CHAOS_ARGS)

# The soak at full length (make test runs 45 s of each mode): 1,000 connections, 200 groups joining
# and leaving, produce and consume against one broker, then three on PostgreSQL, SOAK_MINUTES each;
# samples, plots and the verdict in test-artifacts/soak/.
SOAK_MINUTES ?= 30
soak: $(VENV)/.test-deps postgresql
	$(PY) -m tests.soak.run --minutes $(SOAK_MINUTES) $(SOAK_ARGS)

# The cluster chaos harness at full length (make test runs two 30 s seeds): three brokers and
# PostgreSQL under a seeded schedule of faults (kill -9, SIGSTOP, SIGTERM, a broker cut from
# PostgreSQL or from its clients, PostgreSQL restarts) while producers, consumer groups and
# transactions run, the history checked at the end (CHAOS_ARGS: --seeds 1,2 --duration 300 --faults ...).
chaos-cluster: $(VENV)/.test-deps postgresql
	$(PY) -m tests.chaos.cluster_run $(CHAOS_ARGS)

# Cluster failover at the issue's length (make test runs two seeds): kill -9 of a coordinator during
# commits, the history checked after each of twenty seeds.
failover: $(VENV)/.test-deps tools
	OFFSETD_FAILOVER_SEEDS=20 $(PY) -m pytest -q tests/integration/test_cluster.py -k kill9

# Coverage-guided fuzzing of the decoders (make test runs the bounded Hypothesis properties).
fuzz: $(VENV)/.test-deps
	$(PIP) install -e '.[fuzz]'
	$(PY) -m tests.fuzz.run

clean:
	rm -rf $(VENV) data
