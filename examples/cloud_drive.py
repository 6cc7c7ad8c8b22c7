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


def main():
    client = redis.Redis(host="127.0.0.1", port=int(os.environ.get("REDIS_PORT", "6379")))
    client.delete("proj:example")
    alice = PathLocks(client, "proj:example", ttl_ms=600)
    bob = PathLocks(client, "proj:example")

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
    with bob.upload("/B/C/D/new.txt") as upload:
        print(f"uploaded into the moved folder with fence {upload.fence}")
    print("cloud_drive example: ok")


if __name__ == "__main__":
    main()
