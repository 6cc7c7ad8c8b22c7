"""Millions of projects, each holding a lock or two, beside as many of Redis's own keys in the
same run: what a project costs the server along the axis of the number of keys.

`make bench-projects` runs every section; `PROJECTS` (default 1,000,000) is the number of
projects, `PROJECTS_SECTIONS` (comma-separated names, default all) picks sections, and
`REDIS_SERVER` the server binary, `PROJECTS_NICE` (default -10) the servers' nice level, and
`PROJECTS_FIFO=1` runs them under SCHED_FIFO instead (root only; see `make bench-latency`). Each section is one function below, registered with
`@section` in the order it runs; a section prints its Markdown table and adds its rows to
bench/projects.csv (`row`). Sections that need projects filled can take the servers the `fill`
section left (`take_filled`) or fill their own (`filled`).

  fill     N projects (`proj:<i>`) with one lock each (ACQUIRE ... WRITE /A/doc.txt), beside N
           `SET proj:<i> t<i> NX PX` keys: wall and server time, the slowest command of the slow
           log (and how many took over 2 ms), memory per key;
  release  every project's lock released (RELEASE proj:<i> t<i>), beside DEL of every key:
           time, DBSIZE right after and how long until it is 0, used_memory back to the start;
  lapse    N projects whose locks lapse together (the server sleeps through every deadline with
           DEBUG SLEEP), beside N keys with a PX TTL: time until DBSIZE is 0 and the locks are
           gone, the module's worst tick (`pathlock_cycle_longest_us`) beside Redis's own
           `expire-cycle` (the latency monitor), and the module's own work in its longest tick
           (`pathlock_cycle_own_longest_cpu_us`: the tick less its calls into the server), the
           worst PING meanwhile, used_memory back.
  memory   what a project costs in memory, each figure a rise of used_memory on a fresh server
           once it holds still, after one command on a key of its own (so that what the first
           command allocates for the whole server counts on neither side), with UUID v4 tokens:
           N projects of one lock beside N `SET proj:<i> <uuid> NX PX` keys, and the sum of their
           MEMORY USAGE against the rise; one project's bytes per lock beyond the first at 1,000
           and N locks (paths /d<i % 1000>/f<i>), beside as many `SET lock:<path> <uuid> NX PX`
           keys, and its MEMORY USAGE against the rise; N locks of one token, every ACQUIRE with
           the same 256-byte note, beside the same without it.
  waiters  10,000 clients waiting (`PROJECTS_WAITERS`) in BLPOP, in a module command that only
           blocks (bench/block_floor.rs: the floor of the server's module blocking API) and in
           pathlock: memory per waiter, used_memory after they time out, are served or
           disconnect, and the serving command (one RELEASE granting all of them). It is
           bench/waits.py's memory case (redis-py asyncio, one connection per waiter), run with
           the Python of `make bench-waits` (`PROJECTS_WAITS_PYTHON`).
  whole_key  one project of WHOLE_KEY_LOCKS locks (default 1,000,000) beside a hash of as many
           fields through DUMP, RESTORE, DEL, DEBUG RELOAD, fork, a full sync and MIGRATE
           (bench/whole_key.py, which `make bench-whole-key` runs alone).
"""

import csv
import multiprocessing
import os
import platform
import random
import subprocess
import sys
import tempfile
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench import ROOT, Server  # noqa: E402
from latency import lift_rt_throttling, restore_rt_throttling  # noqa: E402
from owners import Client, command_usec, info  # noqa: E402

