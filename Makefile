# pathlock: `make run` starts a local redis-server with the module; `make test` runs every test.
# Both install what is missing (libclang, redis-server, redis-py) with apt-get on Debian/Ubuntu.

CARGO ?= cargo
PORT ?= 6379
MODULE := $(CURDIR)/target/release/libpathlock.so
export PATHLOCK_MODULE := $(MODULE)

.PHONY: all build run test test-cluster lint bench clean

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
	$(MAKE) test-node

# The Node.js client (clients/node) against servers its tests start: a single one, a master with
# a replica, and a 3-master cluster.
.PHONY: test-node
test-node: build
	cd clients/node && npm ci && npm run build && npm test

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
