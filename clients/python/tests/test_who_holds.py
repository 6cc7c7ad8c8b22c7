"""Notes, nesting under a lease, inspection, a waiter sharing the holder's client, and the
requests that are refused before or by the server: sync and asyncio, on a real server."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, Awaitable, Callable, List

import pytest
import redis
import redis.asyncio
from redis.exceptions import ResponseError

from helpers import KEY
from servers import Server, wait_until

from pathlock import (
    AsyncPathLocks,
    Blocker,
    Busy,
    LeaseLost,
    PathLockError,
    PathLocks,
    Waiter,
    WrongType,
)

SLACK = 0.25


def run(server: Server, body: Callable[[redis.asyncio.Redis], Awaitable[None]], **kw: Any) -> None:
    async def main() -> None:
        client = redis.asyncio.Redis(host="127.0.0.1", port=server.port, **kw)
        try:
            await body(client)
        finally:
            await client.aclose()

    asyncio.run(main())


def notes(locks: List[Blocker]) -> List[tuple]:
    return [(b.mode, b.path, b.note) for b in locks]


# Notes.


def test_each_operation_notes_what_it_does_unless_told_otherwise(client: redis.Redis) -> None:
    locks = PathLocks(client, KEY)
    with locks.move("/A/C", "/B"):
        assert notes(locks.locks()) == [
            ("WRITE", "/A/C", "move /A/C -> /B"),
            ("WRITE", "/B/C", "move /A/C -> /B"),
        ]
    for acquire, note in [
        (lambda: locks.upload("/D/f"), "upload /D/f"),
        (lambda: locks.create("/D/N"), "create /D/N"),
        (lambda: locks.read("/D/f"), "read /D/f"),
        (lambda: locks.rename("/D/f", "/D/g"), "rename /D/f -> /D/g"),
        (lambda: locks.copy("/A/a.txt", "/B"), "copy /A/a.txt -> /B"),
        (lambda: locks.delete("/A"), "delete /A"),
        (lambda: locks.purge("/bin/1", "/bin/2"), "purge /bin/1 /bin/2"),
        (lambda: locks.lock([("READ", "/X"), ("WRITE", "/X/y")]), "lock READ /X, WRITE /X/y"),
        (lambda: locks.upload("/E/f", note="alice: uploading f"), "alice: uploading f"),
    ]:
        with acquire():
            assert {b.note for b in locks.locks()} == {note}
    # The handle's note replaces the operation's; the call's replaces both; "" sends none.
    worker = PathLocks(client, KEY, note="worker-7")
    with worker.upload("/F/f"):
        assert notes(locks.locks()) == [("WRITE", "/F/f", "worker-7")]
    with worker.upload("/F/f", note="Алиса: f"):
        assert notes(locks.locks()) == [("WRITE", "/F/f", "Алиса: f")]
    with worker.upload("/F/f", note=""):
        assert notes(locks.locks()) == [("WRITE", "/F/f", None)]
    # A default note stays short, however long the path (the server takes 256 bytes by default).
    long_path = "/" + "é" * 300
    with locks.upload(long_path):
        [held] = locks.locks()
        assert held.note is not None and held.note.startswith("upload /éé")
        assert held.note.endswith("...") and len(held.note.encode()) <= 100


def test_busy_names_the_blockers_with_their_notes(client: redis.Redis) -> None:
    alice = PathLocks(client, KEY, note="alice")
    bob = PathLocks(client, KEY)
    with alice.move("/A/C", "/B", note="alice: move /A/C into /B") as move:
        with pytest.raises(Busy) as refused:
            bob.upload("/A/C/D/new.txt")
        [blocker] = refused.value.blockers
        assert blocker == Blocker(
            "/A/C", "WRITE", move.token, blocker.ttl_ms, move.fence, "alice: move /A/C into /B"
        )
        assert "alice: move /A/C into /B" in str(refused.value)


# Inspecting.


def test_check_locks_and_waiters_on_the_handle(client: redis.Redis) -> None:
    locks = PathLocks(client, KEY)
    other = PathLocks(client, KEY)
    with locks.move("/A/C", "/B") as move, other.upload("/A/CD/notes.txt") as beside:
        assert [(b.path, b.token) for b in locks.locks()] == [
            ("/A/C", move.token),
            ("/A/CD/notes.txt", beside.token),
            ("/B/C", move.token),
        ]
        assert [b.path for b in locks.locks("/A")] == ["/A/C", "/A/CD/notes.txt"]
        assert [b.path for b in locks.locks(token=move.token)] == ["/A/C", "/B/C"]
        assert [b.path for b in locks.locks("/B", token=move.token)] == ["/B/C"]
        # The same lock both ways; ttl_ms is left out, as the two calls may fall in two
        # different milliseconds.
        def held(blockers: List[Any]) -> List[Any]:
            return [(b.path, b.mode, b.token, b.fence, b.note) for b in blockers]

        assert held(locks.locks(token=beside.token)) == held(locks.locks("/A/CD"))
        assert [b.token for b in locks.check([("WRITE", "/A")])] == [move.token, beside.token]
        assert [b.token for b in locks.check([("WRITE", "/A")], token=move.token)] == [beside.token]
        assert locks.check([("READ", "/Z")]) == []
        assert locks.waiters() == []

        waited: List[Any] = []
        waiter = threading.Thread(
            target=lambda: waited.append(other.upload("/B/C/x", wait_ms=5000, note="bob waits"))
        )
        waiter.start()
        wait_until(lambda: locks.waiters() != [], what="the upload to queue")
        [queued] = locks.waiters()
        assert isinstance(queued, Waiter)
        assert (queued.locks, queued.note) == ((("WRITE", "/B/C/x"),), "bob waits")
        assert 0 <= queued.waited_ms and 0 < queued.left_ms <= 5000
        assert [w.token for w in locks.waiters("/B/C")] == [queued.token]
        assert locks.waiters("/A") == []
    waiter.join(10)
    [granted] = waited
    assert granted.token == queued.token
    granted.release()
    assert locks.locks() == [] and locks.waiters() == []


# Nesting.


def test_a_lease_locks_more_under_its_own_token_renews_and_releases_them(
    client: redis.Redis,
) -> None:
    locks = PathLocks(client, KEY, ttl_ms=300)
    bob = PathLocks(client, KEY)
    with locks.move("/A/C", "/B") as move:
        # Inside what the move holds, refused to everyone else, granted to the move.
        with pytest.raises(Busy):
            bob.upload("/B/C/new.txt")
        fence = move.lock([("WRITE", "/B/C/new.txt")])
        assert fence > move.fence
        assert move.locks == (("WRITE", "/A/C"), ("WRITE", "/B/C"), ("WRITE", "/B/C/new.txt"))
        assert notes(locks.locks(token=move.token))[-1] == (
            "WRITE",
            "/B/C/new.txt",
            "move /A/C -> /B",
        )
        # Beside it too; and again: an idempotent re-acquire, with a new fence and note.
        move.lock([("READ", "/R")])
        again = move.lock([("WRITE", "/B/C/new.txt")], note="move: writing new.txt")
        assert again > fence and len(locks.locks(token=move.token)) == 4
        assert [b.note for b in locks.locks("/B/C/new.txt")] == ["move: writing new.txt"]
        # Another owner in the way: Busy, with that owner as the blocker.
        with bob.upload("/S/x") as other:
            with pytest.raises(Busy) as refused:
                move.lock([("WRITE", "/S")])
            assert [b.token for b in refused.value.blockers] == [other.token]
        # The watchdog keeps every one of them alive well past the TTL.
        time.sleep(1.2)
        move.check()
        held = locks.locks(token=move.token)
        assert len(held) == 4 and all(0 < b.ttl_ms <= 300 for b in held)
    # Releasing the lease frees everything its token holds.
    assert locks.locks() == []
    with pytest.raises(PathLockError):
        move.lock([("WRITE", "/A/C/x")])
    with bob.upload("/B/C/new.txt"):
        pass


def test_a_nested_lock_waits_on_a_connection_of_its_own(client: redis.Redis) -> None:
    # The wait outlasts the TTL more than twice: had it held up the move's renewals, the move
    # would be lost by the time the nested lock is granted.
    locks = PathLocks(client, KEY, ttl_ms=300)
    with locks.upload("/Q/x") as other, locks.move("/A/C", "/B") as move:
        threading.Timer(0.8, other.release).start()
        started = time.monotonic()
        move.lock([("WRITE", "/Q")], wait_ms=5000)
        assert 0.7 < time.monotonic() - started < 3
        move.check()
        assert [b.path for b in locks.locks(token=move.token)] == ["/A/C", "/B/C", "/Q"]


def test_a_lost_lease_takes_no_more_locks_and_a_lost_nested_lock_loses_the_lease(
    client: redis.Redis,
) -> None:
    locks = PathLocks(client, KEY, ttl_ms=600)
    # The key deleted under the lease: lock() finds out before it would recreate the key.
    lease = locks.move("/A/C", "/B")
    client.delete(KEY)
    with pytest.raises(LeaseLost) as lost:
        lease.lock([("WRITE", "/B/C/x")])
    assert lost.value.reason == "gone" and lease.lost.is_set()
    assert client.exists(KEY) == 0
    lease.release()
    # Locks of the lease released elsewhere while a nested lock still answers the renewals.
    lease = locks.move("/A/C", "/B")
    lease.lock([("WRITE", "/B/C/x")])
    time.sleep(0.5)  # a renewal has counted the lease's three locks
    released_at = time.monotonic()
    assert client.execute_command("PATHLOCK.RELEASE", KEY, lease.token, "/A/C") == 1
    assert lease.lost.wait(2)
    assert time.monotonic() - released_at <= 0.2 + SLACK
    assert lease.lost_reason == "gone"
    lease.release()
    assert locks.locks() == []


# Refused requests.


def test_helpers_refuse_the_empty_path_and_the_root_unless_asked_for_in_so_many_words(
    client: redis.Redis,
) -> None:
    locks = PathLocks(client, KEY)
    for call in [
        lambda: locks.upload(""),
        lambda: locks.upload("/"),
        lambda: locks.create("//"),
        lambda: locks.read("/./"),
        lambda: locks.delete("/"),
        lambda: locks.rename("/A", ""),
        lambda: locks.move("/", "/B"),
        lambda: locks.copy("", "/B"),
        lambda: locks.purge("/bin/1", ""),
    ]:
        with pytest.raises(ValueError, match="whole project"):
            call()
    with pytest.raises(ValueError, match="into_folder"):
        locks.move("/A/C", "")
    with pytest.raises(ValueError, match="empty"):
        locks.lock([("WRITE", "")])
    assert locks.locks() == []
    with locks.lock([("WRITE", "/")]) as everything:
        assert notes(locks.locks()) == [("WRITE", "/", "lock WRITE /")]
        with pytest.raises(Busy):
            locks.upload("/A")
    assert everything.released
    with locks.move("/A/C", "/"):
        assert [b.path for b in locks.locks()] == ["/A/C", "/C"]


def test_ttls_and_waits_are_checked_with_their_units(client: redis.Redis) -> None:
    with pytest.raises(ValueError, match="ttl_ms must be a whole number of milliseconds"):
        PathLocks(client, KEY, ttl_ms=0)
    locks = PathLocks(client, KEY)
    for kwargs in [{"ttl_ms": 0}, {"ttl_ms": 0.5}, {"ttl_ms": -1}, {"wait_ms": -1}]:
        with pytest.raises(ValueError, match="milliseconds") as refused:
            locks.upload("/A", **kwargs)
        assert repr(list(kwargs.values())[0]) in str(refused.value)
    with pytest.raises(ValueError, match="replicas_timeout_ms must be a whole number of milli"):
        PathLocks(client, KEY, replicas_timeout_ms=0)
    assert locks.locks() == []


def test_a_key_of_another_type_is_named_and_said_not_to_be_a_project(client: redis.Redis) -> None:
    client.set("cache:1", "hello")
    locks = PathLocks(client, "cache:1")
    for call in [
        lambda: locks.upload("/A"),
        lambda: locks.locks(),
        lambda: locks.check([("READ", "/A")]),
        lambda: locks.waiters(),
    ]:
        with pytest.raises(WrongType) as refused:
            call()
        assert refused.value.key == "cache:1"
        assert "'cache:1' is not a pathlock project" in str(refused.value)
        assert isinstance(refused.value, ResponseError)
    # A project overwritten under a lease: the lease is lost, and says why.
    projects = PathLocks(client, KEY, ttl_ms=600)
    lease = projects.upload("/A")
    client.set(KEY, "not a project any more")
    assert lease.lost.wait(2)
    assert lease.lost_reason == "replaced"
    with pytest.raises(LeaseLost, match="another type of value"):
        lease.check()
    lease.release()


# A waiting acquire on the holder's own client.


@pytest.mark.parametrize("single_connection", [False, True])
def test_a_waiter_on_the_holders_client_never_holds_up_its_renewals(
    server: Server, single_connection: bool
) -> None:
    """A move held for 5 s with a 3 s TTL, and an upload into it that waits on the same handle
    (one client: its pool, or its one connection): the move keeps its lease for its whole run,
    and the upload is granted only after it."""
    client = server.client(single_connection_client=single_connection)
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


@pytest.mark.parametrize("single_connection", [False, True])
def test_async_a_waiter_on_the_holders_client_never_holds_up_its_renewals(
    server: Server, single_connection: bool
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

    run(server, body, single_connection_client=single_connection)


# The same on asyncio.


def test_async_notes_nesting_inspection_and_refusals(server: Server, client: redis.Redis) -> None:
    async def body(aclient: redis.asyncio.Redis) -> None:
        locks = AsyncPathLocks(aclient, KEY, ttl_ms=300)
        bob = AsyncPathLocks(aclient, KEY, note="bob")
        async with locks.move("/A/C", "/B") as move:
            assert notes(await locks.locks()) == [
                ("WRITE", "/A/C", "move /A/C -> /B"),
                ("WRITE", "/B/C", "move /A/C -> /B"),
            ]
            try:
                await bob.upload("/B/C/new.txt")
                raise AssertionError("granted inside a move")
            except Busy as busy:
                assert [b.note for b in busy.blockers] == ["move /A/C -> /B"]
            fence = await move.lock([("WRITE", "/B/C/new.txt")], note="move: new.txt")
            assert fence > move.fence and len(move.locks) == 3
            assert [b.path for b in await locks.locks(token=move.token)] == [
                "/A/C",
                "/B/C",
                "/B/C/new.txt",
            ]
            assert [b.token for b in await locks.check([("WRITE", "/B")])] == [move.token] * 2
            assert await locks.check([("WRITE", "/B")], token=move.token) == []
            waiting = asyncio.ensure_future(bob.upload("/B/C/other.txt", wait_ms=5000))
            while await locks.waiters() == []:
                await asyncio.sleep(0.02)
            [queued] = await locks.waiters("/B")
            assert (queued.locks, queued.note) == ((("WRITE", "/B/C/other.txt"),), "bob")
            await asyncio.sleep(1.0)
            move.check()
            assert all(0 < b.ttl_ms <= 300 for b in await locks.locks(token=move.token))
        other = await asyncio.wait_for(waiting, 5)
        assert [b.path for b in await locks.locks()] == ["/B/C/other.txt"]
        await other.release()
        with pytest.raises(PathLockError):
            await move.lock([("WRITE", "/A")])
        for call in [lambda: locks.upload(""), lambda: locks.delete("/")]:
            with pytest.raises(ValueError, match="whole project"):
                await call()
        with pytest.raises(ValueError, match="milliseconds"):
            await locks.upload("/A", ttl_ms=0)
        async with locks.lock([("READ", "/")]):
            assert notes(await locks.locks()) == [("READ", "/", "lock READ /")]
        await aclient.set("cache:1", "hello")
        with pytest.raises(WrongType, match="'cache:1' is not a pathlock project"):
            await AsyncPathLocks(aclient, "cache:1").upload("/A")
        lease = await locks.upload("/A")
        await aclient.delete(KEY)
        with pytest.raises(LeaseLost):
            await lease.lock([("WRITE", "/A/x")])
        assert lease.lost_reason == "gone" and await aclient.exists(KEY) == 0

    run(server, body)