PROJECTS = int(os.environ.get("PROJECTS", "1000000"))
SERVER = os.environ.get("REDIS_SERVER", "redis-server")
# How long the release and lapse sections wait for the keys and the memory to go.
SETTLE_SECONDS = float(os.environ.get("PROJECTS_SETTLE_SECONDS", "10"))
# The longest a lapse is followed when it does not end (keys that stay after their locks).
FOLLOW_SECONDS = float(os.environ.get("PROJECTS_FOLLOW_SECONDS", "30"))
# The servers (and the pinger) run at this nice level when allowed, so that the slow log and the
# ticks show the server's own work more than the preemptions of a shared machine.
NICE = int(os.environ.get("PROJECTS_NICE", "-10"))
# With PROJECTS_FIFO=1 they run under SCHED_FIFO instead (root only), which no ordinary process
# preempts, with the real-time throttling lifted for the run, as `make bench-latency` does with
# LATENCY_FIFO=1 (see there): on a loaded machine the slow log then shows the server's own work.
FIFO = os.environ.get("PROJECTS_FIFO") == "1"
# The length of the memory section's tokens: 36 is a UUID v4 as clients send it; longer ones
# (up to the 128 bytes a token may have) are the UUID followed by random hex digits; shorter ones
# (at least 2) are `t` and the key's index, zero-padded: the fill section's kind of token.
TOKEN_BYTES = int(os.environ.get("PROJECTS_TOKEN_BYTES", "36"))
# The project keys' names: `proj:<i>` by default (short enough for the expiry schedule to keep
# the name inline); `PROJECTS_KEY_PREFIX` puts a prefix before them to try names as long as an
# application's (for example `drive:tenant:<uuid>:project:`), on both sides alike.
KEY_PREFIX = os.environ.get("PROJECTS_KEY_PREFIX", "")
LONG_TTL = 3_600_000
MB = 1 << 20
ROWS = []
SECTIONS = []
# Servers the fill section leaves filled, by system name, for the sections after it.
FILLED = {}
# Seconds per key the slower system took to fill, once the fill section has measured it.
FILL_PACE = []


def section(function):
    """Registers a section; they run in the order they are defined."""
    SECTIONS.append(function)
    return function


def key(i):
    return f"{KEY_PREFIX}proj:{i}"


def token(i):
    return f"t{i}"


class System:
    """One side of a comparison: how it takes a key and lets it go."""

    def __init__(self, name, take, let_go, command):
        self.name, self.take, self.let_go, self.command = name, take, let_go, command


PATHLOCK = System(
    "pathlock",
    lambda i, ttl: ("PATHLOCK.ACQUIRE", key(i), "TOKEN", token(i), "TTL", ttl, "WRITE",
                    "/A/doc.txt"),
    lambda i: ("PATHLOCK.RELEASE", key(i), token(i)),
    "pathlock.acquire")
SET_NX = System(
    "SET NX PX",
    lambda i, ttl: ("SET", key(i), token(i), "NX", "PX", ttl),
    lambda i: ("DEL", key(i)),
    "set")
SYSTEMS = (PATHLOCK, SET_NX)


def row(part, measure, value, baseline, unit):
    """Adds a CSV row, and returns the ratio (NaN without a baseline)."""
    ratio = value / baseline if baseline else float("nan")
    ROWS.append((part, measure, value, baseline, ratio, unit))
    return ratio


def renice(pid):
    try:
        if FIFO:
            os.sched_setscheduler(pid, os.SCHED_FIFO, os.sched_param(10))
        else:
            os.setpriority(os.PRIO_PROCESS, pid, NICE)
    except OSError:
        pass


def start_server():
    server = Server(extra=["--enable-debug-command", "local"], binary=SERVER)
    renice(server.proc.pid)
    c = Client(server.port)
    c.call("CONFIG", "SET", "slowlog-log-slower-than", "500")
    c.call("CONFIG", "SET", "slowlog-max-len", "100000")
    c.call("CONFIG", "SET", "latency-monitor-threshold", "1")
    return server, c


def pipe(server, commands):
    """Sends commands through `redis-cli --pipe` from a file written beforehand, so that the
    time measured is the server's and redis-cli's, not Python's; fails on any error reply."""
    with tempfile.NamedTemporaryFile(prefix="pathlock-projects-") as f:
        chunk = []
        for args in commands:
            part = [b"*%d\r\n" % len(args)]
            for a in args:
                a = a if isinstance(a, bytes) else str(a).encode()
                part.append(b"$%d\r\n%s\r\n" % (len(a), a))
            chunk.append(b"".join(part))
            if len(chunk) == 65536:
                f.write(b"".join(chunk))
                chunk = []
        f.write(b"".join(chunk))
        f.flush()
        f.seek(0)
        t = time.perf_counter()
        out = subprocess.run(["redis-cli", "-p", str(server.port), "--pipe"], stdin=f,
                             capture_output=True, text=True, check=True).stdout
        wall = time.perf_counter() - t
    if "errors: 0," not in out:
        raise RuntimeError(f"redis-cli --pipe: {out.strip()}")
    return wall


