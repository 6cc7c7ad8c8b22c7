#!/usr/bin/env python3
"""Writes the hand-made seeds and regression inputs of the fuzz targets (fuzz/regressions/).

Each is an input the fuzzers must keep passing: the two-byte command that aborted the server,
hostile UTF-8 and control bytes in every argument position, forged RDB payloads. The framings are
those of src/harness.rs: a command record is [command index, clock step, argc, (len, bytes)*];
an RDB payload is items of 8-byte little-endian unsigneds and length-prefixed buffers.
"""
import os, struct

HERE = os.path.dirname(os.path.abspath(__file__))
ACQUIRE, RELEASE, RENEW, LOCKS, CHECK, EFFECT, WAITERS = range(7)
HOSTILE = ["\u0100", "\u0400", "\uff00", "\u0000", "\r\n", "%s%n", "\x7f", "\xff"]


def record(command, words, step=0):
    out = bytes([command, step, len(words)])
    for w in words:
        w = w if isinstance(w, bytes) else w.encode("utf-8", "surrogatepass")
        out += bytes([len(w)]) + w
    return out


def write(target, name, data):
    folder = os.path.join(HERE, "regressions", target)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, name), "wb") as f:
        f.write(data)


def u(n):
    return struct.pack("<Q", n)


def buf(b):
    return u(len(b)) + b


