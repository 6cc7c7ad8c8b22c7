"""Latency at any size: the longest pause of the server while one project grows to 10,000,000
locks, is copied, has half its locks released and the other half expire, side by side with the
same work done with SET NX PX on one key per lock.

For each system, on a fresh redis-server with `latency-monitor-threshold 1`:

  - grow: the locks are written through `redis-cli --pipe`, in batches of 100,000;
  - copy (pathlock only): `COPY` of the whole project, then `DEL` of the copy; the copy shares
    the project's storage, so both cost a step per chunk of it (bench/copy_pause.py measures
    COPY and the writes after it on their own);
  - release: half the locks are released one by one (`PATHLOCK.RELEASE`; `DEL` for SET);
  - expire: the other half are renewed to 1 ms (`PATHLOCK.RENEW`; `PEXPIRE` for SET), and the
    server reclaims them while another client keeps acquiring new paths in the same project (so
    both the expiry cycle and commands' lazy reclamation run);
  - lazy: half as many locks again, one owner each, are taken (not measured) with leases that
    all end at the same moment, and from just before it a client hammers the project with
    pipelined commands for `LATENCY_LAZY_SECONDS` (default 5): new paths, paths whose lease has
    just lapsed (taken by another token), and the lapsed owners renewing and releasing. The
    commands meet the whole mass expiry before the expiry cycle has reclaimed it (SET NX meets
    keys Redis has not expired yet the same way).

Reported per phase: the worst event of the latency monitor (`LATENCY LATEST`, reset between
phases) and the worst round trip of a separate client sending `PING` every millisecond. The
pinger is a process of its own, but on a shared two-core machine its figures also include the
time the operating system did not run it; the latency monitor measures the server alone.

Writes bench/latency.csv and bench/latency.png (the pinger's worst round trip per batch, and the
latency monitor's events, against locks held). `make bench-latency` runs it; knobs:
`LATENCY_LOCKS` (default 10,000,000), `LATENCY_SYSTEMS` (default `pathlock,set-nx`),
`LATENCY_PHASES` (default `grow,copy,release,expire,lazy`; `lazy` alone needs no growth),
`LATENCY_NICE` (default -10: the server and the pinger run ahead of the machine's other
processes when the user may raise priority).
"""

import csv
import multiprocessing
import os
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench import ROOT, Server  # noqa: E402

LOCKS = int(os.environ.get("LATENCY_LOCKS", "10000000"))
SYSTEMS = os.environ.get("LATENCY_SYSTEMS", "pathlock,set-nx").split(",")
PHASES = os.environ.get("LATENCY_PHASES", "grow,copy,release,expire,lazy").split(",")
LAZY_SECONDS = float(os.environ.get("LATENCY_LAZY_SECONDS", "5"))
BATCH = 100_000
LONG_TTL = 3_600_000
# The server and the pinger run at this nice level when allowed, so that what other processes
# of a shared machine do shows less in the figures; both systems get the same.
NICE = int(os.environ.get("LATENCY_NICE", "-10"))


# With LATENCY_FIFO=1 they run under SCHED_FIFO instead (root only), which no ordinary process
# preempts: the figures then show the server's own pauses, not the machine's load.
FIFO = os.environ.get("LATENCY_FIFO") == "1"
# Linux lets real-time tasks run at most `sched_rt_runtime_us` of each second (950 ms by
# default) and then stops them for the rest: a server busy under SCHED_FIFO for a whole second,
# as in the grow phase, then stalls for up to 50 ms, and SET NX showed the same 41-49 ms stalls
# as pathlock. With FIFO the run lifts that limit (-1) and puts it back at the end.
RT_RUNTIME = "/proc/sys/kernel/sched_rt_runtime_us"


def lift_rt_throttling():
    """Returns the limit to put back, or None when it could not be changed."""
    try:
        with open(RT_RUNTIME) as f:
            old = f.read().strip()
        with open(RT_RUNTIME, "w") as f:
            f.write("-1")
        return old
    except OSError:
        print("  (could not lift the real-time throttling: stalls of up to 50 ms may show)")
        return None