def slow_log(c):
    """The slowest command in the slow log (us and its name), how many took over 2 ms, and the
    five slowest as (us, key): the key's number tells how many keys the database held then."""
    entries = c.call("SLOWLOG", "GET", "-1") or []
    if not entries:
        return 0, "-", 0, []
    worst = max(entries, key=lambda e: e[2])
    name = worst[3][0].decode(errors="replace") if worst[3] else "?"
    slowest = sorted(entries, key=lambda e: -e[2])[:5]
    keys = [(e[2], e[3][1].decode(errors="replace") if len(e[3]) > 1 else "?") for e in slowest]
    return worst[2], name, sum(1 for e in entries if e[2] > 2000), keys


def latency_ms(c, event):
    """The latency monitor's worst sample of `event` (whole ms; 0 when none reached 1 ms)."""
    latest = c.call("LATENCY", "LATEST") or []
    return max((e[3] for e in latest if e[0] in (event, event.encode())), default=0)


def info_int(c, section_name, field, default=0):
    value = info(c, section_name, field)
    return int(value) if value is not None else default


def filled(system, n, ttl=LONG_TTL):
    """A fresh server with `n` keys taken by `system`, and what the fill cost."""
    server, c = start_server()
    start = server.used_memory()
    c.call("SLOWLOG", "RESET")
    before = command_usec(c, system.command)
    wall = pipe(server, (system.take(i, ttl) for i in range(n)))
    figures = {
        "start": start,
        "wall": wall,
        "server": (command_usec(c, system.command) - before) / 1e6,
        "slowest": slow_log(c),
        "per_key": (server.used_memory() - start) / n,
        "dbsize": c.call("DBSIZE"),
    }
    return server, c, figures


def take_filled(system, n):
    """The server the fill section left for `system`, or a freshly filled one."""
    if system.name in FILLED:
        return FILLED.pop(system.name)
    return filled(system, n)


def stop_filled():
    for server, _, _ in FILLED.values():
        server.stop()
    FILLED.clear()


def pinger(port, since, stop, results):
    """PINGs once a millisecond; reports the worst round trip of those sent after `since`."""
    renice(0)
    c = Client(port)
    worst = 0.0
    while not stop.is_set():
        t = time.monotonic()
        c.call("PING")
        if t >= since.value:
            worst = max(worst, time.monotonic() - t)
        time.sleep(0.001)
    results.put(worst * 1000)


class Pinger:
    """A PING round trip watched from another process, counted from `count_from()` on."""

    def __init__(self, port):
        self.since = multiprocessing.Value("d", float("inf"))
        self.stop = multiprocessing.Event()
        self.results = multiprocessing.Queue()
        self.proc = multiprocessing.Process(
            target=pinger, args=(port, self.since, self.stop, self.results))
        self.proc.start()

    def count_from(self, t):
        self.since.value = t

    def worst_ms(self):
        self.stop.set()
        worst = self.results.get(timeout=60)
        self.proc.join()
        return worst