def main():
    write("command", "acquire-mode-u0100", record(ACQUIRE, ["k", b"\xc4\x80", "/a"]))
    for i, h in enumerate(HOSTILE):
        hb = h.encode("utf-8") if h != "\xff" else b"\xff"
        write("command", f"hostile-{i}-every-position", b"".join([
            record(ACQUIRE, ["k", hb, "/a"]),
            record(ACQUIRE, ["k", "TOKEN", hb, "WRITE", hb]),
            record(ACQUIRE, ["k", "TTL", hb, "READ", "/a"]),
            record(ACQUIRE, ["k", "WAIT", hb, "READ", "/a"]),
            record(RELEASE, ["k", hb, hb]),
            record(RENEW, ["k", hb, hb]),
            record(LOCKS, [hb, hb]),
            record(CHECK, ["k", "TOKEN", hb, hb, hb]),
            record(EFFECT, ["k", "GRANT", hb, "1", "2", hb, hb]),
        ]))
        write("command", f"hostile-{i}-notes-owners-waiters", b"".join([
            record(ACQUIRE, ["k", "NOTE", hb, "WRITE", "/a"]),
            record(ACQUIRE, ["k", "TOKEN", "t", "NOTE", hb, "NOTE", hb, "READ", "/b"]),
            record(LOCKS, ["k", hb, "TOKEN", hb]),
            record(LOCKS, ["k", "TOKEN", hb]),
            record(LOCKS, ["k", hb, hb, hb]),
            record(WAITERS, ["k", hb]),
        ]))
    write("command", "notes-owners-waiters", b"".join([
        record(ACQUIRE, ["p", "TOKEN", "t1", "NOTE", "move /A/C", "WRITE", "/A/C", "WRITE", "/B/C"]),
        record(ACQUIRE, ["p", "TOKEN", "t1", "WRITE", "/A/C"]),
        record(ACQUIRE, ["p", "TOKEN", "t1", "NOTE", "", "WRITE", "/B/C"]),
        record(ACQUIRE, ["p", "TOKEN", "TOKEN", "READ", "/TOKEN"]),
        record(LOCKS, ["p", "TOKEN", "t1"]),
        record(LOCKS, ["p", "/A", "TOKEN", "t1"]),
        record(LOCKS, ["p", "TOKEN"]),
        record(CHECK, ["p", "WRITE", "/"]),
        record(WAITERS, ["p", "/A"]),
        record(RELEASE, ["p", "t1"]),
    ]))
    write("command", "grant-release-renew-expire", b"".join([
        record(ACQUIRE, ["p", "TOKEN", "t1", "TTL", "50", "WRITE", "/A/C"]),
        record(ACQUIRE, ["p", "TOKEN", "t2", "READ", "/A"]),
        record(CHECK, ["p", "READ", "/A"]),
        record(LOCKS, ["p"]),
        record(RENEW, ["p", "t1", "100"], step=10),
        record(ACQUIRE, ["p", "TOKEN", "t3", "READ", "/A/C/d", "WRITE", "/B"], step=200),
        record(RELEASE, ["p", "t3"]),
    ]))
    for i, h in enumerate(HOSTILE):
        hb = h.encode("utf-8") if h != "\xff" else b"\xff"
        write("effect", f"hostile-{i}", b"".join([
            record(0, ["GRANT", "t", "5", "3", hb, "/a"]),
            record(0, ["GRANT", hb, hb, hb, "WRITE", hb]),
            record(0, [hb, hb]),
            record(0, ["RELEASE", hb, hb]),
            record(0, ["RENEW", hb, hb]),
            record(0, ["EXPIRE", hb]),
            record(0, ["FENCE", hb]),
        ]))
    write("effect", "grant-with-notes", b"".join([
        record(0, ["GRANT", "t1", "100", "1", "NOTE", "move \x00\r\n", "WRITE", "/A/C"]),
        record(0, ["GRANT", "t1", "200", "2", "WRITE", "/A/C"]),
        record(0, ["GRANT", "t1", "300", "3", "NOTE", "", "WRITE", "/A/C", "READ", "/B"]),
        record(0, ["GRANT", "t2", "300", "4", "NOTE", "n"]),
        record(0, ["GRANT", "t2", "300", "5", "NOTE"]),
        record(0, ["RELEASE", "t1", "/A/C"]),
    ]))
    write("effect", "grant-release-expire-fence", b"".join([
        record(0, ["GRANT", "t1", "100", "1", "WRITE", "/A/C", "READ", "/B"]),
        record(0, ["GRANT", "t2", "200", "2", "READ", "/A/D"]),
        record(0, ["RENEW", "t2", "300"]),
        record(0, ["EXPIRE", "150"]),
        record(0, ["RELEASE", "t2", "/A/D"]),
        record(0, ["FENCE", "9"]),
    ]))
    lock = lambda key, mode, token, deadline, fence: buf(key) + u(mode) + buf(token) + u(deadline) + u(fence)
    write("rdb", "two-locks", u(3) + u(2) + lock(b"A\0", 0, b"t1", 10, 1) + lock(b"B\0", 1, b"t2", 10, 2))
    write("rdb", "conflicting-writers", u(3) + u(2) + lock(b"A\0", 0, b"t1", 10, 1) + lock(b"A\0B\0", 0, b"t2", 10, 2))
    write("rdb", "too-deep", u(2) + u(1) + lock(b"a\0" * 4097, 0, b"t", 10, 1))
    write("rdb", "huge-count-short-payload", u(2) + u(2**64 - 1) + lock(b"a\0", 0, b"t", 10, 1))
    write("rdb", "fence-beyond-counter", u(2) + u(1) + lock(b"a\0", 0, b"t", 10, 7))
    # Version 2 (with notes) in the same framing; the harness decodes every input as each version.
    noted = lambda key, mode, token, deadline, fence, note: lock(key, mode, token, deadline, fence) + buf(note)
    write("rdb", "two-noted-locks", u(3) + u(2) + noted(b"A\0", 0, b"t1", 10, 1, b"move \x00\r\n\xc4\x80")
          + noted(b"B\0", 1, b"t2", 10, 2, b""))
    # Issue 28: counters no server can have reached, around the bounds of src/harness.rs's clock
    # (NOW_MS): the one-lock project with its counter at 2^53 + 5, the edges of what a
    # RESTORE may bring (admissible) and of what any server may hold (ceiling), and a lock whose
    # fence is above the ceiling under a counter past 2^64's end.
    now, skew, per_ms = 1_795_000_000_000, 365 * 24 * 3600 * 1000, 1000
    admissible, ceiling = (now + skew) * per_ms, (now + 2 * skew) * per_ms
    fence = now * per_ms
    write("rdb", "counter-2-pow-53-plus-5", u(2**53 + 5) + u(1) + lock(b"A\0", 0, b"t", now + 600000, fence))
    for name, counter in [("admissible", admissible), ("ceiling", ceiling)]:
        for delta in (0, 1):
            write("rdb", f"counter-{name}-plus-{delta}", u(counter + delta) + u(1) + lock(b"A\0", 0, b"t", now, fence))
    write("rdb", "lock-above-the-ceiling", u(2**64 - 1) + u(2) + lock(b"A\0", 0, b"t", now, fence)
          + lock(b"B\0", 0, b"t", now, ceiling + 7))
    write("effect", "impossible-fences", b"".join([
        record(0, ["GRANT", "t", str(now + 600000), str(fence), "WRITE", "/a"]),
        record(0, ["FENCE", str(2**53 + 5)]),
        record(0, ["GRANT", "t", "1", str(2**53 + 4), "WRITE", "/b"]),
        record(0, ["FENCE", str(ceiling)]),
        record(0, ["FENCE", str(ceiling + 1)]),
        record(0, ["GRANT", "t", "1", str(ceiling - 1), "WRITE", "/c"]),
        record(0, ["GRANT", "t", "1", str(ceiling), "WRITE", "/d"]),
        record(0, ["FENCE", str(2**64 - 1)]),
        record(0, ["GRANT", "t", "1", str(2**64 - 1), "WRITE", "/e"]),
    ]))


if __name__ == "__main__":
    main()
