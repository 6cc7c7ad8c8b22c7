#!/usr/bin/env bash
# Redis's own test suite with pathlock loaded: `make test-redis-suite` (scripts/deps.sh suite
# prepares the trees). Runs the units below from each source tree in .deps/ (Redis 7.0: the tests
# of Debian 12's source package against the installed redis-server; Redis 8.0: the tree it was
# built from), with the module loaded through the suite's own `--config loadmodule <path>`, which
# goes into the configuration of every server the tests start.
#
#   scripts/redis-suite.sh <module.so>     with the module (fails if any test fails)
#   scripts/redis-suite.sh --without-module  the same suite on the same servers, for comparison
#
# Prints passed/failed/ignored/skipped and the time per server; the whole output of each run is
# in .deps/redis-<x.y>/suite.log.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
module=${1:?usage: $0 <module.so> | --without-module}

UNITS=(unit/dump unit/info unit/keyspace unit/expire unit/other unit/multi unit/pubsub
    unit/type/list unit/latency-monitor unit/lazyfree unit/maxmemory unit/acl unit/scan
    unit/introspection-2 integration/rdb)

# Tests that fail without the module too, each with why; they are skipped by name.
# - Debian's backport of the fix for CVE-2026-25243 (its patch 0012 on 8.0, CVE-2026-25243.patch
#   on 7.0) adds this test, whose payload has a zero CRC: the server refuses it at the checksum
#   ("payload version or checksum are wrong") before reading the size the test is about.
SKIP=("RESTORE fail with invalid payload size")

args=()
for unit in "${UNITS[@]}"; do args+=(--single "$unit"); done
for test in "${SKIP[@]}"; do args+=(--skiptest "$test"); done
if [ "$module" = "--without-module" ]; then
    what="without the module"
else
    [ -f "$module" ] || { echo "pathlock: no module at $module" >&2; exit 1; }
    args+=(--config loadmodule "$(cd "$(dirname "$module")" && pwd)/$(basename "$module")")
    what="with $module"
fi

failed=""
for series in 7.0 8.0; do
    tree="$root/.deps/redis-$series/source"
    log="$root/.deps/redis-$series/suite.log"
    # The suite looks for free ports from its base port up; a base drawn at random keeps two
    # runs on one machine (other worktrees) apart. Ports up to base+8000, and +10000 for the
    # cluster bus, stay under 65536. A test client that hears nothing for 5 minutes (a server
    # killed from outside) fails the run instead of waiting the suite's default 20.
    base=$((20000 + RANDOM % 27000))
    echo "pathlock: Redis's test suite on $("$tree/src/redis-server" --version | cut -d' ' -f1-3) $what"
    started=$(date +%s)
    status=0
    (cd "$tree" && ./runtest "${args[@]}" --baseport "$base" --timeout 300) >"$log" 2>&1 || status=$?
    seconds=$(($(date +%s) - started))
    # Colours off, then count the outcome lines (with --verbose they may follow other output),
    # but not the summary that repeats each failure after "*** ".
    plain=$(sed 's/\x1b\[[0-9;]*m//g' "$log")
    count() { grep -v '^\*\*\* ' <<<"$plain" | grep -c "\[$1\]:" || true; }
    echo "pathlock:   $(count ok) passed, $(count err) failed, $(count exception) exceptions," \
        "$(count ignore) ignored, $(count skip) skipped, in ${seconds} s"
    if [ "$status" -ne 0 ]; then
        grep -E "^\*\*\* \[(err|exception)\]:" -A 1 <<<"$plain" | head -n 40 >&2 || true
        echo "pathlock:   failed; the whole output is $log" >&2
        failed="$failed $series"
    fi
done
[ -z "$failed" ] || { echo "pathlock: Redis's test suite failed on:$failed" >&2; exit 1; }