def restore_rt_throttling(old):
    if old is not None:
        with open(RT_RUNTIME, "w") as f:
            f.write(old)


def renice(pid):
    try:
        if FIFO:
            os.sched_setscheduler(pid, os.SCHED_FIFO, os.sched_param(10))
        else:
            os.setpriority(os.PRIO_PROCESS, pid, NICE)
    except OSError:
        pass
PROJECT = b"lat:proj"


def token(i):
    # A canonical UUID, as ACQUIRE generates: the table keeps it in 16 bytes.
    return b"%08x-0000-4000-8000-%012x" % (i & 0xFFFFFFFF, i)


def path(i):
    # As bench.py's held paths: a thousand folders, ten thousand files each at 10,000,000.
    return b"/d%d/f%d" % (i % 1000, i)


def command(*args):
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)


def grow_command(system, i):
    if system == "pathlock":
        return command(b"PATHLOCK.ACQUIRE", PROJECT, b"TOKEN", token(i), b"TTL", b"%d" % LONG_TTL,
                       b"WRITE", path(i))
    return command(b"SET", b"lock:" + path(i), token(i), b"NX", b"PX", b"%d" % LONG_TTL)


def release_command(system, i):
    if system == "pathlock":
        return command(b"PATHLOCK.RELEASE", PROJECT, token(i))
    return command(b"DEL", b"lock:" + path(i))


def expire_command(system, i):
    if system == "pathlock":
        return command(b"PATHLOCK.RENEW", PROJECT, token(i), b"1")
    return command(b"PEXPIRE", b"lock:" + path(i), b"1")


def lazy_command(system, i, ttl):
    if system == "pathlock":
        return command(b"PATHLOCK.ACQUIRE", PROJECT, b"TOKEN", token(i), b"TTL", ttl, b"WRITE",
                       path(i))
    return command(b"SET", b"lock:" + path(i), token(i), b"NX", b"PX", ttl)


def lazy_burst_command(system, kind, k, lapsed):
    """One command of the lazy phase: a new path, a lapsed lease's path taken by another token,
    or the lapsed owner renewing or releasing."""
    new = b"/new/n%d" % k
    if system == "pathlock":
        return [command(b"PATHLOCK.ACQUIRE", PROJECT, b"TTL", b"60000", b"WRITE", new),
                command(b"PATHLOCK.ACQUIRE", PROJECT, b"TTL", b"60000", b"WRITE", path(lapsed)),
                command(b"PATHLOCK.RENEW", PROJECT, token(lapsed), b"60000"),
                command(b"PATHLOCK.RELEASE", PROJECT, token(lapsed))][kind]
    return [command(b"SET", b"lock:" + new, token(k), b"NX", b"PX", b"60000"),
            command(b"SET", b"lock:" + path(lapsed), token(k), b"NX", b"PX", b"60000"),
            command(b"PEXPIRE", b"lock:" + path(lapsed), b"60000"),
            command(b"DEL", b"lock:" + path(lapsed))][kind]


class Replies:
    """Reads whole RESP replies off a socket, to keep a pipelined client in step."""

    def __init__(self, sock):
        self.sock = sock
        self.buffer = b""

    def line(self):
        while b"\r\n" not in self.buffer:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise RuntimeError("connection closed")
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\r\n", 1)
        return line

    def read(self):
        line = self.line()
        kind, rest = line[:1], line[1:]
        if kind == b"-":
            raise RuntimeError(rest.decode(errors="replace"))
        if kind == b"$" and int(rest) >= 0:
            while len(self.buffer) < int(rest) + 2:
                self.buffer += self.sock.recv(65536)
            self.buffer = self.buffer[int(rest) + 2:]
        elif kind == b"*":
            for _ in range(max(0, int(rest))):
                self.read()


def pipe(port, data):
    out = subprocess.run(["redis-cli", "-p", str(port), "--pipe"], input=data,
                         capture_output=True, check=True).stdout.decode()
    if "errors: 0," not in out:
        raise RuntimeError(out)