@section
def fill(n):
    print(f"\n## Filling {n:,} projects with one lock each, beside {n:,} SET NX PX keys\n")
    print("| measure | pathlock | SET NX PX | ratio |")
    print("|---|---:|---:|---:|")
    figures = {}
    for system in SYSTEMS:
        server, c, f = filled(system, n)
        FILLED[system.name] = (server, c, f)
        figures[system.name] = f
    p, s = figures[PATHLOCK.name], figures[SET_NX.name]
    FILL_PACE.append(max(p["wall"], s["wall"]) / n)
    for measure, a, b, unit, fmt in (
            ("wall time (redis-cli --pipe)", p["wall"], s["wall"], "s", "{:,.2f} s"),
            ("server time (INFO commandstats)", p["server"], s["server"], "s", "{:,.2f} s"),
            ("slowest command (slow log)", p["slowest"][0], s["slowest"][0], "us", "{:,} us"),
            ("commands over 2 ms", p["slowest"][2], s["slowest"][2], "commands", "{:,}"),
            ("used_memory per key", p["per_key"], s["per_key"], "bytes", "{:,.0f} B")):
        ratio = row("fill", measure, a, b, unit)
        print(f"| {measure} | {fmt.format(a)} | {fmt.format(b)} | {ratio:.2f} |")
    print(f"\n(slowest: {p['slowest'][1]} and {s['slowest'][1]}; DBSIZE {p['dbsize']:,} and "
          f"{s['dbsize']:,})")
    # Where the slowest commands fell: a key table that doubles at 2^k keys (Redis's dict) puts
    # both systems' slowest commands at the same key numbers.
    for name, f in ((PATHLOCK.name, p), (SET_NX.name, s)):
        print(f"({name}'s five slowest: " +
              ", ".join(f"{us / 1000:,.1f} ms at {key}" for us, key in f["slowest"][3]) + ")")


def settle(server, c, start, gone):
    """Waits up to SETTLE_SECONDS (FOLLOW_SECONDS for `gone`) for DBSIZE 0 and used_memory
    back within 4 MB of `start`; returns the seconds until each (None: not seen) and the last
    DBSIZE and used_memory."""
    t = time.perf_counter()
    empty = back = None
    while True:
        elapsed = time.perf_counter() - t
        dbsize = c.call("DBSIZE")
        if empty is None and dbsize == 0 and gone():
            empty = elapsed
        used = server.used_memory()
        if back is None and empty is not None and used - start <= 4 * MB:
            back = elapsed
        if back is not None or elapsed > SETTLE_SECONDS:
            return empty, back, dbsize, used
        time.sleep(0.05)


def seconds(value):
    return f"{value:.2f} s" if value is not None else "not seen"


@section
def release(n):
    print(f"\n## Releasing every lock of {n:,} projects, beside DEL of {n:,} keys\n")
    print("| measure | pathlock | DEL | ratio |")
    print("|---|---:|---:|---:|")
    figures = {}
    for system in SYSTEMS:
        server, c, f = take_filled(system, n)
        try:
            before = command_usec(c, system.let_go(0)[0])
            wall = pipe(server, (system.let_go(i) for i in range(n)))
            spent = (command_usec(c, system.let_go(0)[0]) - before) / 1e6
            right_after = c.call("DBSIZE")
            empty, back, dbsize, used = settle(
                server, c, f["start"], lambda: info_int(c, "pathlock", "pathlock_locks") == 0)
            figures[system.name] = (wall, spent, right_after, empty, back, dbsize,
                                    used - f["start"])
        finally:
            server.stop()
    p, d = figures[PATHLOCK.name], figures[SET_NX.name]
    print(f"| wall time (redis-cli --pipe) | {p[0]:,.2f} s | {d[0]:,.2f} s | "
          f"{row('release', 'wall time', p[0], d[0], 's'):.2f} |")
    print(f"| server time (INFO commandstats) | {p[1]:,.2f} s | {d[1]:,.2f} s | "
          f"{row('release', 'server time', p[1], d[1], 's'):.2f} |")
    print(f"| DBSIZE right after | {p[2]:,} | {d[2]:,} | |")
    row("release", "DBSIZE right after", p[2], d[2], "keys")
    print(f"| DBSIZE 0 after | {seconds(p[3])} | {seconds(d[3])} | |")
    print(f"| used_memory within 4 MB of the start after | {seconds(p[4])} | {seconds(d[4])} | |")
    print(f"| DBSIZE at the end | {p[5]:,} | {d[5]:,} | |")
    print(f"| used_memory above the start at the end | {p[6] / MB:,.2f} MB | {d[6] / MB:,.2f} MB "
          f"| |")
    for i, measure in ((3, "seconds until DBSIZE 0"), (4, "seconds until used_memory back")):
        row("release", measure, p[i] if p[i] is not None else float("nan"),
            d[i] if d[i] is not None else float("nan"), "s")
    row("release", "used_memory above the start at the end", p[6], d[6], "bytes")


