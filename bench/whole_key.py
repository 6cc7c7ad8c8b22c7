"""Whole-key operations on one big project, beside a hash with as many fields, in one run.

A project of WHOLE_KEY_LOCKS locks (default 1,000,000; paths /d<i % 1000>/f<i>, a token each,
`t<i>` as `make bench` names them, a UUID v4 as the clients make them with
WHOLE_KEY_TOKENS=uuid, or one token for all with WHOLE_KEY_OWNERS=one) and a hash with as many
fields (the same paths as fields, the tokens as values) go through the operations that take a
whole key at once:

  - DUMP: its time and the payload's size;
  - RESTORE of that payload on a second server: its time; then a DEL of the restored key
    (what MIGRATE does on the source once the target has it);
  - DEBUG RELOAD of a server holding only that key (a save and a load of its RDB), wall time;
  - MIGRATE to a second server, wall time of the command (dump, transfer, restore there, delete
    here), and the CPU time of the source and of the target apart besides their sum;
  - a replica's full sync (diskless, no delay): from REPLICAOF until the link is up and the
    replica has loaded, polled every 5 ms;
  - fork: `latest_fork_usec` of a BGSAVE, beside the server's RSS: WHOLE_KEY_FORKS forks
    (default 11) of each system, the two systems' servers taking turns, the least and the
    median of each.

Each time is given twice: the wall clock, and the CPU time the servers involved used (their
threads and the children they reaped included), which a shared machine disturbs less. Each
system runs on fresh redis-servers of its own, one after the other but for the forks,
WHOLE_KEY_ROUNDS times (default 3), and each figure is the median of its rounds. Markdown on stdout, and the rows
to bench/whole_key.csv. Run it as `python3 bench/whole_key.py` after a release build;
REDIS_SERVER picks the server binary, PATHLOCK_MODULE the module.

The section is a function of its own (`whole_key`), for `make bench-projects` to call.

`python3 bench/whole_key.py dump-turns` measures `DUMP` alone instead: one server holding the
project and one the hash, WHOLE_KEY_TURNS (default 16) `DUMP`s of each taking turns, each timed
by the CPU time of the server's main thread in nanoseconds (its `schedstat`), which neither the
clock's ticks of 10 ms nor the other server's work blur; the medians and quartiles of each.
"""

import csv
import hashlib
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench import MODULE, ROOT, free_port  # noqa: E402
from owners import Client, command_usec, info  # noqa: E402

LOCKS = int(os.environ.get("WHOLE_KEY_LOCKS", "1000000"))
ROUNDS = int(os.environ.get("WHOLE_KEY_ROUNDS", "3"))
OWNERS = os.environ.get("WHOLE_KEY_OWNERS", "each")
TOKENS = os.environ.get("WHOLE_KEY_TOKENS", "counter")
TURNS = int(os.environ.get("WHOLE_KEY_TURNS", "16"))
FORKS = int(os.environ.get("WHOLE_KEY_FORKS", "11"))
SERVER = os.environ.get("REDIS_SERVER", "redis-server")
TTL_MS = 3_600_000
KEY = "whole:proj"