def ping_loop(port, stop, results):
    """Sends PING every millisecond and records (wall time, round trip in ms)."""
    renice(0)
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    samples = []
    while not stop.is_set():
        started = time.perf_counter()
        sock.sendall(b"*1\r\n$4\r\nPING\r\n")
        reply = b""
        while not reply.endswith(b"\r\n"):
            reply += sock.recv(64)
        samples.append((time.time(), (time.perf_counter() - started) * 1000))
        time.sleep(0.001)
    results.put(samples)


class Run:
    def __init__(self, system):
        self.system = system
        self.server = Server()
        self.port = self.server.port
        renice(self.server.proc.pid)
        self.server.cli("CONFIG", "SET", "latency-monitor-threshold", "1")
        # The slow log names the command behind a pause: everything over 1 ms.
        self.server.cli("CONFIG", "SET", "slowlog-log-slower-than", "1000")
        self.server.cli("CONFIG", "SET", "slowlog-max-len", "10000")
        self.stop = multiprocessing.Event()
        self.results = multiprocessing.Queue()
        self.pinger = multiprocessing.Process(target=ping_loop,
                                              args=(self.port, self.stop, self.results))
        self.pinger.start()
        self.phases = []  # (name, start, end, worst latency-monitor event ms)
        self.timeline = []  # (wall time, locks held) after each batch of the growth
        self.events = []  # (wall time, ms) from LATENCY HISTORY during the growth
        self.memory = {}

    def worst_event(self):
        latest = self.server.cli("LATENCY", "LATEST").split("\n")
        # Rows of four lines: event, time, latest ms, max ms.
        worst = max((int(latest[i + 3]) for i in range(0, len(latest) - 3, 4)), default=0)
        names = [latest[i] for i in range(0, len(latest) - 3, 4)]
        return worst, names

    def history(self):
        out = self.server.cli("LATENCY", "HISTORY", "command").split("\n")
        return [(int(out[i]), int(out[i + 1])) for i in range(0, len(out) - 1, 2) if out[i]]

    def slowest(self):
        """The slowest command the slow log kept since it was reset: (microseconds, words)."""
        import redis
        client = redis.Redis(port=self.port)
        entries = client.slowlog_get(10000)
        client.slowlog_reset()
        client.close()
        if not entries:
            return 0, ""
        if os.environ.get("LATENCY_DEBUG"):
            for e in entries:
                if e["duration"] > 2000:
                    print("    slow:", e["duration"], e["command"][:80])
        worst = max(entries, key=lambda e: e["duration"])
        words = worst["command"]
        words = words.decode(errors="replace") if isinstance(words, bytes) else str(words)
        return worst["duration"], words[:60]

    def phase(self, name, work):
        self.slowest()
        self.server.cli("LATENCY", "RESET")
        start = time.time()
        work()
        end = time.time()
        worst, names = self.worst_event()
        slow_us, slow_words = self.slowest()
        self.phases.append((name, start, end, worst, names, slow_us, slow_words))
        print(f"  {self.system:8} {name:8} {end - start:7.1f} s  latency monitor worst "
              f"{worst} ms {names}; slowest command {slow_us} us: {slow_words}", flush=True)

    def used_memory(self):
        info = self.server.cli("INFO", "memory")
        values = dict(l.split(":", 1) for l in info.splitlines() if ":" in l)
        return int(values["used_memory"]), int(values["used_memory_peak"])

    def grow(self):
        self.server.cli("MEMORY", "PURGE", check=False)
        self.memory["base"] = self.used_memory()[0]
        for first in range(0, LOCKS, BATCH):
            last = min(first + BATCH, LOCKS)
            pipe(self.port, b"".join(grow_command(self.system, i) for i in range(first, last)))
            self.timeline.append((time.time(), last))
            if last == 1_000_000:
                self.server.cli("MEMORY", "PURGE", check=False)
                self.memory["at_1m"] = self.used_memory()[0]
        self.events = self.history()
        self.memory["at_end"] = self.used_memory()[0]

    def copy(self):
        started = time.perf_counter()
        self.server.cli("COPY", PROJECT.decode(), "lat:copy")
        self.memory["copy_ms"] = (time.perf_counter() - started) * 1000
        started = time.perf_counter()
        self.server.cli("DEL", "lat:copy")
        self.memory["del_copy_ms"] = (time.perf_counter() - started) * 1000

    def release(self):
        for first in range(0, LOCKS, 2 * BATCH):
            last = min(first + 2 * BATCH, LOCKS)
            pipe(self.port, b"".join(release_command(self.system, i)
                                     for i in range(first, last, 2)))

    def expire(self):
        for first in range(1, LOCKS, 2 * BATCH):
            last = min(first + 2 * BATCH, LOCKS)
            pipe(self.port, b"".join(expire_command(self.system, i)
                                     for i in range(first, last, 2)))
        # Another client keeps working on the project while the server reclaims.
        sock = socket.create_connection(("127.0.0.1", self.port))
        n = LOCKS
        deadline = time.time() + 600
        while time.time() < deadline:
            for _ in range(20):
                n += 1
                sock.sendall(command(b"SET", b"lock:" + path(n), token(n), b"NX", b"PX", b"1")
                             if self.system == "set-nx" else
                             command(b"PATHLOCK.ACQUIRE", PROJECT, b"TTL", b"1", b"WRITE",
                                     path(n)))
                sock.recv(256)
                time.sleep(0.005)
            if self.held() <= 1:
                break
        sock.close()

    def lazy_setup(self):
        """Takes LOCKS / 2 locks, one owner each, whose leases all end at one moment, planned
        from how fast this server takes them; returns that moment (wall time) and the count."""
        count = LOCKS // 2
        first = 10 * LOCKS
        # A probe batch of 1 ms leases (the cycle takes them back) times this server's pace;
        # the leases then end when the rest should be in, with half again as margin.
        probe = min(BATCH, count)
        started = time.time()
        pipe(self.port, b"".join(lazy_command(self.system, i, b"1")
                                 for i in range(first - probe, first)))
        rate = probe / max(time.time() - started, 1e-3)
        ends = time.time() + 1.5 * count / rate + 3
        for lo in range(first, first + count, BATCH):
            hi = min(lo + BATCH, first + count)
            ttl = b"%d" % max(1, int((ends - time.time()) * 1000))
            pipe(self.port, b"".join(lazy_command(self.system, i, ttl) for i in range(lo, hi)))
        return ends, first, count

    def lazy(self, ends, first, count):
        """From just before the leases end, pipelined bursts of commands on the project."""
        sock = socket.create_connection(("127.0.0.1", self.port))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        reader = Replies(sock)
        time.sleep(max(0.0, ends - time.time() - 0.05))
        stop = time.time() + LAZY_SECONDS
        k = 0
        while time.time() < stop:
            burst = []
            for _ in range(100):
                k += 1
                lapsed = first + (k * 7919) % count
                burst.append(lazy_burst_command(self.system, k % 4, k, lapsed))
            sock.sendall(b"".join(burst))
            for _ in burst:
                reader.read()
            time.sleep(0.002)
        sock.close()
        self.memory["lazy_commands"] = k

    def held(self):
        if self.system == "pathlock":
            info = self.server.cli("INFO", "pathlock")
            return int(info.split("pathlock_locks:")[1].split()[0])
        return int(self.server.cli("DBSIZE"))

    def finish(self):
        self.stop.set()
        samples = self.results.get(timeout=60)
        self.pinger.join(timeout=30)
        self.memory["peak"] = self.used_memory()[1]
        self.server.stop()
        rows = []
        for name, start, end, worst, names, slow_us, slow_words in self.phases:
            pings = [rtt for t, rtt in samples if start <= t <= end]
            rows.append({"system": self.system, "phase": name, "seconds": round(end - start, 1),
                         "latency_monitor_worst_ms": worst,
                         "latency_monitor_events": " ".join(names),
                         "worst_ping_ms": round(max(pings, default=0), 2),
                         "slowest_command_us": slow_us, "slowest_command": slow_words,
                         "pings": len(pings)})
        return rows, samples