@section
def lapse(n):
    print(f"\n## {n:,} projects whose locks lapse together, beside {n:,} keys with a PX TTL\n")
    print("| measure | pathlock | PX TTL keys | ratio |")
    print("|---|---:|---:|---:|")
    figures = {}
    for system in SYSTEMS:
        server, c = start_server()
        try:
            start = server.used_memory()
            # A TTL well beyond the fill's time at the pace the fill section saw (a loaded
            # machine's pace varies by half from one fill to the next), so that nothing lapses
            # before the server sleeps.
            # Without the fill section (PROJECTS_SECTIONS=lapse), 10 us a project: two to three
            # times the pace of fills seen at load 1 to 15 (3.0 to 8.5 s for 1,000,000).
            pace = FILL_PACE[-1] if FILL_PACE else 1e-5
            ttl = max(5000, int(n * pace * 2500) + 2000)
            t = time.perf_counter()
            pipe(server, (system.take(i, ttl) for i in range(n)))
            took = time.perf_counter() - t
            if took * 1000 > ttl:
                print(f"(the fill took {took:.1f} s, longer than the TTL of {ttl} ms: some "
                      "lapsed before the server slept)")
            c.call("LATENCY", "RESET")
            c.call("SLOWLOG", "RESET")
            watch = Pinger(server.port)
            # The server sleeps through every deadline, so all of them are due when it wakes.
            c.call("DEBUG", "SLEEP", f"{ttl / 1000 + 0.2:.3f}")
            woke = time.monotonic()
            watch.count_from(woke)
            c.call("SLOWLOG", "RESET")
            gone = lambda: info_int(c, "pathlock", "pathlock_locks") == 0
            t = time.perf_counter()
            locks_gone = empty = None
            while time.perf_counter() - t < FOLLOW_SECONDS:
                if locks_gone is None and gone():
                    locks_gone = time.perf_counter() - t
                if c.call("DBSIZE") == 0:
                    empty = time.perf_counter() - t
                    if locks_gone is None and gone():
                        locks_gone = empty
                    break
                time.sleep(0.02)
            after = settle(server, c, start, gone)
            figures[system.name] = {
                "locks_gone": locks_gone,
                "empty": empty,
                "dbsize": after[2],
                "above": after[3] - start,
                "tick_us": info_int(c, "pathlock", "pathlock_cycle_longest_us", -1),
                "tick_cpu_us": info_int(c, "pathlock", "pathlock_cycle_longest_cpu_us", -1),
                "own_us": info_int(c, "pathlock", "pathlock_cycle_own_longest_us", -1),
                "own_cpu_us": info_int(c, "pathlock", "pathlock_cycle_own_longest_cpu_us", -1),
                "own_over_1ms": info_int(c, "pathlock", "pathlock_total_cycles_own_over_1ms", -1),
                "ticks": info_int(c, "pathlock", "pathlock_total_cycles", -1),
                "ticks_over_1ms": info_int(c, "pathlock", "pathlock_total_cycles_over_1ms", -1),
                "cycle_ms": latency_ms(c, "pathlock-cycle"),
                "expire_ms": latency_ms(c, "expire-cycle"),
                "slowest": slow_log(c),
                "ping_ms": watch.worst_ms(),
            }
        finally:
            server.stop()
    p, s = figures[PATHLOCK.name], figures[SET_NX.name]
    print(f"| locks gone after | {seconds(p['locks_gone'])} | | |")
    print(f"| DBSIZE 0 after | {seconds(p['empty'])} | {seconds(s['empty'])} | |")
    row("lapse", "seconds until DBSIZE 0",
        p["empty"] if p["empty"] is not None else float("nan"),
        s["empty"] if s["empty"] is not None else float("nan"), "s")
    print(f"| DBSIZE at the end | {p['dbsize']:,} | {s['dbsize']:,} | |")
    print(f"| used_memory above the start at the end | {p['above'] / MB:,.2f} MB | "
          f"{s['above'] / MB:,.2f} MB | |")
    row("lapse", "used_memory above the start at the end", p["above"], s["above"], "bytes")
    tick = p["tick_us"] if p["tick_us"] >= 0 else p["cycle_ms"] * 1000
    shown = f"{tick:,} us" if p["tick_us"] >= 0 else f"{p['cycle_ms']} ms (latency monitor)"
    ratio = row("lapse", "worst tick: pathlock's (us) / Redis's expire-cycle (us)", tick,
                s["expire_ms"] * 1000, "us")
    print(f"| worst tick: pathlock-cycle / Redis's expire-cycle | {shown} | "
          f"{s['expire_ms']} ms | {ratio:.2f} |")
    if p["tick_cpu_us"] >= 0:
        print(f"| longest pathlock tick in CPU time | {p['tick_cpu_us']:,} us | | |")
        row("lapse", "longest pathlock tick in CPU time", p["tick_cpu_us"], 0, "us")
    if p["ticks_over_1ms"] >= 0:
        print(f"| pathlock ticks over 1 ms (of all) | {p['ticks_over_1ms']:,} of {p['ticks']:,} "
              "| | |")
        row("lapse", "pathlock ticks over 1 ms", p["ticks_over_1ms"], p["ticks"], "ticks")
    # The module's own work in a tick: its time less its calls into the server (the key table,
    # replication, the allocator), beside the whole tick's above.
    if p["own_cpu_us"] >= 0:
        print(f"| longest pathlock tick's own work: CPU (wall) | {p['own_cpu_us']:,} us "
              f"({p['own_us']:,} us) | | |")
        row("lapse", "longest pathlock tick's own work in CPU time", p["own_cpu_us"],
            p["tick_cpu_us"], "us")
        row("lapse", "longest pathlock tick's own work in wall time", p["own_us"], p["tick_us"],
            "us")
        print(f"| pathlock ticks over 1 ms of own CPU (of all) | {p['own_over_1ms']:,} of "
              f"{p['ticks']:,} | | |")
        row("lapse", "pathlock ticks over 1 ms of own CPU", p["own_over_1ms"], p["ticks"],
            "ticks")
    print(f"| latency monitor: pathlock-cycle / expire-cycle | {p['cycle_ms']} ms | "
          f"{s['expire_ms']} ms | |")
    print(f"| slowest command meanwhile | {p['slowest'][0]:,} us | {s['slowest'][0]:,} us | |")
    ratio = row("lapse", "worst PING meanwhile", p["ping_ms"], s["ping_ms"], "ms")
    print(f"| worst PING meanwhile | {p['ping_ms']:.1f} ms | {s['ping_ms']:.1f} ms | "
          f"{ratio:.2f} |")


