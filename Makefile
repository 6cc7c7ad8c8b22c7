# pathlock: `make run` starts a local redis-server with the module; `make test` runs every test.
# Both install what is missing (libclang, redis-server, redis-py) with apt-get on Debian/Ubuntu.

CARGO ?= cargo
PORT ?= 6379
MODULE := $(CURDIR)/target/release/libpathlock.so
export PATHLOCK_MODULE := $(MODULE)

.PHONY: all build run test test-cluster lint bench bench-latency clean

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

# The longest pause while one project grows to 10,000,000 locks and empties again, beside SET NX
# (not in CI: about 15 minutes and 2 GB). LATENCY_FIFO=1 runs the server ahead of other processes.
bench-latency: build
	@scripts/deps.sh bench
	python3 bench/latency.py

lint:
	@scripts/deps.sh build
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --release --workspace --all-targets -- -D warnings

clean:
	$(CARGO) clean