def per_batch(timeline, samples):
    """The worst PING during each batch of the growth, against the locks held after it."""
    points = []
    previous = timeline[0][0] - 1e9 if timeline else 0
    for when, held in timeline:
        rtts = [rtt for t, rtt in samples if previous < t <= when]
        if rtts:
            points.append((held, max(rtts)))
        previous = when
    return points


def held_at(timeline, when):
    for t, held in timeline:
        if t >= when:
            return held
    return timeline[-1][1] if timeline else 0


def chart(curves, path_png):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 5.5))
    for label, points, style in curves:
        if points:
            ax.plot([p[0] for p in points], [p[1] for p in points], style, label=label,
                    markersize=4)
    ax.axhline(2, color="grey", linestyle=":", label="2 ms")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("locks held")
    ax.set_ylabel("ms")
    ax.set_title(f"Worst pause while one project grows to {LOCKS:,} locks")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path_png, dpi=110)


def main():
    if not os.path.exists(os.environ.get("PATHLOCK_MODULE", "")) and not os.path.exists(
            os.path.join(ROOT, "target/release/libpathlock.so")):
        sys.exit("build the module first: make build")
    all_rows, curves, memory = [], [], {}
    throttling = lift_rt_throttling() if FIFO else None
    try:
        run_all(all_rows, curves, memory)
    finally:
        restore_rt_throttling(throttling)
    report(all_rows, curves, memory)