# The longest note `pathlock.max-note-bytes` allows by default.
NOTE = ("moved by alice to /archive/2024; ask in #storage before taking these locks. " * 4)[:256]


def tokens(n, seed):
    """`n` canonical UUID v4 strings (`PROJECTS_TOKEN_BYTES` long), the same for the same seed:
    what clients send as tokens; or, for fewer than 36 bytes, short tokens of that length."""
    if TOKEN_BYTES < 36:
        return [f"t{i:0{TOKEN_BYTES - 1}d}" for i in range(n)]
    rng = random.Random(seed)
    ids = [str(uuid.UUID(int=rng.getrandbits(128), version=4)) for _ in range(n)]
    if TOKEN_BYTES <= 36:
        return ids
    extra = TOKEN_BYTES - 36
    return [t + f"{rng.getrandbits(4 * extra):0{extra}x}" for t in ids]


def settled(server):
    """`used_memory` once it holds still: the keyspace's tables grow by doubling and move their
    entries a step at a time, and both tables count until the server's cron has finished."""
    last = server.used_memory()
    for _ in range(40):
        time.sleep(0.25)
        now = server.used_memory()
        if now == last:
            break
        last = now
    return last


def memory_usage(server, keys):
    """The sum of MEMORY USAGE over `keys`, sent a thousand at a time on one connection."""
    c = Client(server.port)
    total = 0
    for start in range(0, len(keys), 1000):
        batch = keys[start:start + 1000]
        c.sock.sendall(b"".join(b"*3\r\n$6\r\nMEMORY\r\n$5\r\nUSAGE\r\n$%d\r\n%s\r\n"
                                % (len(k), k.encode()) for k in batch))
        total += sum(c.reply() for _ in batch)
    c.sock.close()
    return total


