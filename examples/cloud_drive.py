"""Moving a folder safely with pathlock's Python client (clients/python).

Run against a server with the module loaded (`make run` starts one on port 6379):

    pip install ./clients/python
    python3 examples/cloud_drive.py            # REDIS_PORT picks another port

`make test-python` runs it against a throw-away server, and it exits non-zero if anything it
shows stops being true.
"""

import os
import time

import redis

from pathlock import Busy, PathLocks


class Storage:
    """The storage the locks protect, checking fences per resource: it keeps, for each path it
    writes, the highest fence it has seen for that path, and refuses a write to that path with a
    lower one. Never one global "highest fence seen": fences come from one counter per project,
    so a global check would refuse every write of a lease granted before another one."""

    def __init__(self):
        self.highest = {}

    def write(self, path, fence):
        if fence < self.highest.get(path, 0):
            raise PermissionError(f"stale write to {path}: fence {fence} < {self.highest[path]}")
        self.highest[path] = fence


def main():
    client = redis.Redis(host="127.0.0.1", port=int(os.environ.get("REDIS_PORT", "6379")))
    client.delete("proj:example")
    alice = PathLocks(client, "proj:example", ttl_ms=600)
    bob = PathLocks(client, "proj:example")
    storage = Storage()

    # Moving folder /A/C into /B locks /A/C and /B/C; the lease is renewed in the background,
    # and its note tells others who is doing what.
    with alice.move("/A/C", "/B", note="alice: move /A/C into /B") as lease:
        print(f"moving /A/C into /B as {lease.token} with fence {lease.fence}")

        # Another user cannot upload into the folder being moved, and is told why...
        try:
            bob.upload("/A/C/D/new.txt")
            raise AssertionError("an upload into a folder being moved was granted")
        except Busy as busy:
            [blocker] = busy.blockers
            assert (blocker.path, blocker.token) == ("/A/C", lease.token)
            print(f"upload refused: {blocker.path} is locked ({blocker.mode}) by {blocker.note}")
        # ...but works freely beside it, even in a folder whose name starts the same way.
        with bob.upload("/A/CD/notes.txt") as beside:
            assert beside.fence == lease.fence + 1
            storage.write("/A/CD/notes.txt", beside.fence)

        # The move writes two resources, the source and the target, each checked against its
        # own highest fence: bob's later (higher) fence on another path does not refuse them.
        storage.write("/A/C", lease.fence)
        storage.write("/B/C", lease.fence)

        # The move itself may write inside what it holds: more locks under its own token, renewed
        # and released with it.
        lease.lock([("WRITE", "/B/C/new.txt")])
        held = [(lock.path, lock.note) for lock in alice.locks(token=lease.token)]
        assert [path for path, _ in held] == ["/A/C", "/B/C", "/B/C/new.txt"]
        print(f"the move holds {held}")

        # A move that takes longer than the TTL keeps its lease: the watchdog renews it.
        time.sleep(1.0)
        lease.check()  # raises LeaseLost if the lease was lost; stop writing then

    # Once the move is done, the folder is free again.
    with bob.upload("/B/C") as upload:
        storage.write("/B/C", upload.fence)
        print(f"uploaded into the moved folder with fence {upload.fence}")

    # A write still carrying the move's fence (a worker that did not notice the lease was gone)
    # is refused for that path, which a newer lease has written since.
    try:
        storage.write("/B/C", lease.fence)
        raise AssertionError("a stale fence was accepted")
    except PermissionError as refused:
        print(f"refused: {refused}")
    print("cloud_drive example: ok")


if __name__ == "__main__":
    main()