def run_all(all_rows, curves, memory):
    for system in SYSTEMS:
        print(f"{system}: {LOCKS:,} locks", flush=True)
        run = Run(system)
        try:
            if "grow" in PHASES:
                run.phase("grow", run.grow)
                if system == "pathlock" and "copy" in PHASES:
                    run.phase("copy", run.copy)
                if "release" in PHASES:
                    run.phase("release", run.release)
                if "expire" in PHASES:
                    run.phase("expire", run.expire)
            if "lazy" in PHASES:
                ends, first, count = run.lazy_setup()
                run.phase("lazy", lambda: run.lazy(ends, first, count))
        finally:
            rows, samples = run.finish()
        all_rows += rows
        memory[system] = run.memory
        curves.append((f"{system}: worst PING per batch", per_batch(run.timeline, samples),
                       "-"))
        curves.append((f"{system}: latency monitor events",
                       [(held_at(run.timeline, t), ms) for t, ms in run.events], "o"))


def report(all_rows, curves, memory):
    out = os.path.join(ROOT, "bench", "latency.csv")
    with open(out, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(all_rows[0]))
        writer.writeheader()
        writer.writerows(all_rows)
    chart(curves, os.path.join(ROOT, "bench", "latency.png"))
    print("\n| system | phase | seconds | latency monitor worst (ms) | worst PING (ms) "
          "| slowest command (ms) |")
    print("|---|---|---:|---:|---:|---|")
    for r in all_rows:
        print(f"| {r['system']} | {r['phase']} | {r['seconds']} | "
              f"{r['latency_monitor_worst_ms']} | {r['worst_ping_ms']} | "
              f"{r['slowest_command_us'] / 1000:.1f} `{r['slowest_command'][:30]}` |")
    for system, m in memory.items():
        if "lazy_commands" in m:
            print(f"{system}: {m['lazy_commands']:,} commands in the lazy phase")
        if "base" not in m:
            continue
        at_1m = m.get("at_1m", 0) - m["base"]
        at_end = m.get("at_end", 0) - m["base"]
        print(f"{system}: used memory at 1,000,000 locks: {at_1m / 1e6:.1f} B/lock; at "
              f"{LOCKS:,}: {at_end / LOCKS:.1f} B/lock; peak (with COPY's) {m['peak'] / 1e6:.1f} MB"
              + (f"; COPY {m['copy_ms']:.0f} ms, DEL of the copy {m['del_copy_ms']:.0f} ms"
                 if "copy_ms" in m else ""))


if __name__ == "__main__":
    main()