def rise(warm, *phases, keys=None):
    """A fresh server's `used_memory` after each of `phases` (commands), less what it was after
    `warm` (one command on a key of its own, so that what the first command of its kind
    allocates once for the whole server counts in neither), and the sum of MEMORY USAGE over
    `keys` when given."""
    server = Server(binary=SERVER)
    renice(server.proc.pid)
    try:
        pipe(server, [warm])
        start = settled(server)
        rises = []
        for commands in phases:
            pipe(server, commands)
            rises.append(settled(server) - start)
        usage = memory_usage(server, keys) if keys else None
        return rises, usage
    finally:
        server.stop()


WARM_PATHLOCK = ("PATHLOCK.ACQUIRE", "warm", "TOKEN", "warm", "TTL", LONG_TTL, "WRITE",
                 "/warm")
WARM_SET = ("SET", "warm", "warm", "NX", "PX", LONG_TTL)


def acquire(key, token, path, note=None):
    extra = ("NOTE", note) if note is not None else ()
    return ("PATHLOCK.ACQUIRE", key, "TOKEN", token, "TTL", LONG_TTL, *extra, "WRITE", path)


def spread_path(i):
    return f"/d{i % 1000}/f{i}"


@section
def memory(n):
    # The one-project tables hold `PROJECTS_MEMORY_LOCKS` locks (default `PROJECTS`), so that a
    # run of ten million projects need not put ten million locks into one key three times more.
    m = int(os.environ.get("PROJECTS_MEMORY_LOCKS", n))
    ids = tokens(max(n, m), 36)
    keys = [key(i) for i in range(n)]

    print(f"\n## Memory: {n:,} projects of one lock, beside {n:,} SET NX PX keys\n")
    print("| measure | pathlock | SET NX PX | ratio |")
    print("|---|---:|---:|---:|")
    (p,), usage = rise(WARM_PATHLOCK,
                       (acquire(keys[i], ids[i], "/A/doc.txt") for i in range(n)), keys=keys)
    (s,), _ = rise(WARM_SET,
                   (("SET", keys[i], ids[i], "NX", "PX", LONG_TTL) for i in range(n)))
    ratio = row("memory", "used_memory per key, one lock", p / n, s / n, "bytes")
    print(f"| used_memory per key | {p / n:,.1f} B | {s / n:,.1f} B | {ratio:.2f} |")
    ratio = row("memory", "MEMORY USAGE / used_memory rise, projects of one lock", usage, p,
                "bytes")
    print(f"| MEMORY USAGE summed, of the rise | {usage / n:,.1f} B per key | | {ratio:.3f} |",
          flush=True)

    print("\n## Memory: one project's further locks, beside SET NX PX keys\n")
    print("| locks | pathlock, per lock beyond the first | SET NX PX, per key | ratio | "
          "MEMORY USAGE of the project, of the rise |")
    print("|---:|---:|---:|---:|---:|")
    for locks in sorted({min(1000, m), m}):
        (one, whole), usage = rise(
            WARM_PATHLOCK, [acquire("big", ids[0], spread_path(0))],
            (acquire("big", ids[i], spread_path(i)) for i in range(1, locks)), keys=["big"])
        (s,), _ = rise(WARM_SET, (("SET", f"lock:{spread_path(i)}", ids[i], "NX", "PX", LONG_TTL)
                                  for i in range(locks)))
        per, base = (whole - one) / max(1, locks - 1), s / locks
        ratio = row("memory", f"used_memory per further lock at {locks:,}", per, base, "bytes")
        usage_ratio = row("memory", f"MEMORY USAGE / used_memory rise, {locks:,} locks", usage,
                          whole, "bytes")
        print(f"| {locks:,} | {per:,.1f} B | {base:,.1f} B | {ratio:.2f} | {usage_ratio:.3f} |",
              flush=True)

    print(f"\n## Memory: {m:,} locks of one token, each ACQUIRE with the same 256-byte note\n")
    print("| measure | with the note | without | difference |")
    print("|---|---:|---:|---:|")
    (with_note,), usage = rise(
        WARM_PATHLOCK, (acquire("big", ids[0], spread_path(i), NOTE) for i in range(m)),
        keys=["big"])
    (without,), _ = rise(WARM_PATHLOCK,
                         (acquire("big", ids[0], spread_path(i)) for i in range(m)))
    row("memory", f"used_memory, {m:,} locks of one token with a 256-byte note", with_note,
        without, "bytes")
    print(f"| used_memory rise | {with_note:,} B | {without:,} B | {with_note - without:+,} B "
          f"({(with_note - without) / m:+.2f} B per lock) |")
    ratio = row("memory", "MEMORY USAGE / used_memory rise, one token with a note", usage,
                with_note, "bytes")
    print(f"| MEMORY USAGE of the project, of the rise | {ratio:.3f} | | |", flush=True)


