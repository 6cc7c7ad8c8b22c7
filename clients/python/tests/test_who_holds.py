"""What this client does beyond the shared contract (`test_contract.py`): how long a default
note gets, `WrongType` as a redis-py error, and a waiter on a single-connection client."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import List

import pytest
import redis
import redis.asyncio
from redis.exceptions import ResponseError

from helpers import KEY, run_async
from servers import Server, wait_until

from pathlock import AsyncPathLocks, Blocker, PathLocks, WrongType

SLACK = 0.25




def notes(locks: List[Blocker]) -> List[tuple]:
    return [(b.mode, b.path, b.note) for b in locks]


# Notes: which note each operation sends is a contract scenario; how long a default one gets is
# this client's own rule.


def test_a_default_note_stays_short_however_long_the_path(client: redis.Redis) -> None:
    locks = PathLocks(client, KEY)
    # The server takes 256 bytes by default; the note is cut at a character boundary.
    long_path = "/" + "é" * 300
    with locks.upload(long_path):
        [held] = locks.locks()
        assert held.note is not None and held.note.startswith("upload /éé")
        assert held.note.endswith("...") and len(held.note.encode()) <= 100


def test_wrong_type_is_also_a_redis_py_response_error(client: redis.Redis) -> None:
    client.set("cache:1", "hello")
    with pytest.raises(WrongType) as refused:
        PathLocks(client, "cache:1").upload("/A")
    assert refused.value.key == "cache:1" and isinstance(refused.value, ResponseError)


def test_a_dot_dot_segment_is_refused_by_every_helper_and_lock_before_anything_is_sent(
    client: redis.Redis,
) -> None:
    """The server refuses `..` too, but with a ResponseError after a round trip; the helpers
    that compare paths (move, copy, rename) refused it before, and now every one does."""
    locks = PathLocks(client, KEY)
    calls = [
        lambda: locks.upload("/A/../B"),
        lambda: locks.create("/A/.."),
        lambda: locks.read("/../A"),
        lambda: locks.delete("/A/../B"),
        lambda: locks.purge("/bin/1", "/bin/../x"),
        lambda: locks.rename("/A/../C", "D"),
        lambda: locks.move("/A/C", "/B/.."),
        lambda: locks.copy("/A/../C", "/B"),
        lambda: locks.lock([("WRITE", "/A/../B")]),
    ]

    def acquires() -> int:
        stats = {name.lower(): value for name, value in client.info("commandstats").items()}
        return int(stats.get("cmdstat_pathlock.acquire", {}).get("calls", 0))

    sent = acquires()
    for call in calls:
        with pytest.raises(ValueError, match="has a '..' segment, which pathlock refuses"):
            call()
    assert acquires() == sent
    # A mode in another case is still taken, and sent upper-cased.
    with locks.lock([("write", "/A")]) as lease:  # type: ignore[list-item]
        assert lease.locks == (("WRITE", "/A"),)
    assert acquires() == sent + 1


# A waiting acquire on the holder's own client.


def test_a_waiter_on_the_holders_single_connection_client_never_holds_up_its_renewals(
    server: Server,
) -> None:
    """A move held for 5 s with a 3 s TTL, and an upload into it that waits on the same handle
    of a `single_connection_client` (the contract's scenario runs it on a client with a pool):
    the move keeps its lease for its whole run, and the upload is granted only after it."""
    client = server.client(single_connection_client=True)
    locks = PathLocks(client, KEY, ttl_ms=3000)
    granted: List[float] = []

    def upload() -> None:
        with locks.upload("/B/C/new.txt", wait_ms=10000):
            granted.append(time.monotonic())

    with locks.move("/A/C", "/B") as move:
        started = time.monotonic()
        waiter = threading.Thread(target=upload)
        waiter.start()
        wait_until(lambda: locks.waiters() != [], what="the upload to queue")
        while time.monotonic() - started < 5:
            assert not move.lost.is_set(), f"lost after {time.monotonic() - started:.2f} s"
            time.sleep(0.05)
        move.check()
        assert granted == []
        ended = time.monotonic()
    waiter.join(10)
    assert move.lost_reason is None
    assert len(granted) == 1 and granted[0] >= ended
    client.close()


def test_async_a_waiter_on_the_holders_single_connection_client_never_holds_up_its_renewals(
    server: Server,
) -> None:
    async def body(aclient: redis.asyncio.Redis) -> None:
        locks = AsyncPathLocks(aclient, KEY, ttl_ms=3000)
        granted: List[float] = []

        async def upload() -> None:
            async with locks.upload("/B/C/new.txt", wait_ms=10000):
                granted.append(time.monotonic())

        async with locks.move("/A/C", "/B") as move:
            started = time.monotonic()
            waiter = asyncio.ensure_future(upload())
            while await locks.waiters() == []:
                await asyncio.sleep(0.02)
            while time.monotonic() - started < 5:
                assert not move.lost.is_set(), f"lost after {time.monotonic() - started:.2f} s"
                await asyncio.sleep(0.05)
            move.check()
            assert granted == []
            ended = time.monotonic()
        await asyncio.wait_for(waiter, 10)
        assert move.lost_reason is None
        assert len(granted) == 1 and granted[0] >= ended

    run_async(server.port, body, single_connection_client=True)


# The same on asyncio.
