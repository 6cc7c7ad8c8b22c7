"""Every owner and every mountain: what a command costs when its token holds a million locks,
when a million leases just lapsed under the path it asks for, and whether memory comes back
after a mass release, each beside a baseline measured in the same run.

  1. one token holding OWNERS_LOCKS locks (paths /d<i % 1000>/f<i>): the server time of its
     next ACQUIRE (a new path, and WRITE on a folder of its own locks), CHECK, RELEASE of one
     path and RENEW, beside another token's holding one lock in the same project (the mean of
     OWNERS_CALLS calls from INFO commandstats); taking the locks one by one under one token,
     beside one token
     each (total server time of the ACQUIREs, INFO commandstats); its RELEASE of everything
     and its expiry: the command's time, the worst event of the latency monitor and the worst
     PING round trip while the locks are freed in the background, and how long that takes;
  2. OWNERS_LOCKS one-lock owners whose leases all lapsed: ACQUIRE WRITE / and ACQUIRE WRITE on
     one folder (with a live lock elsewhere), beside the same on an empty project;
  3. OWNERS_MEMORY_LOCKS locks taken and released (one token each, then one token for all):
     used_memory before, while held (beside MEMORY USAGE of the key), and how far above the
     start it is 1 and 5 seconds after the last release.

`make bench-owners` runs it on a fresh redis-server per part. Figures go to stdout as
Markdown tables, and to bench/owners.csv.
"""

import csv
import multiprocessing
import os
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench import ROOT, Server  # noqa: E402

LOCKS = int(os.environ.get("OWNERS_LOCKS", "1000000"))
CALLS = int(os.environ.get("OWNERS_CALLS", "2000"))
MEMORY_LOCKS = int(os.environ.get("OWNERS_MEMORY_LOCKS", "250000"))
# How long the PING baseline watches an idle server (the background freeing takes about this long).
IDLE_SECONDS = int(os.environ.get("OWNERS_IDLE_SECONDS", "5"))
# The first lease tried for the lapsed locks of part 2, quadrupled until loading them takes less
# than 80% of it: at 10,000,000 locks each load that fails costs minutes, so a run at that size
# starts from a lease longer than its load.
LAPSE_TTL_MS = int(os.environ.get("OWNERS_LAPSE_TTL_MS", "1000"))
KEY = "owners:proj"
ROWS = []


