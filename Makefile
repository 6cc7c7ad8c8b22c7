# pathlock: `make run` starts a local redis-server with the module; `make test` runs every test.
# Both install what is missing (libclang, redis-server, python3-venv) with apt-get on Debian/Ubuntu.

CARGO ?= cargo
PORT ?= 6379
MODULE := $(CURDIR)/target/release/libpathlock.so
export PATHLOCK_MODULE := $(MODULE)

.PHONY: all build run test test-python test-cluster test-redis-suite lint bench bench-latency bench-waits bench-owners bench-projects bench-instructions bench-java fuzz miri clean dist test-dist

# The servers of the compatibility table (docs/operations.md). `make test` runs the integration tests on each,
# `make test REDIS_SERVER=/path/to/server` on that one alone. `make run SERVER=valkey` starts
# Valkey 9.1 instead of redis-server (also SERVER=valkey-8.1, SERVER=redis-8.0, SERVER=redis-8.2,
# or SERVER=/path/to/server). Redis 8.0 is built from Debian's source package (scripts/deps.sh
# redis8); Redis 8.2 comes from a PyPI wheel, as the Valkey servers do (scripts/deps.sh redis8.2).
server.redis := redis-server
server.redis-8.0 := $(CURDIR)/.deps/redis-8.0/redis-server
server.redis-8.2 := $(CURDIR)/.deps/redis-8.2/redis-server
server.valkey-8.1 := $(CURDIR)/.deps/valkey-8.1/valkey-server
server.valkey-9.1 := $(CURDIR)/.deps/valkey-9.1/valkey-server
server.valkey := $(server.valkey-9.1)
SERVER ?= redis
# The test binaries' profile (Cargo.toml: release optimisation without link-time optimisation).
TEST_PROFILE := --profile release-tests
TEST_SERVERS := $(or $(REDIS_SERVER),$(server.redis) $(server.redis-8.0) $(server.redis-8.2) $(server.valkey-8.1) $(server.valkey-9.1))

all: build

build:
	@scripts/deps.sh build
	$(CARGO) build --release

# Foreground server with the module and every pathlock config at its default.
run: build
	@scripts/deps.sh run $(if $(filter valkey%,$(SERVER)),valkey) $(if $(filter redis-8.0,$(SERVER)),redis8) $(if $(filter redis-8.2,$(SERVER)),redis8.2)
	$(or $(server.$(SERVER)),$(SERVER)) redis.conf.example --port $(PORT)

# `exporter` installs Debian's redis_exporter and builds the current one, for tests/exporter.rs.
# Every cargo call selects the whole workspace: Cargo gives a shared dependency the features the
# selected packages ask of it, so a call for the module alone after one for the others built
# `redis`, the engine and their dependencies a second time. On the first server every test of the
# workspace runs (the engine's, the Rust client's, the module's unit and integration tests); on
# the others, the module's integration program alone. The integration tests spend most of their
# time waiting (leases lapsing, replicas syncing, clusters forming, blocked clients timing out),
# so TEST_THREADS of them run at once: on two cores, 4 took Redis 7.0's from 118 s to 70 s and
# Valkey 9.1's from 206 s to 127 s. With 8 (45 s and 70 s), Redis 8's defragmentation of the
# baseline's hashes, which shares the processors with the other tests, no longer ended within the
# defragmentation test's minute.
TEST_THREADS ?= 4
test: build
	@scripts/deps.sh test exporter $(if $(REDIS_SERVER),,valkey redis8 redis8.2)
	@failed=""; only=""; for server in $(TEST_SERVERS); do \
	    echo "pathlock: $${only:+integration }tests on $$($$server --version)"; \
	    REDIS_SERVER=$$server $(CARGO) test $(TEST_PROFILE) --workspace $$only --no-fail-fast -- --test-threads=$(TEST_THREADS) || failed="$$failed $$server"; \
	    only="--test integration"; \
	done; [ -z "$$failed" ] || { echo "pathlock: tests failed on:$$failed" >&2; exit 1; }
	$(MAKE) --no-print-directory test-python
	$(MAKE) --no-print-directory test-node
	$(MAKE) --no-print-directory test-java
	$(MAKE) --no-print-directory test-go
	$(MAKE) --no-print-directory test-dist

# The Python client's tests (real servers, a replica, a cluster) and the example that uses it, in a
# virtualenv of the project's own so that the system Python is left alone. pytest exits non-zero
# (5) when it collects no test, which fails the target like a failing test.
VENV := $(CURDIR)/.venv-py
test-python: build
	@scripts/deps.sh test
	test -x $(VENV)/bin/python || python3 -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check ./clients/python pytest mypy==2.4.1
	# The package ships py.typed: its annotations are checked as its users' type checkers read them.
	$(VENV)/bin/python -m mypy --strict --no-incremental clients/python/src/pathlock
	cd clients/python && $(VENV)/bin/python -m pytest -q -p no:cacheprovider tests
	scripts/with-redis.sh $(VENV)/bin/python examples/cloud_drive.py