class Node:
    """One redis-server with the module loaded, in a directory of its own."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="pathlock-whole-key-")
        self.port = free_port()
        self.proc = subprocess.Popen(
            [SERVER, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", self.dir,
             "--save", "", "--appendonly", "no", "--loadmodule", MODULE,
             "--enable-debug-command", "local", "--repl-diskless-sync", "yes",
             "--repl-diskless-sync-delay", "0", "--logfile", os.path.join(self.dir, "log")],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(400):
            try:
                self.c = Client(self.port)
                self.c.call("PING")
                return
            except (ConnectionError, OSError):
                time.sleep(0.025)
        raise RuntimeError("redis-server did not start")

    def cpu(self):
        """Seconds of CPU the server has used, its threads and the children it reaped (the
        fork that writes an RDB) included: on a shared machine, what the work itself cost."""
        fields = open(f"/proc/{self.proc.pid}/stat").read().rsplit(")", 1)[1].split()
        return sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")

    def stop(self):
        try:
            self.c.call("SHUTDOWN", "NOSAVE")
        except (ConnectionError, OSError, RuntimeError):
            pass
        self.proc.wait(timeout=60)
        shutil.rmtree(self.dir, ignore_errors=True)


def path(i):
    return f"/d{i % 1000}/f{i}"


def token(i):
    if OWNERS == "one":
        return "one"
    if TOKENS == "uuid":
        # Version 4 as the clients make them, its random bits a hash of `i`, so that both
        # systems and every run hold the same tokens.
        bits = hashlib.blake2b(i.to_bytes(8, "little"), digest_size=16).digest()
        return str(uuid.UUID(bytes=bits, version=4))
    return f"t{i:012d}"


def fill(node, system):
    if system == "pathlock":
        node.c.pipeline(("PATHLOCK.ACQUIRE", KEY, "TOKEN", token(i), "TTL", TTL_MS, "WRITE",
                         path(i)) for i in range(LOCKS))
        assert int(info(node.c, "pathlock", "pathlock_locks")) == LOCKS
    else:
        # HSET of a thousand fields a call, as a hash of this size is usually filled.
        batch = 1000
        node.c.pipeline(("HSET", KEY, *[x for i in range(start, min(start + batch, LOCKS))
                                        for x in (path(i), token(i))])
                        for start in range(0, LOCKS, batch))
        assert node.c.call("HLEN", KEY) == LOCKS


def digest(node, key):
    return node.c.call("DEBUG", "DIGEST-VALUE", key)


class Timed:
    """Times what runs inside it: the wall clock, and the CPU seconds the given servers used."""

    def __init__(self, out, name, *nodes, sides=()):
        self.out, self.name, self.nodes, self.sides = out, name, nodes, sides

    def __enter__(self):
        self.cpus = [n.cpu() for n in self.nodes]
        self.wall = time.perf_counter()

    def __exit__(self, *exc):
        wall = time.perf_counter() - self.wall
        # The CPU clock ticks in hundredths: a figure under that reads as 0.
        cpus = [n.cpu() - before for n, before in zip(self.nodes, self.cpus)]
        self.out[f"{self.name} (ms)"] = wall * 1000
        self.out[f"{self.name} CPU (ms)"] = sum(cpus) * 1000
        # Each server's share apart where the sides are named: a sum alone hid a target that
        # spent its CPU on something else than the operation.
        for side, cpu in zip(self.sides, cpus):
            self.out[f"{self.name} CPU, {side} (ms)"] = cpu * 1000


def fork_ms(node):
    """The time of one BGSAVE's fork, once the save is over."""
    node.c.call("BGSAVE")
    while int(info(node.c, "persistence", "rdb_bgsave_in_progress")):
        time.sleep(0.01)
    return int(info(node.c, "stats", "latest_fork_usec")) / 1000


def before_forks(system, a, b, out):
    """The measures up to the forks, on the system's servers: a holds the key after them."""
    fill(a, system)
    before = digest(a, KEY)
    with Timed(out, "DUMP", a):
        payload = a.c.call("DUMP", KEY)
    out["DUMP size (MB)"] = len(payload) / 1e6
    with Timed(out, "RESTORE", b):
        b.c.call("RESTORE", KEY, 0, payload)
    assert digest(b, KEY) == before, "RESTORE changed the value"
    # Freeing the value, which MIGRATE does on the source after the transfer.
    with Timed(out, "DEL", b):
        b.c.call("DEL", KEY)
    del payload
    with Timed(out, "DEBUG RELOAD", a):
        a.c.call("DEBUG", "RELOAD")
    assert digest(a, KEY) == before, "DEBUG RELOAD changed the value"
    out["RSS (MB)"] = int(info(a.c, "memory", "used_memory_rss")) / 1e6
    out["used_memory (MB)"] = int(info(a.c, "memory", "used_memory")) / 1e6
    out["resident anonymous, RssAnon (MB)"] = rss_anon_kb(a.proc.pid) / 1e3
    return before


def rss_anon_kb(pid):
    """The process's resident anonymous memory, the pages a fork copies the entries of."""
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("RssAnon:"):
            return int(line.split()[1])
    return 0


def forks(servers, outs):
    """Fork time, both systems' servers taking turns: a fork copies the process's page tables
    (its time follows the resident pages, about 55 ns each here, and the page-table pages), and
    a machine shared with other work makes one fork take two or three times another. Taking
    turns puts both systems in the same state of the machine, and the least of FORKS each is
    what the copy itself costs; the median is kept beside it."""
    times = {system: [] for system in servers}
    for i in range(FORKS):
        order = list(servers) if i % 2 == 0 else list(reversed(servers))
        for system in order:
            times[system].append(fork_ms(servers[system][0]))
    for system, taken in times.items():
        outs[system]["fork, least (ms)"] = min(taken)
        outs[system]["fork, median (ms)"] = statistics.median(taken)


