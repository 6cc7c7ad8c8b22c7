"""Instructions per command inside redis-server, counted by callgrind: repeatable for the same
binary and inputs whatever else the machine does, where time drifts by 20% on a shared machine.

For each workload, redis-server runs with the module under `valgrind --tool=callgrind`: its
setup (the locks or keys a command needs, and INSTR_HELD locks held beside them) is sent through
one pipelined connection, then N commands of one kind, and the server shuts down. The count per
command is (the run's total - the total of the same run without the N commands) / N, beside the
plain Redis commands a lock is otherwise made of: SET NX PX for ACQUIRE, DEL for RELEASE, PEXPIRE
for RENEW.

`make bench-instructions` runs it after a release build; INSTR_N (default 5000), INSTR_HELD
(default 0) and PATHLOCK_MODULE (default target/release/libpathlock.so) set it, and
INSTR_LOCKS_PER_PROJECT (default 0: all N locks in one project) spreads the N locks over
projects of that many locks each (`proj:<i / k>`), the small projects most keys are.
"""

import os
import re
import socket
import subprocess
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODULE = os.environ.get("PATHLOCK_MODULE", os.path.join(ROOT, "target/release/libpathlock.so"))
N = int(os.environ.get("INSTR_N", "5000"))
HELD = int(os.environ.get("INSTR_HELD", "0"))
PER_PROJECT = int(os.environ.get("INSTR_LOCKS_PER_PROJECT", "0"))
SERVER = os.environ.get("REDIS_SERVER", "redis-server")
TTL = 3_600_000


def resp(*args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def send(port, commands):
    """Sends commands pipelined on one connection and reads every reply (a PING marks the end)."""
    payload = b"".join(commands) + resp("PING")
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(payload)
        buf = b""
        while not buf.endswith(b"+PONG\r\n"):
            chunk = s.recv(1 << 20)
            if not chunk:
                raise ConnectionError("the server closed the connection")
            buf += chunk


def total(commands):
    """The instructions a server executes from its start to its end, `commands` sent in turn."""
    d = tempfile.mkdtemp(prefix="pathlock-cg-")
    port = free_port()
    out = os.path.join(d, "callgrind.out")
    server = subprocess.Popen(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", SERVER,
         "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
         "--dir", d, "--loadmodule", MODULE],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(600):
        try:
            socket.create_connection(("127.0.0.1", port)).close()
            break
        except OSError:
            time.sleep(0.1)
    for batch in commands:
        send(port, batch)
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(resp("SHUTDOWN", "NOSAVE"))
        time.sleep(0.5)
    server.wait(timeout=600)
    with open(out) as f:
        text = f.read()
    found = re.search(r"^summary:\s+(\d+)", text, re.M) or re.search(r"^totals:\s+(\d+)", text, re.M)
    return int(found.group(1))


def per_command(setup, measured):
    return (total(setup + [measured]) - total(setup)) / N


def project(i):
    """The key of the N locks' i-th: one project, or projects of PER_PROJECT locks each."""
    return f"proj:{i // PER_PROJECT}" if PER_PROJECT else "proj"


def main():
    held = [[resp("PATHLOCK.ACQUIRE", "proj", "TOKEN", f"h{i}", "TTL", TTL, "WRITE",
                  f"/held/{i % 1000}/f{i}") for i in range(HELD)],
            [resp("SET", f"lock:held/{i}", "tok", "NX", "PX", TTL) for i in range(HELD)]]
    locks = [resp("PATHLOCK.ACQUIRE", project(i), "TOKEN", f"t{i}", "TTL", TTL, "WRITE",
                  f"/new/{i}/f.txt") for i in range(N)]
    keys = [resp("SET", f"lock:proj/new/{i}/f.txt", f"t{i}", "NX", "PX", TTL) for i in range(N)]
    workloads = [
        ("PING", [], [resp("PING") for _ in range(N)]),
        ("SET NX PX", [], keys),
        ("ACQUIRE, client token", [], locks),
        ("ACQUIRE, generated token", [],
         [resp("PATHLOCK.ACQUIRE", project(i), "TTL", TTL, "WRITE", f"/new/{i}/f.txt")
          for i in range(N)]),
        ("DEL", [keys], [resp("DEL", f"lock:proj/new/{i}/f.txt") for i in range(N)]),
        ("RELEASE", [locks], [resp("PATHLOCK.RELEASE", project(i), f"t{i}") for i in range(N)]),
        ("PEXPIRE", [keys], [resp("PEXPIRE", f"lock:proj/new/{i}/f.txt", TTL) for i in range(N)]),
        ("RENEW", [locks], [resp("PATHLOCK.RENEW", project(i), f"t{i}", TTL) for i in range(N)]),
    ]
    counts = {}
    spread = f"projects of {PER_PROJECT} locks" if PER_PROJECT else "one project"
    print(f"instructions per command, {N} commands, {HELD} locks and keys held besides, "
          f"the locks in {spread}")
    print("| command | instructions |")
    print("|---|---:|")
    for name, setup, measured in workloads:
        counts[name] = per_command(held + setup, measured)
        print(f"| {name} | {counts[name]:,.0f} |", flush=True)
    print(f"ACQUIRE / SET NX PX: {counts['ACQUIRE, client token'] / counts['SET NX PX']:.2f}; "
          f"RELEASE / DEL: {counts['RELEASE'] / counts['DEL']:.2f}; "
          f"RENEW / PEXPIRE: {counts['RENEW'] / counts['PEXPIRE']:.2f}")


if __name__ == "__main__":
    main()