# The Node.js client (clients/node) against servers its tests start: a single one, a master with
# a replica, and a 3-master cluster.
.PHONY: test-node
test-node: build
	cd clients/node && npm ci && npm run build && npm test

# The Java client (clients/java, a multi-module Maven build resolving from Maven Central) against
# servers its tests start: a single one, a master with a replica, and a 3-master cluster; then the
# Spring Boot starter's tests (a single server, a cluster) and the example application
# (examples/spring-drive) on the client of the same build. `verify` also builds the jars a release
# publishes (sources, and javadoc with no doclint warning).
.PHONY: test-java
test-java: build
	@scripts/deps.sh test java
	cd clients/java && mvn -B -ntp verify

# The Go client (clients/go): go vet, then its tests with the race detector against servers they
# start (a single one, a master with a replica and a sentinel, a 3-master cluster), and its
# examples; on the go-redis its go.mod requires (the oldest it supports), then again on the one the
# benchmark's module pins (the current release), through a copy of go.mod in a temporary folder.
# The Go toolchain fetches go-redis into its module cache; nothing else is installed.
GO_REDIS_LATEST = $(shell sed -n 's|.*github.com/redis/go-redis/v9 \(v[0-9.]*\)$$|\1|p' clients/go/bench/go.mod)
.PHONY: test-go
test-go: build
	@scripts/deps.sh test
	cd clients/go && go vet ./... && go test -race -count=1 ./...
	@latest=$$(mktemp -d) && trap 'rm -rf "$$latest"' EXIT && cd clients/go && \
	    cp go.mod "$$latest/go.mod" && cp go.sum "$$latest/go.sum" && \
	    go get -modfile="$$latest/go.mod" github.com/redis/go-redis/v9@$(GO_REDIS_LATEST) && \
	    echo "pathlock: the Go client's tests on go-redis $(GO_REDIS_LATEST)" && \
	    go test -modfile="$$latest/go.mod" -race -count=1 ./...

# Lock plus release of one path through the Go client beside redsync and bsm/redislock, at 0 and
# 100,000 locks held, 5,000 of each taken in turns (clients/go/bench, a module of its own so that
# the client needs go-redis only); prints the medians; see docs/performance.md.
.PHONY: bench-go
bench-go: build
	@scripts/deps.sh test
	cd clients/go/bench && go test -run '^$$' -bench . -benchtime 5000x .

# What users install without a Rust toolchain, in dist/: the module's Debian package, the Python
# client's wheel and sdist, the Node client's npm tarball, the Rust client's .crate (see
# scripts/dist.sh), the Java client's jar and pom. `make test-dist` installs each into a clean place
# and uses it.
dist: build
	@scripts/deps.sh dist java
	scripts/dist.sh

test-dist: dist
	@scripts/deps.sh test dist valkey
	scripts/test-dist.sh

# Only the Cluster (MIGRATE and atomic slot migration), failover, mutual-exclusion stress and
# network-partition tests (they also run in `make test`).
test-cluster: build
	@scripts/deps.sh test
	$(CARGO) test $(TEST_PROFILE) --test integration -- cluster:: atomic_migration:: stress:: partition:: --nocapture

# Redis's own test suite (the units in scripts/redis-suite.sh) with the module loaded, on Redis 7.0
# (Debian's redis-server, with the tests of its source package) and Redis 8.0 (built from Debian's
# source package), each from its own source tree in .deps/. Not in `make test`; see
# docs/operations.md (Redis's own test suite) for its time. SUITE_MODULE=no runs the same suite without the module.
test-redis-suite: build
	@scripts/deps.sh suite
	scripts/redis-suite.sh $(if $(filter no,$(SUITE_MODULE)),--without-module,$(MODULE))

# Lock plus release of one path through the Java client beside Redisson's RLock, Spring
# Integration's RedisLockRegistry and the users' Lua scripts through RedisTemplate, at 0 to 100,000
# locks held, and a folder move beside a Redisson MultiLock (bench/java, about 6 minutes; BENCH_SIZES,
# BENCH_ROUNDS, BENCH_SECONDS, BENCH_THREADS); see bench/README.md.
bench-java: build
	@scripts/deps.sh test java
	cd clients/java && mvn -B -ntp -q -Pbench package -DskipTests -pl ../../bench/java -am
	scripts/with-redis.sh sh -c 'exec java -cp "bench/java/target/classes:$$(cat bench/java/target/classpath.txt)" io.pathlock.bench.LockBench'

# Side by side with the old Lua script and SET NX PX, then the engine alone; see bench/README.md.
bench: build
	@scripts/deps.sh bench
	python3 bench/bench.py
	$(CARGO) bench -p pathlock-core --bench engine

