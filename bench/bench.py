"""Side-by-side benchmark: pathlock against the old Lua script and against SET NX PX.

For each N locks already held in one project, on one redis-server with the module loaded, it
measures with redis-benchmark (same connections and pipelining for all systems):

  - PATHLOCK.ACQUIRE of new, non-conflicting paths, and PATHLOCK.RELEASE of held tokens;
    ACQUIRE and SET NX alternate for BENCH_ROUNDS pairs and the pair with the median ratio is
    reported, because the shared machine makes single runs swing by 20%; each pair starts
    from the N held alone (reloaded), at -P 1 and at -P 16;
  - at -P 16, RELEASE beside DEL: before each pair REQUESTS more locks and keys are taken
    beside the N held, and each side frees random ones of those;
  - the old getFileLock.lua (bench/seed) acquiring the same kind of paths;
  - SET lock:<path> <token> NX PX <ttl>;

and the used memory per held lock after loading the N locks. It writes bench/results.csv and
draws bench/chart.png. `make bench` runs it after a release build.
"""

import csv
import math
import datetime
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODULE = os.environ.get("PATHLOCK_MODULE", os.path.join(ROOT, "target/release/libpathlock.so"))
SEED = os.environ.get("PATHLOCK_SEED_DIR", os.path.join(ROOT, "bench", "seed"))
SIZES = [int(n) for n in os.environ.get("BENCH_SIZES", "0,1000,10000,100000,1000000").split(",")]
REQUESTS = int(os.environ.get("BENCH_REQUESTS", "100000"))
CLIENTS = int(os.environ.get("BENCH_CLIENTS", "50"))
PIPELINE = int(os.environ.get("BENCH_PIPELINE", "1"))
# The second, pipelined comparison: with -P 16 the server's own work per command decides, where
# at -P 1 the network round trip dominates both systems. 0 leaves it out.
DEEP_PIPELINE = int(os.environ.get("BENCH_DEEP_PIPELINE", "16"))
# The old script scans every held lock per call; its run is cut to about this many lock
# comparisons so that N = 1,000,000 still finishes in about a minute.
LUA_BUDGET = int(os.environ.get("BENCH_LUA_BUDGET", "20000000"))
TTL_MS = 600000
PROJECT = "bench:proj"
LUA_HASH = "cs:lockedHashKey42"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, extra=(), binary="redis-server"):
        self.dir = tempfile.mkdtemp(prefix="pathlock-bench-")
        self.port = free_port()
        self.proc = subprocess.Popen(
            [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", self.dir,
             "--save", "", "--appendonly", "no", "--loadmodule", MODULE,
             "--logfile", os.path.join(self.dir, "redis.log"), *extra],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(200):
            if self.cli("PING", check=False) == "PONG":
                return
            time.sleep(0.05)
        raise RuntimeError("redis-server did not start")

    def cli(self, *args, check=True):
        out = subprocess.run(["redis-cli", "-p", str(self.port), *map(str, args)],
                             capture_output=True, text=True, check=check)
        return out.stdout.strip()

    def pipe(self, commands):
        """Loads commands (lists of arguments) with redis-cli --pipe."""
        data = bytearray()
        for args in commands:
            data += b"*%d\r\n" % len(args)
            for a in args:
                a = a if isinstance(a, bytes) else str(a).encode()
                data += b"$%d\r\n%s\r\n" % (len(a), a)
        subprocess.run(["redis-cli", "-p", str(self.port), "--pipe"], input=bytes(data),
                       capture_output=True, check=True)

    def used_memory(self):
        self.cli("MEMORY", "PURGE", check=False)
        info = self.cli("INFO", "memory")
        return int(next(l.split(":")[1] for l in info.splitlines() if l.startswith("used_memory:")))

    def stop(self):
        self.cli("SHUTDOWN", "NOSAVE", check=False)
        self.proc.wait(timeout=30)
        shutil.rmtree(self.dir, ignore_errors=True)


def benchmark(server, requests, command, keyspace=100000000, pipeline=None):
    """Runs redis-benchmark; returns (ops/s, p50 ms, p99 ms). `__rand_int__` in the command
    becomes a 12-digit number below `keyspace`."""
    out = subprocess.run(
        ["redis-benchmark", "-p", str(server.port), "-n", str(requests), "-c", str(CLIENTS),
         "-P", str(pipeline or PIPELINE), "-r", str(keyspace), "--csv", *command],
        capture_output=True, text=True, check=True).stdout
    rows = list(csv.reader(out.strip().splitlines()))
    header, values = rows[0], rows[-1]
    row = dict(zip(header, values))
    return float(row["rps"]), float(row["p50_latency_ms"]), float(row["p99_latency_ms"])


def held_path(i):
    return f"/d{i % 1000}/f{i}"


def token(i):
    # redis-benchmark writes __rand_int__ as 12 zero-padded digits.
    return f"t{i:012d}"


def load_module(server, n):
    server.pipe(["PATHLOCK.ACQUIRE", PROJECT, "TOKEN", token(i), "TTL", TTL_MS, "WRITE", held_path(i)]
                for i in range(n))
    assert int(server.cli("INFO", "pathlock").split("pathlock_locks:")[1].split()[0]) == n


def load_lua(server, n, now_ms):
    server.pipe(["HSET", LUA_HASH, held_path(i), now_ms] for i in range(n))
    server.pipe(["SET", held_path(i), token(i), "EX", TTL_MS // 1000] for i in range(n))


def load_set(server, n):
    server.pipe(["SET", f"lock:{held_path(i)}", token(i), "NX", "PX", TTL_MS] for i in range(n))


ROUNDS = int(os.environ.get("BENCH_ROUNDS", "3"))


def measure(server, n, lua_sha):
    results = []

    def record(system, operation, requests, command, memory=None, keyspace=100000000, rounds=1):
        # With several rounds, report the run with the median throughput: on a shared machine
        # one run can be off by 20% in either direction.
        runs = sorted((benchmark(server, requests, command, keyspace) for _ in range(rounds)),
                      key=lambda run: run[0])
        rps, p50, p99 = runs[len(runs) // 2]
        results.append({"locks_held": n, "system": system, "operation": operation,
                        "requests": requests, "ops_per_sec": round(rps, 1), "p50_ms": p50,
                        "p99_ms": p99, "bytes_per_lock": memory})
        print(f"  {system:8} {operation:8} N={n:>8} {rps:>12.1f} ops/s  p50 {p50} ms  "
              f"p99 {p99} ms" + (f"  {memory} B/lock" if memory is not None else "")
              + (f"  (median of {rounds})" if rounds > 1 else ""), flush=True)

    # pathlock and SET NX are loaded side by side, so that their runs can alternate.
    base = server.used_memory()
    load_module(server, n)
    module_memory = round((server.used_memory() - base) / n, 1) if n else None
    base = server.used_memory()
    load_set(server, n)
    set_memory = round((server.used_memory() - base) / n, 1) if n else None
    acquire = ["PATHLOCK.ACQUIRE", PROJECT, "TTL", str(TTL_MS), "WRITE", "/new/__rand_int__"]
    set_nx = ["SET", "lock:/new/__rand_int__", "token", "NX", "PX", str(TTL_MS)]
    def fresh():
        # Each pair starts from the N held alone: otherwise every run would add its REQUESTS
        # new locks and keys, and the last pairs "at 0" would run at 500,000.
        server.cli("FLUSHALL")
        load_module(server, n)
        load_set(server, n)

    pairs = []
    for _ in range(ROUNDS):
        fresh()
        pairs.append((benchmark(server, REQUESTS, acquire), benchmark(server, REQUESTS, set_nx)))
    pairs.sort(key=lambda pair: pair[0][0] / pair[1][0])
    (module_run, set_run) = pairs[len(pairs) // 2]
    for system, run, memory in [("pathlock", module_run, module_memory), ("set-nx", set_run, set_memory)]:
        results.append({"locks_held": n, "system": system, "operation": "acquire",
                        "requests": REQUESTS, "ops_per_sec": round(run[0], 1), "p50_ms": run[1],
                        "p99_ms": run[2], "bytes_per_lock": memory})
        print(f"  {system:8} acquire  N={n:>8} {run[0]:>12.1f} ops/s  p50 {run[1]} ms  "
              f"p99 {run[2]} ms" + (f"  {memory} B/lock" if memory is not None else "")
              + f"  (run with the median ratio of {ROUNDS} alternating pairs)", flush=True)
    if DEEP_PIPELINE:
        # The same pairs at -P 16.
        deep = []
        for _ in range(ROUNDS):
            fresh()
            deep.append((benchmark(server, REQUESTS, acquire, pipeline=DEEP_PIPELINE),
                         benchmark(server, REQUESTS, set_nx, pipeline=DEEP_PIPELINE)))
        deep.sort(key=lambda pair: pair[0][0] / pair[1][0])
        for system, run in zip(["pathlock", "set-nx"], deep[len(deep) // 2]):
            results.append({"locks_held": n, "system": system,
                            "operation": f"acquire-p{DEEP_PIPELINE}", "requests": REQUESTS,
                            "ops_per_sec": round(run[0], 1), "p50_ms": run[1], "p99_ms": run[2],
                            "bytes_per_lock": None})
            print(f"  {system:8} acquire -P {DEEP_PIPELINE} N={n:>8} {run[0]:>12.1f} ops/s",
                  flush=True)
    # Random held tokens: most calls free a lock, the rest find it freed already.
    fresh()
    record("pathlock", "release", min(REQUESTS, max(n, 1000)),
           ["PATHLOCK.RELEASE", PROJECT, "t__rand_int__"], keyspace=max(n, 1))
    if DEEP_PIPELINE:
        # Releases one by one at -P 16, beside DEL. Before each pair, REQUESTS more locks are
        # taken (and as many SET NX keys set) beside the N held; each side then frees random
        # ones of those, so both hold between N and N + REQUESTS throughout (a RELEASE "at 0"
        # frees from a project that holds at most the 100,000 it releases).
        deep = []
        for k in range(ROUNDS):
            server.pipe(["PATHLOCK.ACQUIRE", PROJECT, "TOKEN", f"r{k}:{i:012d}", "TTL", TTL_MS,
                         "WRITE", f"/r{k}/{i % 1000}/f{i}"] for i in range(REQUESTS))
            server.pipe(["SET", f"rel{k}:{i:012d}", "tok", "PX", TTL_MS] for i in range(REQUESTS))
            deep.append((benchmark(server, REQUESTS,
                                   ["PATHLOCK.RELEASE", PROJECT, f"r{k}:__rand_int__"],
                                   keyspace=REQUESTS, pipeline=DEEP_PIPELINE),
                         benchmark(server, REQUESTS, ["DEL", f"rel{k}:__rand_int__"],
                                   keyspace=REQUESTS, pipeline=DEEP_PIPELINE)))
        deep.sort(key=lambda pair: pair[0][0] / pair[1][0])
        for system, run in zip(["pathlock", "set-nx"], deep[len(deep) // 2]):
            results.append({"locks_held": n, "system": system,
                            "operation": f"release-p{DEEP_PIPELINE}",
                            "requests": REQUESTS, "ops_per_sec": round(run[0], 1),
                            "p50_ms": run[1], "p99_ms": run[2], "bytes_per_lock": None})
            print(f"  {system:8} release -P {DEEP_PIPELINE} N={n:>8} {run[0]:>12.1f} ops/s",
                  flush=True)
    server.cli("FLUSHALL")

    # the old Lua script
    base = server.used_memory()
    now_ms = int(time.time() * 1000)
    load_lua(server, n, now_ms)
    per_lock = round((server.used_memory() - base) / n, 1) if n else None
    # Its own grants pile up in its hash too, so k calls cost about n*k + k*k/2 comparisons.
    lua_requests = max(CLIENTS, min(REQUESTS, int(math.sqrt(n * n + 2 * LUA_BUDGET) - n)))
    try:
        record("lua", "acquire", lua_requests,
               ["EVALSHA", lua_sha, "2", "/new/__rand_int__", LUA_HASH, "uuid",
                str(TTL_MS // 1000), str(now_ms)], per_lock)
    except subprocess.CalledProcessError as failed:
        # At 1,000,000 held one call scans for seconds; on a loaded machine redis-benchmark can
        # give up on it. The other systems' figures still stand.
        print(f"  lua      acquire  N={n:>8} failed: {failed}", flush=True)
    server.cli("FLUSHALL")
    return results


def chart(rows, path, title_note):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 5.5))
    for system, label in [("pathlock", "PATHLOCK.ACQUIRE"), ("set-nx", "SET NX PX (no folders)"),
                          ("lua", "old Lua script")]:
        points = [(max(r["locks_held"], 1), r["ops_per_sec"]) for r in rows
                  if r["system"] == system and r["operation"] == "acquire"]
        ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=label)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("locks already held in the project (0 drawn at 1)")
    ax.set_ylabel("acquires per second")
    ax.set_title("Acquire throughput against locks held")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.text(0.01, 0.01, title_note, fontsize=7, color="#444")
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    fig.savefig(path, dpi=110)


def main():
    script = open(os.path.join(SEED, "getFileLock.lua")).read()
    out_dir = os.path.join(ROOT, "bench")
    rows = []
    server = Server()
    try:
        lua_sha = server.cli("SCRIPT", "LOAD", script)
        for n in SIZES:
            print(f"N = {n}", flush=True)
            rows += measure(server, n, lua_sha)
    finally:
        server.stop()

    with open(os.path.join(out_dir, "results.csv"), "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        writer.writeheader()
        writer.writerows(rows)

    def rate(system, operation, n):
        return next((r["ops_per_sec"] for r in rows if r["system"] == system
                     and r["operation"] == operation and r["locks_held"] == n), float("nan"))

    print()
    print("| locks held | pathlock acquire/s | release/s | SET NX/s | Lua/s | pathlock/SET | "
          "pathlock/Lua | pathlock B/lock | SET B/lock | Lua B/lock |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n in SIZES:
        acq, rel = rate("pathlock", "acquire", n), rate("pathlock", "release", n)
        setnx, lua = rate("set-nx", "acquire", n), rate("lua", "acquire", n)
        mem = {r["system"]: r["bytes_per_lock"] for r in rows
               if r["locks_held"] == n and r["operation"] == "acquire"}
        mem.setdefault("lua", None)
        print(f"| {n:,} | {acq:,.0f} | {rel:,.0f} | {setnx:,.0f} | {lua:,.1f} | {acq / setnx:.2f} | "
              f"{acq / lua:,.0f}x | {mem['pathlock'] or '-'} | {mem['set-nx'] or '-'} | {mem['lua'] or '-'} |")

    if DEEP_PIPELINE:
        p = DEEP_PIPELINE
        print()
        print(f"| locks held | ACQUIRE/s -P {p} | SET NX/s -P {p} | ratio | "
              f"RELEASE/s -P {p} | DEL/s -P {p} | ratio |")
        print("|---:|---:|---:|---:|---:|---:|---:|")
        for n in SIZES:
            acq, setnx = rate("pathlock", f"acquire-p{p}", n), rate("set-nx", f"acquire-p{p}", n)
            rel, dele = rate("pathlock", f"release-p{p}", n), rate("set-nx", f"release-p{p}", n)
            print(f"| {n:,} | {acq:,.0f} | {setnx:,.0f} | {acq / setnx:.2f} | {rel:,.0f} | "
                  f"{dele:,.0f} | {rel / dele:.2f} |")

    note = (f"{datetime.date.today()} - {os.cpu_count()} cores, "
            f"{round(os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30)} GiB, "
            f"{platform.machine()} - redis-benchmark -c {CLIENTS} -P {PIPELINE}, one redis-server "
            f"for all systems - `make bench`")
    chart(rows, os.path.join(out_dir, "chart.png"), note)
    print(f"\nwrote bench/results.csv and bench/chart.png ({note})")


if __name__ == "__main__":
    sys.exit(main())
