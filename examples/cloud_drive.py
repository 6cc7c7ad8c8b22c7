"""Moving a folder safely with pathlock, from redis-py.

Run against a server with the module loaded (`make run` starts one on port 6379):

    python3 examples/cloud_drive.py            # REDIS_PORT picks another port

`make test` runs it against a throw-away server, and it exits non-zero if anything it shows
stops being true.
"""

import os
from contextlib import contextmanager

import redis


class Busy(Exception):
    """Someone else holds a path that the operation needs."""


@contextmanager
def locked(client, project, *requests, ttl_ms=30000):
    """Holds every (mode, path) of `requests` for the block, or raises Busy at once."""
    args = ["TTL", ttl_ms]
    for mode, path in requests:
        args += [mode, path]
    reply = client.execute_command("PATHLOCK.ACQUIRE", project, *args)
    if reply is None:
        raise Busy(requests)
    token, fence = reply
    try:
        # The fence goes with every write to storage, which rejects writes that carry an older
        # fence than one it has seen: a client whose lease expired cannot corrupt anything.
        yield token, fence
    finally:
        client.execute_command("PATHLOCK.RELEASE", project, token)


def try_acquire(client, project, *words):
    return client.execute_command("PATHLOCK.ACQUIRE", project, *words)


def main():
    client = redis.Redis(host="127.0.0.1", port=int(os.environ.get("REDIS_PORT", "6379")))
    project = "proj:example"
    client.delete(project)

    # Moving folder /A/C into /B locks both the source and the destination.
    with locked(client, project, ("WRITE", "/A/C"), ("WRITE", "/B/C")) as (token, fence):
        print(f"moving /A/C to /B/C as {token.decode()} with fence {fence}")

        # Another user cannot upload into the folder being moved, nor delete its parent...
        assert try_acquire(client, project, "WRITE", "/A/C/D/new.txt") is None
        assert try_acquire(client, project, "WRITE", "/A") is None
        # ...but works freely beside it, even in a folder whose name starts the same way.
        other_token, other_fence = try_acquire(client, project, "WRITE", "/A/CD/notes.txt")
        assert other_fence == fence + 1
        assert client.execute_command("PATHLOCK.RELEASE", project, other_token) == 1

        # A long move keeps its lease alive.
        assert client.execute_command("PATHLOCK.RENEW", project, token, 60000) == 2

    # Once the move is done, the folder is free again.
    with locked(client, project, ("WRITE", "/B/C/D/new.txt")) as (_, fence):
        print(f"uploaded into the moved folder with fence {fence}")

    # Errors name the problem.
    try:
        try_acquire(client, project, "TTL", "0", "WRITE", "/A")
        raise AssertionError("TTL 0 was accepted")
    except redis.ResponseError as error:
        assert str(error).startswith("invalid TTL"), error
        print(f"refused as expected: {error}")

    print("cloud_drive example: ok")


if __name__ == "__main__":
    main()