# Every owner and every mountain, each beside a baseline in the same run: one token holding
# 1,000,000 locks (its commands beside another token's, its release and expiry), 1,000,000
# leases that just lapsed under the path asked for, and memory after 250,000 locks come and go;
# see bench/README.md. About 6 minutes; OWNERS_LOCKS and OWNERS_MEMORY_LOCKS scale it.
bench-owners: build
	@scripts/deps.sh bench
	python3 bench/owners.py

# Millions of projects holding a lock each, beside as many SET NX PX keys in the same run: filling
# them, releasing them all (beside DEL) and their locks lapsing together (beside PX TTLs); see
# bench/README.md. About 5 minutes at the default PROJECTS=1000000; REDIS_SERVER picks the server.
bench-projects: build
	@scripts/deps.sh bench
	cargo build --release --example block_floor
	test -x $(VENV)/bin/python || python3 -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check redis
	python3 bench/projects.py

# Instructions per command inside redis-server (callgrind: repeatable where time is not), for
# Whole-key operations of one project (WHOLE_KEY_LOCKS, default 1,000,000 locks) beside a hash of
# as many fields: DUMP, RESTORE, DEL, DEBUG RELOAD, fork, a replica's full sync, MIGRATE; see
# bench/README.md. 2 to 5 minutes a round (WHOLE_KEY_ROUNDS, default 3).
.PHONY: bench-whole-key
bench-whole-key: build
	@scripts/deps.sh bench
	python3 bench/whole_key.py

# ACQUIRE, RELEASE and RENEW beside SET NX PX, DEL and PEXPIRE; see bench/README.md.
bench-instructions: build
	@scripts/deps.sh bench
	python3 bench/instructions.py

# Blocking waits with 1,000 to 10,000 waiting clients, beside BLPOP and XREAD BLOCK; see
# bench/README.md. Not part of `make bench`: it opens 10,000 connections.
bench-waits: build
	@scripts/deps.sh test
	cargo build --release --example block_floor
	test -x $(VENV)/bin/python || python3 -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check redis
	$(VENV)/bin/python bench/waits.py

# The longest pause while one project grows to 10,000,000 locks and empties again, beside SET NX
# (not in CI: about 15 minutes and 2 GB). LATENCY_FIFO=1 runs the server ahead of other processes.
# It reads the slow log with redis-py, in a virtualenv that also sees the system's matplotlib.
BENCH_VENV := $(CURDIR)/.venv-bench
bench-latency: build
	@scripts/deps.sh bench
	test -x $(BENCH_VENV)/bin/python || python3 -m venv --system-site-packages $(BENCH_VENV)
	$(BENCH_VENV)/bin/pip install --quiet --disable-pip-version-check redis
	$(BENCH_VENV)/bin/python bench/latency.py

# Coverage-guided fuzzing of the byte-facing surfaces, FUZZ_SECONDS per target (not in CI; `make
# test` replays the corpus). Needs cargo-fuzz and a nightly toolchain; see fuzz/README.md.
FUZZ_SECONDS ?= 300
fuzz:
	@scripts/deps.sh build fuzz
	cd fuzz && for target in command rdb effect; do \
		cargo +nightly fuzz run $$target corpus/$$target regressions/$$target -- \
			-max_total_time=$(FUZZ_SECONDS) -rss_limit_mb=2048 -print_final_stats=1 || exit 1; \
	done

# Miri (Rust's interpreter that checks unsafe code against the language's rules: use after free,
# aliasing, leaks, uninitialized reads) over the core's tests that run its unsafe blocks: the heap
# form of `PackedToken` (lock.rs), the defragmentation movers (table/defrag.rs), whose small
# tree also runs the prefetch hint (table/rehash.rs), and the hash tables' segments, which keep
# their slots in an allocation of their own (table/segment.rs, a smaller run of its tests under
# Miri, about 2 minutes more). Under both aliasing models, Stacked Borrows and Tree Borrows.
# Permissive provenance, because a long token keeps its heap address as bytes, exposed on
# purpose. Not in CI: it needs a nightly component that CI does not install, and takes about 6
# minutes on the shared machine (fuzz/README.md, "Miri").
MIRI_TESTS ?= lock:: project::tests:: defrag::tests::a_small defrag::tests::a_compact defrag::tests::boxes table::segment::
miri:
	@scripts/deps.sh miri
	MIRIFLAGS="-Zmiri-permissive-provenance" cargo +nightly miri test -p pathlock-core --lib -- $(MIRI_TESTS)
	MIRIFLAGS="-Zmiri-permissive-provenance -Zmiri-tree-borrows" cargo +nightly miri test -p pathlock-core --lib -- $(MIRI_TESTS)

lint:
	@scripts/deps.sh build
	$(CARGO) fmt --all -- --check
	python3 scripts/import-cycles.py src core/src clients/rust/src clients/python/src/pathlock clients/node/src
	python3 scripts/check-links.py
	$(CARGO) clippy --release --workspace --all-targets -- -D warnings
	cd clients/go && ! gofmt -l . | grep . && go vet ./... && go run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...

clean:
	$(CARGO) clean
