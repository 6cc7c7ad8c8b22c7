"""What the Python client costs, side by side with raw redis-py, against a throw-away server.

    python3 bench.py [--seconds 0.5] [--rounds 15] [--leases 100] [--ttl-ms 600] [--held 6]

1. Watchdog load: N leases held for a while; the server counts the PATHLOCK.RENEW calls it got
   (INFO commandstats), next to the N * held / (ttl / 3) that one renewal per ttl/3 predicts.
2. Throughput of acquire + release of a depth-4 path: `execute_command("PATHLOCK.ACQUIRE", ...)`
   and `execute_command("PATHLOCK.RELEASE", ...)` by hand, then `with locks.upload(path):`, in
   alternating rounds so that load on the machine hits both alike; sync (one thread) and asyncio
   (16 tasks). Also the commands the server received per operation, from INFO commandstats.

Not part of `make test`: it reports figures and asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import socket
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Dict, List

import redis
import redis.asyncio

from pathlock import AsyncPathLocks, PathLocks

REPO = Path(__file__).resolve().parents[2]
MODULE = os.environ.get("PATHLOCK_MODULE") or str(REPO / "target" / "release" / "libpathlock.so")
PATH = "/team/project/docs/report.txt"
TASKS = 16


def start_server() -> "tuple[subprocess.Popen[bytes], int, str]":
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    directory = tempfile.mkdtemp(prefix="pathlock-bench-")
    process = subprocess.Popen(
        [
            "redis-server",
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--dir",
            directory,
            "--save",
            "",
            "--appendonly",
            "no",
            "--loadmodule",
            MODULE,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    client = redis.Redis(port=port)
    for _ in range(200):
        try:
            client.ping()
            break
        except redis.ConnectionError:
            time.sleep(0.02)
    return process, port, directory


def calls(client: "redis.Redis") -> Dict[str, int]:
    stats = client.info("commandstats")
    return {name.lower()[len("cmdstat_") :]: int(v["calls"]) for name, v in stats.items()}


def watchdog_load(port: int, leases: int, ttl_ms: int, held: float) -> None:
    client = redis.Redis(port=port)
    locks = PathLocks(client, "bench:watchdog", ttl_ms=ttl_ms)
    before = calls(client).get("pathlock.renew", 0)
    held_leases = [locks.upload(f"/f{i}") for i in range(leases)]
    time.sleep(held)
    for lease in held_leases:
        lease.release()
    renewals = calls(client).get("pathlock.renew", 0) - before
    expected = leases * held / (ttl_ms / 3000.0)
    print(
        f"sync:    {leases} leases, ttl {ttl_ms} ms, held {held:.1f} s: {renewals} RENEWs, "
        f"{expected:.0f} predicted by one per ttl/3 ({renewals / expected:.2f}x)"
    )

    async def run_async() -> None:
        aclient = redis.asyncio.Redis(port=port)
        alocks = AsyncPathLocks(aclient, "bench:watchdog", ttl_ms=ttl_ms)
        before = calls(client).get("pathlock.renew", 0)
        held_leases = [await alocks.upload(f"/f{i}") for i in range(leases)]
        await asyncio.sleep(held)
        for lease in held_leases:
            await lease.release()
        renewals = calls(client).get("pathlock.renew", 0) - before
        print(
            f"asyncio: {leases} leases, ttl {ttl_ms} ms, held {held:.1f} s: {renewals} RENEWs, "
            f"{expected:.0f} predicted by one per ttl/3 ({renewals / expected:.2f}x)"
        )
        await aclient.aclose()

    asyncio.run(run_async())


def sync_raw(client: "redis.Redis") -> None:
    token, _fence = client.execute_command(
        "PATHLOCK.ACQUIRE", "bench:sync", "TTL", 30000, "WRITE", PATH
    )
    client.execute_command("PATHLOCK.RELEASE", "bench:sync", token)


def timed(seconds: float, op: Callable[[], None]) -> float:
    count, start = 0, time.perf_counter()
    while True:
        for _ in range(50):
            op()
        count += 50
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return count / elapsed


def sync_throughput(port: int, seconds: float, rounds: int) -> None:
    client = redis.Redis(port=port)
    locks = PathLocks(client, "bench:sync")

    def with_client() -> None:
        with locks.upload(PATH):
            pass

    raw: List[float] = []
    wrapped: List[float] = []
    for i in range(rounds):
        # Which goes first alternates, so that a change of load on the machine hits both alike.
        if i % 2 == 0:
            raw.append(timed(seconds, lambda: sync_raw(client)))
            wrapped.append(timed(seconds, with_client))
        else:
            wrapped.append(timed(seconds, with_client))
            raw.append(timed(seconds, lambda: sync_raw(client)))
    before = calls(client)
    for _ in range(1000):
        with_client()
    after = calls(client)
    per_op = {
        k: (after[k] - before.get(k, 0)) / 1000 for k in after if after[k] != before.get(k, 0)
    }
    per_op.pop("info", None)
    report("sync, 1 thread", raw, wrapped, per_op)


async def async_throughput(port: int, seconds: float, rounds: int) -> None:
    client = redis.asyncio.Redis(port=port, max_connections=TASKS)
    locks = AsyncPathLocks(client, "bench:async")

    async def raw_op(i: int) -> None:
        token, _ = await client.execute_command(
            "PATHLOCK.ACQUIRE", "bench:async", "TTL", 30000, "WRITE", f"{PATH}{i}"
        )
        await client.execute_command("PATHLOCK.RELEASE", "bench:async", token)

    async def client_op(i: int) -> None:
        async with locks.upload(f"{PATH}{i}"):
            pass

    async def measure(op: Callable[[int], Any]) -> float:
        count = 0
        stop = time.perf_counter() + seconds

        async def worker(i: int) -> None:
            nonlocal count
            while time.perf_counter() < stop:
                await op(i)
                count += 1

        start = time.perf_counter()
        await asyncio.gather(*(worker(i) for i in range(TASKS)))
        return count / (time.perf_counter() - start)

    raw: List[float] = []
    wrapped: List[float] = []
    for i in range(rounds):
        if i % 2 == 0:
            raw.append(await measure(raw_op))
            wrapped.append(await measure(client_op))
        else:
            wrapped.append(await measure(client_op))
            raw.append(await measure(raw_op))
    report(f"asyncio, {TASKS} tasks", raw, wrapped, None)
    await client.aclose()


def report(what: str, raw: List[float], wrapped: List[float], per_op: Any) -> None:
    r, w = statistics.median(raw), statistics.median(wrapped)
    ratio = statistics.median(b / a for a, b in zip(raw, wrapped))
    print(
        f"{what}: raw execute_command {r:,.0f} acquire+release/s, client {w:,.0f}/s; "
        f"client/raw {100 * ratio:.0f}% (median of {len(raw)} back-to-back pairs)"
    )
    if per_op:
        print(f"  commands the server got per client acquire+release: {per_op}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=0.5, help="length of one throughput round")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--leases", type=int, default=100)
    parser.add_argument("--ttl-ms", type=int, default=600)
    parser.add_argument("--held", type=float, default=6.0, help="seconds the leases are held")
    args = parser.parse_args()
    process, port, directory = start_server()
    try:
        watchdog_load(port, args.leases, args.ttl_ms, args.held)
        sync_throughput(port, args.seconds, args.rounds)
        asyncio.run(async_throughput(port, args.seconds, args.rounds))
    finally:
        process.kill()
        process.wait()
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
