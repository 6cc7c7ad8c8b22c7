#!/usr/bin/env bash
# Runs a command against a throw-away redis-server with the module loaded: a free loopback port,
# its own directory, stopped when the command ends. The command sees REDIS_PORT. REDIS_SERVER
# and REDIS_CLI name other binaries than redis-server and redis-cli (e.g. a valkey-server).
#
#   scripts/with-redis.sh python3 examples/cloud_drive.py
set -euo pipefail
module=${PATHLOCK_MODULE:-$(pwd)/target/release/libpathlock.so}
dir=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"${REDIS_SERVER:-redis-server}" --port "$port" --bind 127.0.0.1 --dir "$dir" --save "" --appendonly no \
    --loadmodule "$module" --logfile "$dir/redis.log" --daemonize yes --pidfile "$dir/redis.pid"
cleanup() {
    "${REDIS_CLI:-redis-cli}" -p "$port" shutdown nosave >/dev/null 2>&1 || true
    rm -rf "$dir"
}
trap cleanup EXIT
for _ in $(seq 100); do
    "${REDIS_CLI:-redis-cli}" -p "$port" ping >/dev/null 2>&1 && break
    sleep 0.05
done
REDIS_PORT=$port "$@"