@section
def waiters(_n):
    """bench/waits.py's memory case on a server of its own (see the top of this file); its rows
    join bench/projects.csv."""
    python = os.environ.get("PROJECTS_WAITS_PYTHON",
                            os.path.join(ROOT, ".venv-py", "bin", "python"))
    count = os.environ.get("PROJECTS_WAITERS", "10000")
    print(f"\n## waiters: {int(count):,} waiting clients\n", flush=True)
    with tempfile.NamedTemporaryFile(prefix="pathlock-waiters-", suffix=".csv") as f:
        env = dict(os.environ, WAITS_SIZES="", WAITS_MIXED="0", WAITS_MEMORY=count,
                   WAITS_MEMORY_ROWS=f.name)
        subprocess.run([python, os.path.join(ROOT, "bench", "waits.py")], env=env, check=True)
        with open(f.name, newline="") as rows:
            for section_name, measure, value, baseline, _, unit in csv.reader(rows):
                row(section_name, measure, float(value),
                    float(baseline) if baseline else None, unit)


@section
def whole_key(n):
    """Whole-key operations of one big project beside a hash of as many fields: DUMP (time,
    size), RESTORE, DEL, DEBUG RELOAD, fork, a replica's full sync, MIGRATE. The section is
    bench/whole_key.py's (`make bench-whole-key` runs it alone); its size is WHOLE_KEY_LOCKS
    (default 1,000,000) and its rounds WHOLE_KEY_ROUNDS, not PROJECTS."""
    import whole_key as measured
    rows = []
    measured.whole_key(rows)
    for _, measure, value, baseline, _ in rows:
        name, unit = measure.rsplit(" (", 1)
        row("whole-key", name, value, baseline, unit.rstrip(")"))


def main():
    chosen = os.environ.get("PROJECTS_SECTIONS")
    names = chosen.split(",") if chosen else [s.__name__ for s in SECTIONS]
    unknown = set(names) - {s.__name__ for s in SECTIONS}
    if unknown:
        sys.exit(f"unknown sections: {', '.join(sorted(unknown))}")
    version = subprocess.run([SERVER, "--version"], capture_output=True, text=True).stdout
    print(f"{version.split(' sha=')[0]}{' (SCHED_FIFO)' if FIFO else ''}; {os.cpu_count()} "
          f"cores ({platform.machine()}), load average {os.getloadavg()[0]:.1f}; "
          f"PROJECTS={PROJECTS:,}")
    throttling = lift_rt_throttling() if FIFO else None
    try:
        for s in SECTIONS:
            if s.__name__ in names:
                s(PROJECTS)
    finally:
        stop_filled()
        restore_rt_throttling(throttling)
    with open(os.path.join(ROOT, "bench", "projects.csv"), "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["section", "measure", "value", "baseline", "ratio", "unit"])
        writer.writerows(ROWS)


if __name__ == "__main__":
    main()
