"""Wait queues at scale: pathlock's blocking waits side by side with Redis's own, in one run.

Real clients as users run them: redis-py asyncio, one connection per waiter, all against one
redis-server with the module loaded (client and server share the machine). Four cases:

  chain    N waiters on one path (`WRITE /A`), each releasing as soon as it is granted, so the
           lock is handed over N times; beside it the same chain through `BLPOP`/`LPUSH` on one
           list (each client, once it pops, pushes for the next). Rate: hand-overs per second.
  wake     one `RELEASE` of `WRITE /A/C` grants N waiters on `WRITE /A/C/f<i>.txt`; beside it one
           `XADD` wakes N `XREAD BLOCK` readers. Time until every client has its reply, and how
           long a separate client's `PING` sent right after waits.
  mixed    N waiters over 100 paths (10 folders of 10 files), 70% READ, 30% WRITE, one in five
           asking for two paths, queued behind a `WRITE /` and each releasing once granted.
           Compared with the BLPOP chain of the same N.

  memory   N clients wait in `BLPOP`, in `FLOOR.BLOCK` (bench/block_floor.rs: a module command
           that blocks through `RedisModule_BlockClient` and does nothing else, the floor of the
           server's module blocking API) and in `PATHLOCK.ACQUIRE ... WAIT` on N distinct paths
           behind one holder; `used_memory` per waiter beyond the same N clients connected and
           idle. Then each system's waiters time out, are served (`LPUSH` of N elements,
           `FLOOR.WAKE`, one `RELEASE` that grants all N, each releasing once granted), or
           disconnect, each from its own N waiters; shown: how far `used_memory` is from its
           start (the N clients idle; before they connected, for a disconnection) 5 s later, and
           how soon it came within 4 MB. The served case's `RELEASE` is timed from `SLOWLOG`.

For every case it reports the slowest command of each system from `SLOWLOG` (commands over
100 us are logged), and for pathlock the worst event of `LATENCY LATEST`
(`latency-monitor-threshold 1`, so events of 1 ms and more) and the mean time of a `RELEASE`
from `INFO commandstats`; all are reset before each case. On a shared machine a command is
sometimes descheduled halfway, which shows as a slow command of either system: compare the two,
and the count of the server's involuntary context switches during each system's runs.

Knobs: WAITS_NICE (the server's niceness, default -10 when run as root), WAITS_FIFO=1 (the
server under SCHED_FIFO, root only: no ordinary process of a shared machine then preempts it in
the middle of a command, so the slow log shows the server's own work), WAITS_SIZES (default 1000,4000,10000), WAITS_MIXED (default 10000, 0 to skip),
WAITS_ROUNDS (BLPOP/pathlock pairs per size, default 5; the pair with the median ratio is
shown), WAITS_MEMORY (waiters of the memory case, default 10000, 0 to skip). `make bench-waits` runs it after a release build.
"""

import asyncio
import csv
import os
import random
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import time

import redis.asyncio as aredis

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODULE = os.environ.get("PATHLOCK_MODULE", os.path.join(ROOT, "target/release/libpathlock.so"))
SIZES = [int(n) for n in os.environ.get("WAITS_SIZES", "1000,4000,10000").split(",") if n]
MIXED = int(os.environ.get("WAITS_MIXED", "10000"))
MEMORY = int(os.environ.get("WAITS_MEMORY", "10000"))
# The floor module of the memory case (`cargo build --release --example block_floor`); the case
# leaves the floor out when it is not built.
# Where the memory case also writes its figures as CSV rows (section, measure, value, baseline,
# ratio, unit), for `make bench-projects`'s waiters section.
MEMORY_ROWS = os.environ.get("WAITS_MEMORY_ROWS")
FLOOR_MODULE = os.environ.get(
    "FLOOR_MODULE", os.path.join(ROOT, "target/release/examples/libblock_floor.so"))
ROUNDS = int(os.environ.get("WAITS_ROUNDS", "5"))
FIFO = os.environ.get("WAITS_FIFO") == "1"
KEY = "bench:waits"
WAIT_MS = 600000
TTL_MS = 600000
# Connections are opened in batches, so that the server's accept backlog never overflows.
CONNECT_BATCH = 500


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def raise_file_limit(needed):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return soft


