# pathlock: `make run` starts a local redis-server with the module; `make test` runs every test.
# Both install what is missing (libclang, redis-server, redis-py) with apt-get on Debian/Ubuntu.

CARGO ?= cargo
PORT ?= 6379
MODULE := $(CURDIR)/target/release/libpathlock.so
export PATHLOCK_MODULE := $(MODULE)

.PHONY: all build run test test-cluster lint bench bench-waits clean

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
	scripts/with-redis.sh python3 examples/cloud_drive.py

# Only the Cluster, failover and mutual-exclusion stress tests (they also run in `make test`).
test-cluster: build
	@scripts/deps.sh test
	$(CARGO) test --release --test cluster --test stress -- --nocapture

# Side by side with the old Lua script and SET NX PX, then the engine alone; see bench/README.md.
bench: build
	@scripts/deps.sh bench
	python3 bench/bench.py
	$(CARGO) bench -p pathlock-core --bench engine

# Blocking waits with 1,000 to 10,000 waiting clients, beside BLPOP and XREAD BLOCK; see
# bench/README.md. Not part of `make bench`: it opens 10,000 connections.
bench-waits: build
	@scripts/deps.sh test
	python3 bench/waits.py

lint:
	@scripts/deps.sh build
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --release --workspace --all-targets -- -D warnings

clean:
	$(CARGO) clean
