# pathlock: `make run` starts a local redis-server with the module; `make test` runs every test.
# Both install what is missing (libclang, redis-server, python3-venv) with apt-get on Debian/Ubuntu.

CARGO ?= cargo
PORT ?= 6379
MODULE := $(CURDIR)/target/release/libpathlock.so
export PATHLOCK_MODULE := $(MODULE)

.PHONY: all build run test test-python test-cluster lint bench clean

all: build

build:
	@scripts/deps.sh build
	$(CARGO) build --release

# Foreground server with the module and every pathlock config at its default.
run: build
	@scripts/deps.sh run
	redis-server redis.conf.example --port $(PORT)

test: build
	@scripts/deps.sh test
	$(CARGO) test --release --workspace
	$(MAKE) --no-print-directory test-python

# The Python client's tests (real servers, a replica, a cluster) and the example that uses it, in a
# virtualenv of the project's own so that the system Python is left alone. pytest exits non-zero
# (5) when it collects no test, which fails the target like a failing test.
VENV := $(CURDIR)/.venv-py
test-python: build
	@scripts/deps.sh test
	test -x $(VENV)/bin/python || python3 -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check ./clients/python pytest
	cd clients/python && $(VENV)/bin/python -m pytest -q -p no:cacheprovider tests
	scripts/with-redis.sh $(VENV)/bin/python examples/cloud_drive.py

# Only the Cluster, failover and mutual-exclusion stress tests (they also run in `make test`).
test-cluster: build
	@scripts/deps.sh test
	$(CARGO) test --release --test cluster --test stress -- --nocapture

# Side by side with the old Lua script and SET NX PX, then the engine alone; see bench/README.md.
bench: build
	@scripts/deps.sh bench
	python3 bench/bench.py
	$(CARGO) bench -p pathlock-core --bench engine

lint:
	@scripts/deps.sh build
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --release --workspace --all-targets -- -D warnings

clean:
	$(CARGO) clean