def nice_prefix():
    """Runs the server (and `main` this client) at a higher priority when allowed (WAITS_NICE,
    default -10), so that other work on a shared machine deschedules them less in the middle
    of a command; both systems run on that one server and client, so the comparison stays
    even."""
    level = int(os.environ.get("WAITS_NICE", "-10"))
    if level == 0 or shutil.which("nice") is None:
        return []
    if level < 0 and os.geteuid() != 0:
        return []
    return ["nice", "-n", str(level)]


# The server binary, as bench/projects.py and the tests take it (Valkey or another Redis).
SERVER = os.environ.get("REDIS_SERVER", "redis-server")


class Server:
    """One redis-server (or `REDIS_SERVER`) with the module; it inherits the raised file limit."""

    def __init__(self, max_clients):
        self.dir = tempfile.mkdtemp(prefix="pathlock-waits-")
        self.port = free_port()
        self.proc = subprocess.Popen(
            [*nice_prefix(), SERVER, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", self.dir,
             "--save", "", "--appendonly", "no", "--loadmodule", MODULE,
             *(["--loadmodule", FLOOR_MODULE] if os.path.exists(FLOOR_MODULE) else []),
             "--maxclients", str(max_clients), "--latency-monitor-threshold", "1",
             "--slowlog-log-slower-than", "100", "--slowlog-max-len", "100000",
             "--logfile", os.path.join(self.dir, "redis.log")],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if FIFO:
            os.sched_setscheduler(self.proc.pid, os.SCHED_FIFO, os.sched_param(10))

    async def wait_ready(self):
        for _ in range(200):
            try:
                r = client(self.port)
                await r.ping()
                return r
            except (ConnectionError, OSError, aredis.ConnectionError):
                await asyncio.sleep(0.05)
        raise RuntimeError("redis-server did not start")

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=30)


def client(port):
    # No socket timeout: a waiter's reply may take longer than redis-py's default of 5 s.
    return aredis.Redis(port=port, single_connection_client=True, socket_timeout=None,
                        socket_connect_timeout=60)


async def connect(port, n):
    clients = []
    for start in range(0, n, CONNECT_BATCH):
        batch = [client(port) for _ in range(start, min(n, start + CONNECT_BATCH))]
        await asyncio.gather(*(c.ping() for c in batch))
        clients.extend(batch)
    return clients


async def close(clients):
    for start in range(0, len(clients), CONNECT_BATCH):
        await asyncio.gather(*(c.aclose() for c in clients[start:start + CONNECT_BATCH]))