def after_forks(a, b, out, before):
    """A replica's full sync and MIGRATE, from a to b (b is empty, so what it loads is the
    one key)."""
    with Timed(out, "full sync", a, b):
        b.c.call("REPLICAOF", "127.0.0.1", a.port)
        deadline = time.time() + 300
        while time.time() < deadline:
            if (info(b.c, "replication", "master_link_status") == "up"
                    and info(b.c, "replication", "master_sync_in_progress") == "0"):
                break
            time.sleep(0.005)
        else:
            raise RuntimeError("the replica never synced")
    assert digest(b, KEY) == before, "the full sync changed the value"
    b.c.call("REPLICAOF", "NO", "ONE")
    b.c.call("FLUSHALL")
    with Timed(out, "MIGRATE", a, b, sides=("source", "target")):
        a.c.call("MIGRATE", "127.0.0.1", b.port, KEY, 0, 600000)
    assert digest(b, KEY) == before, "MIGRATE changed the value"


def one_round(systems=("pathlock", "hash")):
    """Every measure of each system, each on servers holding only the key: the operations one
    system after the other, but the forks taking turns between the systems' servers."""
    outs = {system: {} for system in systems}
    servers = {}
    try:
        for system in systems:
            servers[system] = (Node(), Node())
        befores = {system: before_forks(system, *servers[system], outs[system])
                   for system in systems}
        forks(servers, outs)
        for system in systems:
            after_forks(*servers[system], outs[system], befores[system])
    finally:
        for a, b in servers.values():
            a.stop()
            b.stop()
    return outs


def whole_key(rows=None):
    """The section: each operation of the project beside the hash's, medians of ROUNDS."""
    owners = "one token" if OWNERS == "one" else "a token each"
    print(f"\n## Whole-key operations: {LOCKS:,} locks ({owners}) beside a hash of "
          f"{LOCKS:,} fields, median of {ROUNDS} rounds\n")
    runs = {"pathlock": [], "hash": []}
    for _ in range(ROUNDS):
        for system, out in one_round().items():
            runs[system].append(out)
    print("| operation | pathlock | hash | ratio |")
    print("|---|---:|---:|---:|")
    for measure in runs["pathlock"][0]:
        mine = statistics.median(r[measure] for r in runs["pathlock"])
        theirs = statistics.median(r[measure] for r in runs["hash"])
        ratio = mine / theirs if theirs else float("nan")
        spread = ", ".join(f"{r[measure]:,.1f}" for r in runs["pathlock"])
        spread_h = ", ".join(f"{r[measure]:,.1f}" for r in runs["hash"])
        print(f"| {measure} | {mine:,.1f} ({spread}) | {theirs:,.1f} ({spread_h}) "
              f"| {ratio:.2f} |", flush=True)
        if rows is not None:
            rows.append(("whole-key", measure, mine, theirs, ratio))
    return runs


def main_thread_cpu_ns(node):
    """Nanoseconds of CPU the server's main thread has used (the first field of its
    `schedstat`): what a DUMP costs it, whatever the other threads and processes do."""
    with open(f"/proc/{node.proc.pid}/task/{node.proc.pid}/schedstat") as f:
        return int(f.read().split()[0])


def dump_turns():
    """`DUMP` alone: the project's and the hash's, TURNS each taking turns on two servers."""
    owners = "one token" if OWNERS == "one" else f"a token each ({TOKENS})"
    print(f"\n## DUMP in turns: {LOCKS:,} locks ({owners}) beside a hash of {LOCKS:,} fields, "
          f"{TURNS} turns, CPU of the main thread\n")
    nodes = {"pathlock": Node(), "hash": Node()}
    try:
        for system, node in nodes.items():
            fill(node, system)
        times = {system: [] for system in nodes}
        sizes = {}
        for _ in range(TURNS):
            for system, node in nodes.items():
                before = main_thread_cpu_ns(node)
                sizes[system] = len(node.c.call("DUMP", KEY))
                times[system].append((main_thread_cpu_ns(node) - before) / 1e6)
    finally:
        for node in nodes.values():
            node.stop()
    print("| | pathlock | hash | ratio |")
    print("|---|---:|---:|---:|")
    for name, pick in (("lower quartile", 0), ("median", 1), ("upper quartile", 2)):
        mine = statistics.quantiles(times["pathlock"], n=4)[pick]
        theirs = statistics.quantiles(times["hash"], n=4)[pick]
        print(f"| `DUMP` CPU, {name} (ms) | {mine:,.1f} | {theirs:,.1f} | {mine / theirs:.2f} |")
    print(f"| payload (bytes) | {sizes['pathlock']:,} | {sizes['hash']:,} | "
          f"{sizes['pathlock'] / sizes['hash']:.2f} |", flush=True)


def main():
    if sys.argv[1:] == ["dump-turns"]:
        dump_turns()
        return
    rows = []
    whole_key(rows)
    with open(os.path.join(ROOT, "bench", "whole_key.csv"), "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["section", "measure", "pathlock", "hash", "ratio"])
        writer.writerows(rows)


if __name__ == "__main__":
    main()
