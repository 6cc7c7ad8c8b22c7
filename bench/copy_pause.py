"""COPY of a big project: how long the server pauses, and what the first writes after it cost.

For each size (`COPY_LOCKS`, default 1,000,000 and 10,000,000), on a fresh redis-server with
`latency-monitor-threshold 1` and the slow log keeping everything over 1 ms:

  - grow: one project gets N locks through `redis-cli --pipe`, as in latency.py (a thousand
    folders, one canonical UUID token per lock);
  - copy: `COPY` of the project, timed by the client, with used memory before and after;
  - first writes: 4,000 single commands (one at a time, each timed by the client), alternating
    between the original and the copy: half release a lock picked across the whole project, so
    that each lands in storage that no write has touched since the copy and copies it, half
    acquire a new path;
  - unlink: `UNLINK` of the copy (the server frees it in its lazy-free thread).

Side by side, the same `COPY` of a Redis set of N members (`SADD`), Redis's own copy of a
big value. Reported per phase: the latency monitor's worst event, the worst round trip of a
separate client sending `PING` every millisecond, and the slowest command in the slow log.
`COPY_SET=0` leaves the set out.
"""

import os
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import latency  # noqa: E402
from latency import command, path, pipe, token  # noqa: E402

SIZES = [int(n) for n in os.environ.get("COPY_LOCKS", "1000000,10000000").split(",")]
WITH_SET = os.environ.get("COPY_SET", "1") != "0"
BATCH = 100_000
WRITES = 4_000


def round_trip(sock, data):
    started = time.perf_counter()
    sock.sendall(data)
    reply = b""
    while not reply.endswith(b"\r\n"):
        reply += sock.recv(4096)
    if reply.startswith(b"-"):
        raise RuntimeError(reply)
    return (time.perf_counter() - started) * 1000


def measure(run, name, work):
    """Runs `work` as a phase of `run` and returns what it returned."""
    result = {}
    run.phase(name, lambda: result.setdefault("value", work()))
    return result.get("value")


def bench(kind, n):
    run = latency.Run("pathlock" if kind == "pathlock" else "set-nx")
    key = b"big"
    memory = {}
    try:
        def grow():
            for first in range(0, n, BATCH):
                last = min(first + BATCH, n)
                if kind == "pathlock":
                    data = b"".join(command(b"PATHLOCK.ACQUIRE", key, b"TOKEN", token(i), b"TTL",
                                            b"3600000", b"WRITE", path(i))
                                    for i in range(first, last))
                else:
                    data = b"".join(command(b"SADD", key, path(i)) for i in range(first, last))
                pipe(run.port, data)

        run.phase("grow", grow)
        run.server.cli("MEMORY", "PURGE", check=False)
        memory["before"] = run.used_memory()[0]
        sock = socket.create_connection(("127.0.0.1", run.port))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        copy_ms = measure(run, "copy",
                             lambda: round_trip(sock, command(b"COPY", key, b"copy")))
        memory["after_copy"] = run.used_memory()[0]

        def writes():
            worst = 0.0
            step = max(1, n // (WRITES // 2))
            for k in range(WRITES // 2):
                i = (k * step) % n
                target = key if k % 2 == 0 else b"copy"
                if kind == "pathlock":
                    release = command(b"PATHLOCK.RELEASE", target, token(i))
                    grant = command(b"PATHLOCK.ACQUIRE", target, b"TTL", b"3600000", b"WRITE",
                                    b"/new/%d" % k)
                else:
                    release = command(b"SREM", target, path(i))
                    grant = command(b"SADD", target, b"/new/%d" % k)
                worst = max(worst, round_trip(sock, release), round_trip(sock, grant))
            return worst

        worst_write = measure(run, "writes", writes)
        memory["after_writes"] = run.used_memory()[0]
        measure(run, "unlink", lambda: round_trip(sock, command(b"UNLINK", b"copy")))
        sock.close()
    finally:
        rows, _ = run.finish()
    return rows, copy_ms, worst_write, memory


def main():
    kinds = ["pathlock"] + (["set"] if WITH_SET else [])
    lines = ["| value | size | phase | client ms | latency monitor worst (ms) | worst PING (ms) "
             "| slowest command (ms) |", "|---|---:|---|---:|---:|---:|---|"]
    notes = []
    for n in SIZES:
        for kind in kinds:
            print(f"{kind}: {n:,}", flush=True)
            rows, copy_ms, worst_write, memory = bench(kind, n)
            for r in rows:
                if r["phase"] == "grow":
                    continue
                client = {"copy": f"{copy_ms:.1f}",
                          "writes": f"{worst_write:.2f} (worst)"}.get(r["phase"], "")
                lines.append(f"| {kind} | {n:,} | {r['phase']} | {client} | "
                             f"{r['latency_monitor_worst_ms']} | {r['worst_ping_ms']} | "
                             f"{r['slowest_command_us'] / 1000:.1f} "
                             f"`{r['slowest_command'][:28]}` |")
            notes.append(f"{kind} {n:,}: used memory {memory['before'] / 1e6:.0f} MB before COPY, "
                         f"+{(memory['after_copy'] - memory['before']) / 1e6:.1f} MB after it, "
                         f"+{(memory['after_writes'] - memory['before']) / 1e6:.1f} MB after the "
                         f"{WRITES:,} writes")
    print("\n".join([""] + lines + [""] + notes))


if __name__ == "__main__":
    main()