class Client:
    """A minimal RESP client on one socket, so that the bench needs nothing but Python."""

    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.buf = b""

    def send(self, *args):
        data = b"*%d\r\n" % len(args)
        for a in args:
            a = a if isinstance(a, bytes) else str(a).encode()
            data += b"$%d\r\n%s\r\n" % (len(a), a)
        self.sock.sendall(data)

    def line(self):
        while b"\r\n" not in self.buf:
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                raise ConnectionError("closed")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def reply(self):
        line = self.line()
        kind, rest = line[:1], line[1:]
        if kind in (b"+", b"-"):
            if kind == b"-":
                raise RuntimeError(rest.decode(errors="replace"))
            return rest.decode()
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            if n < 0:
                return None
            # The pieces of a long string are joined once: adding each to the buffer copied
            # it whole every time, minutes for a payload of 100 MB.
            parts, have = [self.buf], len(self.buf)
            while have < n + 2:
                chunk = self.sock.recv(1 << 20)
                if not chunk:
                    raise ConnectionError("closed")
                parts.append(chunk)
                have += len(chunk)
            buf = b"".join(parts) if len(parts) > 1 else self.buf
            data, self.buf = buf[:n], buf[n + 2:]
            return data
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self.reply() for _ in range(n)]
        raise RuntimeError(f"unexpected reply {line!r}")

    def call(self, *args):
        self.send(*args)
        return self.reply()

    def pipeline(self, commands, window=2000):
        """Sends commands with at most `window` unanswered; returns nothing."""
        pending = 0
        for args in commands:
            self.send(*args)
            pending += 1
            if pending >= window:
                for _ in range(window // 2):
                    self.reply()
                pending -= window // 2
        for _ in range(pending):
            self.reply()


def info(client, section, field):
    text = client.call("INFO", section).decode()
    for line in text.splitlines():
        if line.startswith(field + ":"):
            return line.split(":", 1)[1]
    return None


def command_usec(client, name):
    """Total server microseconds spent in a command so far (INFO commandstats)."""
    text = client.call("INFO", "commandstats").decode()
    for line in text.splitlines():
        if line.lower().startswith(f"cmdstat_{name.lower()}:"):
            fields = dict(kv.split("=") for kv in line.split(":", 1)[1].split(","))
            return float(fields["usec"])
    return 0.0


def timed(client, *args):
    """The server time of one command, from the slow log (which logs every command here)."""
    client.call("SLOWLOG", "RESET")
    reply = client.call(*args)
    entry = client.call("SLOWLOG", "GET", "1")[0]
    return entry[2], reply


def mean_time(client, make_args, calls=CALLS):
    """The mean server time of `calls` commands made by `make_args(k)`, from INFO commandstats
    (microseconds with three decimals, where the slow log has whole ones)."""
    name = make_args(0)[0].lower()
    before = command_usec(client, name)
    client.pipeline((make_args(k) for k in range(calls)), window=64)
    return (command_usec(client, name) - before) / calls


def row(part, measure, value, baseline, unit="us"):
    ratio = value / baseline if baseline else float("nan")
    ROWS.append((part, measure, value, baseline, ratio, unit))
    print(f"| {measure} | {value:,.2f} {unit} | {baseline:,.2f} {unit} | {ratio:.2f} |", flush=True)


def start_server():
    server = Server(extra=["--enable-debug-command", "local"])
    c = Client(server.port)
    c.call("CONFIG", "SET", "slowlog-log-slower-than", "0")
    c.call("CONFIG", "SET", "slowlog-max-len", "128")
    c.call("CONFIG", "SET", "latency-monitor-threshold", "1")
    return server, c


def ping_loop(port, stop, results):
    c = Client(port)
    worst = 0.0
    while not stop.is_set():
        t = time.perf_counter()
        c.call("PING")
        worst = max(worst, time.perf_counter() - t)
        time.sleep(0.001)
    results.put(worst * 1000)


class Watch:
    """The worst PING round trip (another process) and latency-monitor event while it runs."""

    def __init__(self, server, client):
        self.server, self.client = server, client

    def __enter__(self):
        self.client.call("LATENCY", "RESET")
        self.stop = multiprocessing.Event()
        self.results = multiprocessing.Queue()
        self.proc = multiprocessing.Process(
            target=ping_loop, args=(self.server.port, self.stop, self.results))
        self.proc.start()
        time.sleep(0.2)
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.ping_ms = self.results.get(timeout=30)
        self.proc.join()
        latest = self.client.call("LATENCY", "LATEST") or []
        self.event_ms = max((entry[3] for entry in latest), default=0)
        # The module's own ticks, as the server saw them (0: none reached the threshold).
        self.cycle_ms = max((entry[3] for entry in latest
                             if entry[0] in ("pathlock-cycle", b"pathlock-cycle")), default=0)


def path(i):
    return f"/d{i % 1000}/f{i}"


def load(client, commands):
    client.pipeline(commands)


def huge_owner():
    print(f"\n## 1. One token holding {LOCKS:,} locks, beside another token's\n")
    print("| measure | the huge owner | another token | ratio |")
    print("|---|---:|---:|---:|")
    server, c = start_server()
    try:
        t = time.perf_counter()
        before = command_usec(c, "pathlock.acquire")
        load(c, (("PATHLOCK.ACQUIRE", KEY, "TOKEN", "huge", "TTL", 3_600_000, "WRITE", path(i))
                 for i in range(LOCKS)))
        one_token = command_usec(c, "pathlock.acquire") - before
        wall_one = time.perf_counter() - t
        c.call("PATHLOCK.ACQUIRE", KEY, "TOKEN", "small", "TTL", 3_600_000, "WRITE", "/other/x")
        new = lambda k: ("PATHLOCK.ACQUIRE", KEY, "TOKEN", "huge", "TTL", 3_600_000, "WRITE",
                         f"/new/h{k}")
        new_other = lambda k: ("PATHLOCK.ACQUIRE", KEY, "TOKEN", "small", "TTL", 3_600_000,
                               "WRITE", f"/new/s{k}")
        row(1, "ACQUIRE of a new path", mean_time(c, new), mean_time(c, new_other))
        row(1, "ACQUIRE WRITE on a folder of its own locks (1,000 beneath)",
            mean_time(c, lambda k: ("PATHLOCK.ACQUIRE", KEY, "TOKEN", "huge", "TTL",
                                      3_600_000, "WRITE", f"/d{k}")),
            mean_time(c, lambda k: ("PATHLOCK.ACQUIRE", KEY, "TOKEN", "small", "TTL",
                                      3_600_000, "WRITE", "/other")))
        row(1, "CHECK TOKEN of a folder of its own locks",
            mean_time(c, lambda k: ("PATHLOCK.CHECK", KEY, "TOKEN", "huge", "WRITE",
                                      f"/d{500 + k}")),
            mean_time(c, lambda k: ("PATHLOCK.CHECK", KEY, "TOKEN", "small", "WRITE",
                                      "/other")))
        row(1, "RELEASE of one path",
            mean_time(c, lambda k: ("PATHLOCK.RELEASE", KEY, "huge", path(k))),
            mean_time(c, lambda k: ("PATHLOCK.RELEASE", KEY, "small", f"/new/s{k}")))
        row(1, "RENEW",
            mean_time(c, lambda k: ("PATHLOCK.RENEW", KEY, "huge", 3_600_000)),
            mean_time(c, lambda k: ("PATHLOCK.RENEW", KEY, "small", 3_600_000)))
        held = int(info(c, "pathlock", "pathlock_locks"))
        # The PING baseline: the same server and client with nothing to do, for as long as the
        # background usually takes, so that what the machine's scheduling adds is seen apart.
        with Watch(server, c) as idle:
            time.sleep(IDLE_SECONDS)
        print(f"\nWorst PING round trip to the same server with nothing to do for {IDLE_SECONDS} s: "
              f"{idle.ping_ms:.1f} ms; worst latency-monitor event {idle.event_ms} ms")
        with Watch(server, c) as watch:
            spent, freed = timed(c, "PATHLOCK.RELEASE", KEY, "huge")
            listed = len(c.call("PATHLOCK.LOCKS", KEY, "/d7"))
            granted = c.call("PATHLOCK.ACQUIRE", KEY, "TOKEN", "next", "WRITE", "/d7") is not None
            t = time.perf_counter()
            while int(info(c, "pathlock", "pathlock_background_keys") or 0) > 0:
                time.sleep(0.01)
            background = time.perf_counter() - t
            time.sleep(0.2)
        print(f"\nRELEASE of all {freed:,} of its locks (of {held:,} held): {spent:,} us; "
              f"right after it LOCKS of one of its folders listed {listed} and another token "
              f"was granted WRITE on it: {granted}; the background freed them in "
              f"{background:.2f} s; worst latency-monitor event {watch.event_ms} ms (its ticks: "
              f"{watch.cycle_ms} ms), worst PING round trip {watch.ping_ms:.1f} ms")
        ROWS.append((1, "RELEASE of everything", spent, 0, float("nan"), "us"))
        ROWS.append((1, "worst PING while freed (ms)", watch.ping_ms, idle.ping_ms,
                     watch.ping_ms / idle.ping_ms, "ms"))
        ROWS.append((1, "worst latency event while freed (ms)", watch.event_ms, 0, float("nan"),
                     "ms"))
        # Its expiry: the same owner again, renewed to lapse in 1 ms.
        c.call("PATHLOCK.RELEASE", KEY, "next")
        load(c, (("PATHLOCK.ACQUIRE", KEY, "TOKEN", "huge", "TTL", 3_600_000, "WRITE", path(i))
                 for i in range(LOCKS)))
        others = int(info(c, "pathlock", "pathlock_locks")) - LOCKS
        with Watch(server, c) as watch:
            c.call("PATHLOCK.RENEW", KEY, "huge", 1)
            t = time.perf_counter()
            while int(info(c, "pathlock", "pathlock_locks")) > others:
                time.sleep(0.001)
            gone = time.perf_counter() - t
            granted = c.call("PATHLOCK.ACQUIRE", KEY, "TOKEN", "after", "WRITE", "/") is None
            while int(info(c, "pathlock", "pathlock_background_keys") or 0) > 0:
                time.sleep(0.01)
            background = time.perf_counter() - t
            time.sleep(0.2)
        slowest = max(e[2] for e in c.call("SLOWLOG", "GET", "128"))
        print(f"Its expiry: the locks stopped counting {gone * 1000:.0f} ms after the lease "
              f"ended and were freed within {background:.2f} s; worst latency-monitor event "
              f"{watch.event_ms} ms (its ticks: {watch.cycle_ms} ms), worst PING "
              f"{watch.ping_ms:.1f} ms, slowest command {slowest} us")
        ROWS.append((1, "worst PING while it expired (ms)", watch.ping_ms, idle.ping_ms,
                     watch.ping_ms / idle.ping_ms, "ms"))
    finally:
        server.stop()
    # The baseline of taking them one by one: a token each.
    server, c = start_server()
    try:
        t = time.perf_counter()
        before = command_usec(c, "pathlock.acquire")
        load(c, (("PATHLOCK.ACQUIRE", KEY, "TOKEN", f"t{i}", "TTL", 3_600_000, "WRITE",
                  path(i)) for i in range(LOCKS)))
        many_tokens = command_usec(c, "pathlock.acquire") - before
        wall_many = time.perf_counter() - t
    finally:
        server.stop()
    print()
    print("| measure | one token | a token each | ratio |")
    print("|---|---:|---:|---:|")
    row(1, f"{LOCKS:,} ACQUIREs, server time", one_token / 1e6, many_tokens / 1e6, unit="s")
    row(1, f"{LOCKS:,} ACQUIREs, wall time (pipelined)", wall_one, wall_many, unit="s")


def mountain():
    print(f"\n## 2. {LOCKS:,} leases that just lapsed, beside an empty project\n")
    print("| measure | over the lapsed locks | on an empty project | ratio |")
    print("|---|---:|---:|---:|")
    # The requests, in order: WRITE / (nothing live anywhere), its release, a live lock at
    # /live, WRITE on one folder of lapsed locks, and WRITE / again (refused by /live).
    requests = [
        ("root", ("PATHLOCK.ACQUIRE", KEY, "TOKEN", "root", "WRITE", "/")),
        (None, ("PATHLOCK.RELEASE", KEY, "root")),
        (None, ("PATHLOCK.ACQUIRE", KEY, "TOKEN", "live", "TTL", 3_600_000, "WRITE", "/live")),
        ("folder", ("PATHLOCK.ACQUIRE", KEY, "TOKEN", "folder", "WRITE", "/d7")),
        ("refused", ("PATHLOCK.ACQUIRE", KEY, "TOKEN", "refused", "WRITE", "/")),
    ]
    server, c = start_server()
    try:
        ttl = LAPSE_TTL_MS
        while True:
            t = time.perf_counter()
            c.call("DEL", KEY)
            load(c, (("PATHLOCK.ACQUIRE", KEY, "TOKEN", f"t{i}", "TTL", ttl, "WRITE", path(i))
                     for i in range(LOCKS)))
            if time.perf_counter() - t < ttl / 1000 * 0.8:
                break
            ttl *= 4
        # Sleep past every deadline inside the server, then ask at once, before the expiry
        # cycle can reclaim anything: one write the server reads whole.
        c.send("DEBUG", "SLEEP", ttl / 1000 + 0.1)
        for _, args in requests:
            c.send(*args)
        c.send("SLOWLOG", "GET", str(len(requests) + 1))
        c.reply()
        replies = [c.reply() for _ in requests]
        log = c.reply()
        times = {entry[3][3]: entry[2] for entry in log if entry[3][0] == b"PATHLOCK.ACQUIRE"}
        held = int(info(c, "pathlock", "pathlock_locks"))
    finally:
        server.stop()
    server, c = start_server()
    try:
        empty = {}
        for name, args in requests:
            spent, _ = timed(c, *args)
            if name:
                empty[name] = spent
    finally:
        server.stop()
    shown = ["a grant" if r is not None else "nil" for (name, _), r in zip(requests, replies)
             if name]
    print(f"(answers: WRITE / {shown[0]}, WRITE /d7 {shown[1]}, WRITE / with /live held "
          f"{shown[2]}; {held:,} locks still stored after them)")
    for name, label in (("root", "ACQUIRE WRITE / (nothing live)"),
                        ("folder", "ACQUIRE WRITE /d7 (its 1,000 lapsed beneath, /live held)"),
                        ("refused", "ACQUIRE WRITE / refused by /live (1,000 lapsed folders)")):
        row(2, label, times.get(name.encode(), float("nan")), empty[name])


def memory():
    print(f"\n## 3. Memory: {MEMORY_LOCKS:,} locks taken and released\n")
    print("| owners | used_memory rise while held | MEMORY USAGE of the key | above the start "
          "after 1 s | after 5 s | worst PING | worst tick |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for kind in ("a token each", "one token"):
        server, c = start_server()
        try:
            c.call("PATHLOCK.ACQUIRE", KEY, "TOKEN", "keep", "WRITE", "/keep")
            start = server.used_memory()
            token = (lambda i: f"t{i}") if kind == "a token each" else (lambda i: "one")
            load(c, (("PATHLOCK.ACQUIRE", KEY, "TOKEN", token(i), "TTL", 3_600_000, "WRITE",
                      path(i)) for i in range(MEMORY_LOCKS)))
            held = server.used_memory()
            usage = c.call("MEMORY", "USAGE", KEY)
            with Watch(server, c) as watch:
                if kind == "a token each":
                    load(c, (("PATHLOCK.RELEASE", KEY, f"t{i}") for i in range(MEMORY_LOCKS)))
                else:
                    c.call("PATHLOCK.RELEASE", KEY, "one")
                released = time.perf_counter()
                time.sleep(max(0.0, 1 - (time.perf_counter() - released)))
                after_1 = server.used_memory()
                time.sleep(max(0.0, 5 - (time.perf_counter() - released)))
                after_5 = server.used_memory()
            rise = held - start
            mb = 1 << 20
            print(f"| {kind} | {rise / mb:.1f} MB | {usage / mb:.1f} MB ({usage / rise:.2f} of "
                  f"the rise) | {(after_1 - start) / mb:.2f} MB | {(after_5 - start) / mb:.2f} MB "
                  f"| {watch.ping_ms:.1f} ms | {watch.cycle_ms} ms |", flush=True)
            ROWS.append((3, f"{kind}: usage / rise", usage, rise, usage / rise, "bytes"))
            ROWS.append((3, f"{kind}: above the start after 5 s", after_5 - start, 0,
                         float("nan"), "bytes"))
        finally:
            server.stop()


def main():
    parts = os.environ.get("OWNERS_PARTS", "huge,mountain,memory").split(",")
    if "huge" in parts:
        huge_owner()
    if "mountain" in parts:
        mountain()
    if "memory" in parts:
        memory()
    with open(os.path.join(ROOT, "bench", "owners.csv"), "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["part", "measure", "value", "baseline", "ratio", "unit"])
        writer.writerows(ROWS)


if __name__ == "__main__":
    main()