async def wait_for(admin, section, field, target, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        info = await admin.info(section)
        if int(info.get(field, 0)) >= target:
            return
        await asyncio.sleep(0.05)
    raise RuntimeError(f"{field} did not reach {target}")


# The server's process id, to count how often the kernel took its core away during a case.
SERVER_PID = [0]
PREEMPTED_AT_RESET = [0]


def preemptions():
    """The server's involuntary context switches so far (0 where /proc does not say)."""
    try:
        with open(f"/proc/{SERVER_PID[0]}/status") as status:
            for line in status:
                if line.startswith("nonvoluntary_ctxt_switches:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


async def reset_monitors(admin):
    PREEMPTED_AT_RESET[0] = preemptions()
    await admin.execute_command("LATENCY", "RESET")
    await admin.execute_command("SLOWLOG", "RESET")
    await admin.execute_command("CONFIG", "RESETSTAT")


class Monitors:
    """What the server saw during one case."""

    def __init__(self, event_ms, slowest_us, over_2ms, release_us, first_us, slowest_name="",
                 preempted=0):
        self.preempted = preempted
        self.event_ms = event_ms
        self.slowest_us = slowest_us
        self.slowest_name = slowest_name
        self.over_2ms = over_2ms
        self.release_us = release_us
        self.first_us = first_us

    def worst(self, other):
        """The worse of two runs' figures, each on its own."""
        slowest = max(self, other, key=lambda m: m.slowest_us)
        return Monitors(max(self.event_ms, other.event_ms), slowest.slowest_us,
                        max(self.over_2ms, other.over_2ms), self.release_us,
                        max(self.first_us, other.first_us), slowest.slowest_name,
                        self.preempted + other.preempted)

    def latency(self):
        return f"{self.event_ms} ms" if self.event_ms else "none"

    def slowest(self):
        worst = f"{self.slowest_us / 1000:.2f} ms" if self.slowest_us else "<0.1 ms"
        if self.slowest_name:
            worst += f" {self.slowest_name.split('.')[-1]}"
        return f"{worst} ({self.over_2ms} over 2 ms)" if self.over_2ms else worst


async def monitors(admin, prefix):
    """The worst `LATENCY LATEST` event in ms (0 when none reached 1 ms), the slowest command
    whose name starts with `prefix` in the slow log, in us (0 when none took over 100 us), how
    many took over 2 ms, and the mean us per PATHLOCK.RELEASE. The release by the token
    `holder`, which starts a case by waking the front of the queue, is counted apart."""
    event = 0
    for entry in await admin.execute_command("LATENCY", "LATEST"):
        event = max(event, int(entry[3]))
    slowest, over, first, slowest_name = 0, 0, 0, ""
    for entry in await admin.execute_command("SLOWLOG", "GET", "-1"):
        name = entry[3][0].decode().upper() if entry[3] else ""
        if entry[3][-1:] == [b"holder"]:
            first = int(entry[2])
        elif any(name.startswith(p) for p in prefix):
            if int(entry[2]) > slowest:
                slowest, slowest_name = int(entry[2]), name
            over += int(entry[2]) > 2000
    stats = await admin.info("commandstats")
    release = stats.get("cmdstat_PATHLOCK.RELEASE", {}).get("usec_per_call", 0)
    return Monitors(event, slowest, over, float(release), first, slowest_name,
                    preemptions() - PREEMPTED_AT_RESET[0])


async def blpop_chain(admin, pool, n):
    """N clients in BLPOP on one list; each pushes for the next once it pops."""
    await admin.delete("bench:list")
    clients = pool[:n]
    await reset_monitors(admin)
    done = []

    async def one(c):
        await c.blpop(["bench:list"], timeout=0)
        await c.lpush("bench:list", "x")
        done.append(time.perf_counter())

    tasks = [asyncio.create_task(one(c)) for c in clients]
    await wait_for(admin, "clients", "blocked_clients", n)
    start = time.perf_counter()
    await admin.lpush("bench:list", "x")
    await asyncio.gather(*tasks)
    elapsed = max(done) - start
    seen = await monitors(admin, ["BLPOP", "LPUSH"])
    await admin.delete("bench:list")
    return n / elapsed, seen


async def pathlock_queue(admin, pool, requests, hold):
    """Queues `requests` (lists of mode/path words) behind `hold`, released by one RELEASE;
    each waiter releases once granted. Returns grants per second and what the server saw."""
    await admin.delete(KEY)
    clients = pool[:len(requests)]
    await admin.execute_command("PATHLOCK.ACQUIRE", KEY, "TOKEN", "holder", "TTL", TTL_MS, *hold)
    await reset_monitors(admin)
    done = []

    async def one(c, i, words):
        token = f"w{i}"
        reply = await c.execute_command("PATHLOCK.ACQUIRE", KEY, "TOKEN", token, "TTL", TTL_MS,
                                        "WAIT", WAIT_MS, *words)
        if reply is None:
            raise RuntimeError(f"waiter {i} was not granted")
        await c.execute_command("PATHLOCK.RELEASE", KEY, token)
        done.append(time.perf_counter())

    tasks = [asyncio.create_task(one(c, i, words)) for i, (c, words) in
             enumerate(zip(clients, requests))]
    await wait_for(admin, "pathlock", "pathlock_clients_waiting", len(requests))
    start = time.perf_counter()
    await admin.execute_command("PATHLOCK.RELEASE", KEY, "holder")
    await asyncio.gather(*tasks)
    elapsed = max(done) - start
    seen = await monitors(admin, ["PATHLOCK."])
    return len(requests) / elapsed, seen


async def xread_wake(admin, pool, pinger, n):
    """One XADD wakes N XREAD BLOCK readers; a separate client's PING goes right after."""
    await admin.delete("bench:stream")
    await admin.xadd("bench:stream", {"f": "0"})
    clients = pool[:n]
    await reset_monitors(admin)
    done = []

    async def one(c):
        await c.xread({"bench:stream": "$"}, block=0)
        done.append(time.perf_counter())

    tasks = [asyncio.create_task(one(c)) for c in clients]
    await wait_for(admin, "clients", "blocked_clients", n)
    start = time.perf_counter()
    await admin.xadd("bench:stream", {"f": "1"})
    await pinger.ping()
    ping = time.perf_counter() - start
    await asyncio.gather(*tasks)
    elapsed = max(done) - start
    seen = await monitors(admin, ["XADD", "XREAD"])
    await admin.delete("bench:stream")
    return elapsed, ping, seen


async def pathlock_wake(admin, pool, pinger, n):
    """One RELEASE of WRITE /A/C grants N waiters on files under it."""
    await admin.delete(KEY)
    clients = pool[:n]
    await admin.execute_command("PATHLOCK.ACQUIRE", KEY, "TOKEN", "mover", "TTL", TTL_MS,
                                "WRITE", "/A/C")
    await reset_monitors(admin)
    done = []

    async def one(c, i):
        reply = await c.execute_command("PATHLOCK.ACQUIRE", KEY, "TOKEN", f"u{i}", "TTL", TTL_MS,
                                        "WAIT", WAIT_MS, "WRITE", f"/A/C/f{i}.txt")
        if reply is None:
            raise RuntimeError(f"uploader {i} was not granted")
        done.append(time.perf_counter())

    tasks = [asyncio.create_task(one(c, i)) for i, c in enumerate(clients)]
    await wait_for(admin, "pathlock", "pathlock_clients_waiting", n)
    start = time.perf_counter()
    await admin.execute_command("PATHLOCK.RELEASE", KEY, "mover")
    await pinger.ping()
    ping = time.perf_counter() - start
    await asyncio.gather(*tasks)
    elapsed = max(done) - start
    seen = await monitors(admin, ["PATHLOCK."])
    await admin.delete(KEY)
    return elapsed, ping, seen


def mixed_requests(n, seed=7):
    """N requests over 100 paths: 10 folders of 10 files; 70% READ, 30% WRITE; one in five
    asks for a second path, and one in ten of the paths is a whole folder."""
    rng = random.Random(seed)

    def item():
        folder = rng.randrange(10)
        path = f"/d{folder}" if rng.random() < 0.1 else f"/d{folder}/f{rng.randrange(10)}"
        return ["READ" if rng.random() < 0.7 else "WRITE", path]

    requests = []
    for _ in range(n):
        words = item()
        if rng.random() < 0.2:
            words += item()
        requests.append(words)
    return requests


def front_count(requests):
    """How many of `requests`, queued in this order with no lock held, no earlier request
    conflicts with: what the first release of the mixed case grants at once (about: requests
    reach the server in about the order they are sent)."""
    write, read = set(), set()
    count = 0
    for words in requests:
        items = [(words[i], words[i + 1]) for i in range(0, len(words), 2)]

        def related(held, path):
            return any(p == path or p.startswith(path + "/") or path.startswith(p + "/")
                       for p in held)

        if all(not related(write, path) and (mode == "READ" or not related(read, path))
               for mode, path in items):
            count += 1
        for mode, path in items:
            (write if mode == "WRITE" else read).add(path)
    return count


# How close `used_memory` must come back to its start, and how soon (issue 36, item 6).
GIVE_BACK_BYTES = 4 * 1024 * 1024
GIVE_BACK_S = 5.0
GIVE_BACK_LONG_S = 45.0


async def used_memory(admin):
    return int((await admin.info("memory"))["used_memory"])


async def settled_memory(admin):
    """`used_memory` once the server has trimmed what idle clients hold: Redis frees the query
    buffer of a client idle for more than 2 whole seconds (`clientsCron`, which visits every
    client about once a second), so this waits 4.5 s and then until two readings 250 ms apart
    agree within 32 KB (at most 10 s)."""
    await asyncio.sleep(4.5)
    last = await used_memory(admin)
    for _ in range(30):
        await asyncio.sleep(0.25)
        now = await used_memory(admin)
        if abs(now - last) < 32768:
            return now
        last = now
    return last


async def drained(admin):
    """Waits (at most 60 s) until `used_memory` stops falling by more than 256 KB a second: a
    case that follows a module's waiters starts after the server's pool of temporary clients
    has shrunk, or it would reuse them and read less than a waiter costs."""
    last = await used_memory(admin)
    for _ in range(60):
        await asyncio.sleep(1)
        now = await used_memory(admin)
        if last - now < 262144:
            return
        last = now


async def given_back(admin, start):
    """Polls `used_memory`: returns how far above `start` it is GIVE_BACK_S after the waiters
    left, and how many seconds it took to come within GIVE_BACK_BYTES of it (None: not within
    GIVE_BACK_LONG_S, 45 s). The server's pool of temporary clients, two per module-blocked
    client, is freed 50 clients per 100 ms (`modulesCron`), so the longer watch shows where
    that floor ends."""
    began = time.monotonic()
    within, at_5s = None, None
    while True:
        now = await used_memory(admin)
        elapsed = time.monotonic() - began
        if within is None and now - start <= GIVE_BACK_BYTES:
            within = elapsed
        if at_5s is None and elapsed >= GIVE_BACK_S:
            at_5s = now - start
        if at_5s is not None and (within is not None or elapsed >= GIVE_BACK_LONG_S):
            return at_5s, within
        await asyncio.sleep(0.1)


class Waiting:
    """How each system's N clients wait, and how they are served."""

    def __init__(self, name, wait, serve, blocked_field):
        self.name = name
        self.wait = wait
        self.serve = serve
        self.blocked_field = blocked_field


def memory_systems(has_floor):
    async def blpop_wait(c, i, timeout_ms):
        await c.execute_command("BLPOP", "bench:mem", timeout_ms / 1000)

    async def blpop_serve(admin, n):
        await admin.lpush("bench:mem", *(["x"] * n))

    async def floor_wait(c, i, timeout_ms):
        await c.execute_command("FLOOR.BLOCK", timeout_ms)

    async def floor_serve(admin, n):
        await admin.execute_command("FLOOR.WAKE")

    async def pathlock_wait(c, i, timeout_ms):
        token = f"m{i}"
        reply = await c.execute_command("PATHLOCK.ACQUIRE", KEY, "TOKEN", token, "TTL", TTL_MS,
                                        "WAIT", timeout_ms, "WRITE", f"/d{i % 100}/f{i}.txt")
        if reply is not None:
            await c.execute_command("PATHLOCK.RELEASE", KEY, token)

    async def pathlock_serve(admin, n):
        await admin.execute_command("PATHLOCK.RELEASE", KEY, "holder")

    systems = [Waiting("BLPOP", blpop_wait, blpop_serve, ("clients", "blocked_clients"))]
    if has_floor:
        systems.append(Waiting("module floor (FLOOR.BLOCK)", floor_wait, floor_serve,
                               ("clients", "blocked_clients")))
    systems.append(Waiting("pathlock", pathlock_wait, pathlock_serve,
                           ("pathlock", "pathlock_clients_waiting")))
    return systems


async def memory_case(admin, port, system, n, end):
    """N fresh clients wait in `system` and leave by `end` (timeout, served, disconnect).
    Returns bytes per waiter, bytes above the start 5 s after they left, seconds until within
    4 MB (None: not within 5 s), and the serving command's time in us (served only)."""
    await admin.delete(KEY, "bench:mem")
    # The last case's clients are gone from the server (at most 60 s).
    for _ in range(600):
        if int((await admin.info("clients"))["connected_clients"]) <= 2:
            break
        await asyncio.sleep(0.1)
    await drained(admin)
    before_connect = await settled_memory(admin)
    clients = await connect(port, n)
    idle = await settled_memory(admin)
    if system.name == "pathlock":
        await admin.execute_command("PATHLOCK.ACQUIRE", KEY, "TOKEN", "holder", "TTL", TTL_MS,
                                    "WRITE", "/")
        idle = await settled_memory(admin)
    # The timeout case's waiters wait long enough for all of them to be waiting before the
    # first times out; its memory per waiter is read in the other two cases, once settled.
    timeout_ms = 5000 + 2 * n if end == "timeout" else WAIT_MS
    tasks = [asyncio.create_task(system.wait(c, i, timeout_ms)) for i, c in enumerate(clients)]
    per_waiter = None
    if end != "timeout":
        await wait_for(admin, *system.blocked_field, n)
        per_waiter = (await settled_memory(admin) - idle) / n
    await admin.execute_command("SLOWLOG", "RESET")
    serve_us = 0
    if end == "served":
        await system.serve(admin, n)
        await asyncio.gather(*tasks)
        for entry in await admin.execute_command("SLOWLOG", "GET", "-1"):
            if entry[3] and entry[3][0].decode().upper() in ("PATHLOCK.RELEASE", "LPUSH",
                                                              "FLOOR.WAKE"):
                if entry[3][-1:] == [b"holder"] or system.name != "pathlock":
                    serve_us = max(serve_us, int(entry[2]))
        start = idle
    elif end == "timeout":
        await asyncio.gather(*tasks)
        start = idle
    else:
        for task in tasks:
            task.cancel()
        await close(clients)
        await asyncio.gather(*tasks, return_exceptions=True)
        clients = []
        start = before_connect
    above, within = await given_back(admin, start)
    await close(clients)
    if system.name == "pathlock":
        await admin.execute_command("PATHLOCK.RELEASE", KEY, "holder")
    return per_waiter, above, within, serve_us


async def memory_section(admin, port):
    try:
        await admin.execute_command("FLOOR.WAKE")
        has_floor = True
    except aredis.ResponseError:
        has_floor = False
    systems = memory_systems(has_floor)
    n = MEMORY
    print(f"Memory of {fmt(n)} waiters (fresh connections per case), and used_memory after they "
          "leave:\nper waiter = used_memory while they wait minus the same clients idle; after = "
          f"used_memory {GIVE_BACK_S:.0f} s after the last left minus the start (the clients "
          "idle; before they\nconnected, for a disconnection), and when it came within 4 MB "
          "(watched for 45 s).\n")
    print("| system | per waiter | x BLPOP | timed out: after | served: after "
          "| disconnected: after | serving command |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    base = None
    rows = []
    for system in systems:
        cells, per = [], []
        serve_us = 0
        for end in ("timeout", "served", "disconnect"):
            per_waiter, above, within, us = await memory_case(admin, port, system, n, end)
            if per_waiter is not None:
                per.append(per_waiter)
            serve_us = max(serve_us, us)
            rows.append((f"{system.name}: MB above the start 5 s after {fmt(n)} {end}",
                         above / 1e6, "MB"))
            rows.append((f"{system.name}: s until within 4 MB after {fmt(n)} {end}",
                         within if within is not None else float("inf"), "s"))
            when = (f"within 4 MB in {within:.1f} s" if within is not None
                    else f"not within 4 MB in {GIVE_BACK_LONG_S:.0f} s")
            cells.append(f"{above / 1e6:+.2f} MB ({when})")
        per_waiter = sum(per) / len(per)
        base = base or per_waiter
        serving = f"{serve_us / 1000:.1f} ms" if serve_us else "<0.1 ms"
        print(f"| {system.name} | {per_waiter / 1024:.2f} KB | {per_waiter / base:.1f} "
              f"| {' | '.join(cells)} | {serving} |", flush=True)
        rows.append((f"{system.name}: bytes per waiter", per_waiter, "B"))
        rows.append((f"{system.name}: serving command for {fmt(n)}", serve_us / 1000, "ms"))
    print()
    if MEMORY_ROWS:
        # Each figure beside BLPOP's same figure of this run.
        blpop = {measure.split(": ", 1)[1]: value for measure, value, _ in rows
                 if measure.startswith("BLPOP: ")}
        with open(MEMORY_ROWS, "w", newline="") as f:
            writer = csv.writer(f)
            for measure, value, unit in rows:
                baseline = blpop.get(measure.split(": ", 1)[1])
                ratio = value / baseline if baseline else float("nan")
                writer.writerow(["waiters", measure, value, baseline, ratio, unit])


def fmt(x):
    return f"{x:,.0f}"


def median_pair(pairs):
    """The pair with the median ratio, with the worst latencies seen in any pair: a slow
    command is not hidden by picking a round."""
    ratio, blpop, rate, p_seen, b_seen = sorted(pairs, key=lambda p: p[0])[len(pairs) // 2]
    for pair in pairs:
        p_seen, b_seen = p_seen.worst(pair[3]), b_seen.worst(pair[4])
    return ratio, blpop, rate, p_seen, b_seen


async def main():
    if nice_prefix():
        os.nice(int(nice_prefix()[-1]))
    largest = max(SIZES + [MIXED, MEMORY])
    limit = raise_file_limit(2 * largest + 1000)
    if limit < largest + 200:
        sys.exit(f"the file limit is {limit}; {largest + 200} descriptors are needed")
    # Room for a case's clients while the server still frees the last case's.
    server = Server(min(2 * largest + 100, limit - 100))
    SERVER_PID[0] = server.proc.pid
    try:
        admin = await server.wait_ready()
        info = await admin.info("server")
        priority = "SCHED_FIFO" if FIFO else " ".join(nice_prefix()) or "default priority"
        name = (f"valkey {info['valkey_version']}" if "valkey_version" in info
                else f"redis {info['redis_version']}")
        print(f"{name} ({priority}), "
              f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}; redis-py asyncio, "
              f"one connection per waiter; median of {ROUNDS} alternating pairs\n")
        if MEMORY:
            await memory_section(admin, server.port)
        # One connection per waiter, opened once and used by every case in turn.
        pool = await connect(server.port, max(SIZES + [MIXED, 1]))
        pinger = (await connect(server.port, 1))[0]

        print("Hand-over chain: N waiters on one path (WRITE /A), each releasing once granted;")
        print("BLPOP: the same chain through BLPOP/LPUSH on one list.\n")
        print("| waiters | BLPOP hand-overs/s | pathlock hand-overs/s | ratio | RELEASE mean "
              "| slowest pathlock command | slowest BLPOP/LPUSH | LATENCY LATEST (pathlock) "
              "| server preempted (pathlock/BLPOP runs) |")
        print("|---:|---:|---:|---:|---:|---|---|---|---:|")
        for n in SIZES:
            pairs = []
            for _ in range(ROUNDS):
                blpop, b_seen = await blpop_chain(admin, pool, n)
                rate, p_seen = await pathlock_queue(
                    admin, pool, [["WRITE", "/A"]] * n, ["WRITE", "/A"])
                pairs.append((rate / blpop, blpop, rate, p_seen, b_seen))
            ratio, blpop, rate, p_seen, b_seen = median_pair(pairs)
            print(f"| {fmt(n)} | {fmt(blpop)} | {fmt(rate)} | {ratio:.2f} "
                  f"| {p_seen.release_us:.1f} us | {p_seen.slowest()} | {b_seen.slowest()} "
                  f"| {p_seen.latency()} | {p_seen.preempted}/{b_seen.preempted} |", flush=True)

        print("\nOne release wakes N: RELEASE of WRITE /A/C grants N waiters on /A/C/f<i>.txt;")
        print("XADD wakes N XREAD BLOCK readers. PING: a separate client's PING sent right after.\n")
        print("| waiters | XADD: all woken | PING | pathlock: all granted | PING "
              "| slowest pathlock command | LATENCY LATEST (pathlock) |")
        print("|---:|---:|---:|---:|---:|---|---|")
        for n in SIZES:
            x_all, x_ping, _ = await xread_wake(admin, pool, pinger, n)
            p_all, p_ping, seen = await pathlock_wake(admin, pool, pinger, n)
            print(f"| {fmt(n)} | {x_all * 1000:.0f} ms | {x_ping * 1000:.0f} ms "
                  f"| {p_all * 1000:.0f} ms | {p_ping * 1000:.0f} ms | {seen.slowest()} "
                  f"| {seen.latency()} |", flush=True)

        if MIXED:
            requests = mixed_requests(MIXED)
            print(f"\nMixed queue: {fmt(MIXED)} waiters over 100 paths, 70% READ, 30% WRITE, "
                  "one in five on two paths,\nqueued behind WRITE /, each releasing once "
                  "granted; BLPOP chain of the same size. The first RELEASE (of WRITE /) grants\n"
                  f"the front of every queue at once, about {fmt(front_count(requests))} "
                  "waiters; it is shown apart from the other commands.\n")
            print("| waiters | BLPOP hand-overs/s | pathlock grants/s | ratio | RELEASE mean "
                  "| first RELEASE | slowest other pathlock command | slowest BLPOP/LPUSH "
                  "| LATENCY LATEST (pathlock) | server preempted (pathlock/BLPOP runs) |")
            print("|---:|---:|---:|---:|---:|---:|---|---|---|---:|")
            pairs = []
            for _ in range(ROUNDS):
                blpop, b_seen = await blpop_chain(admin, pool, MIXED)
                rate, p_seen = await pathlock_queue(admin, pool, requests, ["WRITE", "/"])
                pairs.append((rate / blpop, blpop, rate, p_seen, b_seen))
            ratio, blpop, rate, p_seen, b_seen = median_pair(pairs)
            print(f"| {fmt(MIXED)} | {fmt(blpop)} | {fmt(rate)} | {ratio:.2f} "
                  f"| {p_seen.release_us:.1f} us | {p_seen.first_us / 1000:.1f} ms "
                  f"| {p_seen.slowest()} | {b_seen.slowest()} | {p_seen.latency()} "
                  f"| {p_seen.preempted}/{b_seen.preempted} |", flush=True)
        await close(pool + [pinger, admin])
    finally:
        server.stop()


if __name__ == "__main__":
    asyncio.run(main())
