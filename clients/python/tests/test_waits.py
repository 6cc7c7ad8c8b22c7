"""Waiting acquires at their edges: one cancelled while the grant races it, a capped connection
pool, and a refusal whose blockers cannot be read; and a client of the wrong kind for the
handle. Each finding came from a newcomer's use."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import random
import subprocess
import sys
import threading
import warnings
from pathlib import Path
from typing import Any, List

import pytest
import redis
import redis.asyncio
from redis.exceptions import NoPermissionError

from helpers import KEY, held, run_async
from servers import REPO, Server, wait_until

from pathlock import AsyncPathLocks, Busy, PathLocks

# A cancelled waiting acquire.


def test_a_cancelled_waiting_acquire_never_leaves_a_lock_or_a_waiter(
    server: Server, client: redis.Redis
) -> None:
    """The holder lets go and the waiter is cancelled at once, so the cancellation lands before
    the grant, while its reply is on its way, or after it was read but before it became a lease.
    Whichever it was, nothing may stay on the server: a lock that nobody renews or releases
    would block everybody for its TTL."""
    rounds = 200

    async def body(aclient: redis.asyncio.Redis) -> None:
        locks = AsyncPathLocks(aclient, KEY, ttl_ms=60000)
        outcomes = {"cancelled": 0, "granted": 0}
        for _ in range(rounds):
            hold = await locks.upload("/F/x")
            waiter = asyncio.ensure_future(locks.upload("/F/x", wait_ms=10000))
            while not await locks.waiters():
                await asyncio.sleep(0.001)
            await hold.release()
            # A few turns of the loop at most: the waiter's reply is read within a turn or two.
            for _ in range(random.randrange(4)):
                await asyncio.sleep(0)
            waiter.cancel()
            try:
                lease = await waiter
            except asyncio.CancelledError:
                outcomes["cancelled"] += 1
            else:
                # The task had finished before the cancellation: the lease is the caller's.
                outcomes["granted"] += 1
                await lease.release()
            assert held(client) == [], f"a lock was left behind: {held(client)}"
            assert client.execute_command("PATHLOCK.WAITERS", KEY) == []
        assert outcomes["cancelled"] > 0, outcomes

    run_async(server.port, body)


def test_a_waiting_acquire_cancelled_while_queued_leaves_the_queue_at_once(
    server: Server, client: redis.Redis
) -> None:
    async def body(aclient: redis.asyncio.Redis) -> None:
        locks = AsyncPathLocks(aclient, KEY)
        async with locks.upload("/F/x"):
            waiter = asyncio.ensure_future(locks.upload("/F/x", wait_ms=10000))
            while not await locks.waiters():
                await asyncio.sleep(0.005)
            waiter.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiter
            # Its place in the queue is given up with it, not when its wait would have ended.
            await asyncio.wait_for(_until_no_waiters(locks), 2)
            assert len(held(client)) == 1

    run_async(server.port, body)


async def _until_released(client: redis.Redis) -> None:
    while held(client) != []:
        await asyncio.sleep(0.05)


async def _until_no_waiters(locks: AsyncPathLocks) -> None:
    while await locks.waiters():
        await asyncio.sleep(0.01)


# A capped connection pool: a wait takes a connection of its own, never one of the pool's.


CAPPED_POOLS = {
    "ConnectionPool": lambda port: redis.ConnectionPool(
        host="127.0.0.1", port=port, max_connections=1
    ),
    "BlockingConnectionPool": lambda port: redis.BlockingConnectionPool(
        host="127.0.0.1", port=port, max_connections=1, timeout=5
    ),
}


def refused_by_the_holder(busy: Busy, holder: str, kind: str) -> None:
    """The Busy of a wait refused while `holder` held the path: it names the holder. A full
    `ConnectionPool` refuses a command at once (where a blocking one waits), so its CHECK may
    meet a renewal on the one connection and fail: then it says so, never "nothing holds"."""
    if kind == "ConnectionPool" and busy.check_error is not None:
        assert "Too many connections" in str(busy.check_error) and not busy.blockers
        assert "could not be read" in str(busy) and "nothing holds" not in str(busy)
        return
    assert [b.token for b in busy.blockers] == [holder] and busy.check_error is None
    assert f"held by {holder}" in str(busy)


@pytest.mark.parametrize("kind", list(CAPPED_POOLS))
def test_a_wait_on_a_capped_pool_never_starves_the_renewals_and_busy_names_the_holder(
    server: Server, client: redis.Redis, kind: str
) -> None:
    capped = redis.Redis(connection_pool=CAPPED_POOLS[kind](server.port))
    locks = PathLocks(capped, KEY, ttl_ms=900)
    refused: List[BaseException] = []

    def upload() -> None:
        try:
            locks.upload("/F/x", wait_ms=1500)
        except BaseException as error:
            refused.append(error)

    with locks.upload("/F/x") as hold:
        waiter = threading.Thread(target=upload)
        waiter.start()
        waiter.join(10)
        # Five renewal periods passed while the wait held its connection.
        hold.check()
        assert not hold.lost.is_set()
    assert len(refused) == 1 and isinstance(refused[0], Busy), refused
    refused_by_the_holder(refused[0], hold.token, kind)
    # A release that met a renewal on a full ConnectionPool is retried in the background.
    wait_until(lambda: held(client) == [], timeout=5, what="the lock to be released")
    capped.close()


@pytest.mark.parametrize("kind", list(CAPPED_POOLS))
def test_async_a_wait_on_a_capped_pool_never_starves_the_renewals_and_busy_names_the_holder(
    server: Server, client: redis.Redis, kind: str
) -> None:
    async def body(_: redis.asyncio.Redis) -> None:
        pools = {
            "ConnectionPool": lambda: redis.asyncio.ConnectionPool(
                host="127.0.0.1", port=server.port, max_connections=1
            ),
            "BlockingConnectionPool": lambda: redis.asyncio.BlockingConnectionPool(
                host="127.0.0.1", port=server.port, max_connections=1, timeout=5
            ),
        }
        capped = redis.asyncio.Redis(connection_pool=pools[kind]())
        locks = AsyncPathLocks(capped, KEY, ttl_ms=900)
        async with locks.upload("/F/x") as hold:
            with pytest.raises(Busy) as refused:
                await locks.upload("/F/x", wait_ms=1500)
            hold.check()
        refused_by_the_holder(refused.value, hold.token, kind)
        await asyncio.wait_for(_until_released(client), 5)
        await capped.aclose()

    run_async(server.port, body)


class CheckFails(redis.Redis):
    """A client whose `PATHLOCK.CHECK` never reaches the server."""

    def execute_command(self, *args: Any, **options: Any) -> Any:
        if args[0] == "PATHLOCK.CHECK":
            raise redis.ConnectionError("the check was cut off")
        return super().execute_command(*args, **options)


def test_busy_whose_check_failed_says_the_blockers_are_unknown(
    server: Server, client: redis.Redis
) -> None:
    locks = PathLocks(CheckFails(host="127.0.0.1", port=server.port), KEY)
    with PathLocks(client, KEY).upload("/F/x"):
        for wait_ms in (0, 50):
            with pytest.raises(Busy) as refused:
                locks.upload("/F/x", wait_ms=wait_ms)
            busy = refused.value
            assert busy.blockers == () and isinstance(busy.check_error, redis.ConnectionError)
            assert busy.__cause__ is busy.check_error
            assert "nothing holds" not in str(busy)
            assert "could not be read (ConnectionError: the check was cut off)" in str(busy)


def test_busy_whose_check_is_refused_by_acl_says_the_blockers_are_unknown(
    server: Server, client: redis.Redis
) -> None:
    """A user that may do anything but `PATHLOCK.CHECK` gets `Busy` with the `NOPERM` as its
    `check_error`, from the sync and the asyncio client, never the `NOPERM` alone."""
    client.execute_command(
        "ACL", "SETUSER", "nocheck", "reset", "on", ">pw", "~*", "&*", "+@all", "-pathlock.check"
    )

    def unknown(busy: Busy) -> None:
        assert busy.blockers == () and isinstance(busy.check_error, NoPermissionError)
        assert busy.__cause__ is busy.check_error
        assert str(busy) == (
            json.loads((REPO / "clients/contract/contract.json").read_text())["messages"][
                "busy_unread"
            ]
            .replace("{locks}", "WRITE /F/x")
            .replace("{key}", KEY)
            .replace("{check_error}", f"NoPermissionError: {busy.check_error}")
        )

    async def body(aclient: redis.asyncio.Redis) -> None:
        for wait_ms in (0, 50):
            with pytest.raises(Busy) as refused:
                await AsyncPathLocks(aclient, KEY).upload("/F/x", wait_ms=wait_ms)
            unknown(refused.value)

    try:
        with PathLocks(client, KEY).upload("/F/x"):
            nocheck = redis.Redis(
                host="127.0.0.1", port=server.port, username="nocheck", password="pw"
            )
            for wait_ms in (0, 50):
                with pytest.raises(Busy) as refused:
                    PathLocks(nocheck, KEY).upload("/F/x", wait_ms=wait_ms)
                unknown(refused.value)
            nocheck.close()
            run_async(server.port, body, username="nocheck", password="pw")
    finally:
        client.execute_command("ACL", "DELUSER", "nocheck")


# A client of the wrong kind for the handle.


def test_a_client_of_the_wrong_kind_is_refused_before_anything_is_sent(
    server: Server, client: redis.Redis
) -> None:
    aclient = redis.asyncio.Redis(host="127.0.0.1", port=server.port)
    acluster = redis.asyncio.RedisCluster(host="127.0.0.1", port=server.port)
    with warnings.catch_warnings():
        # A coroutine made and never awaited would warn: nothing may be called on the client.
        warnings.simplefilter("error")
        for wrong in (aclient, acluster):
            with pytest.raises(TypeError, match="use AsyncPathLocks with a redis.asyncio client"):
                PathLocks(wrong, KEY)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="use PathLocks with a blocking redis client"):
            AsyncPathLocks(client, KEY)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match=r"takes a redis.Redis or a redis.RedisCluster, not a "):
            PathLocks("redis://localhost", KEY)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="not a pipeline"):
            PathLocks(client.pipeline(), KEY)
    assert held(client) == []
    asyncio.run(aclient.aclose())


@pytest.mark.skipif(importlib.util.find_spec("mypy") is None, reason="mypy is not installed")
def test_mypy_refuses_a_client_of_the_wrong_kind_and_a_mode_that_is_none(tmp_path: Path) -> None:
    """The handles' client parameter and the lock requests' mode are typed, so a type checker
    says so before anything runs."""
    source = tmp_path / "wrong.py"
    source.write_text(
        "import redis\n"
        "import redis.asyncio\n"
        "from pathlock import AsyncPathLocks, PathLocks\n"
        'PathLocks(redis.Redis(), "k").lock([("WRITE", "/X"), ("READ", "/Y")])\n'
        'AsyncPathLocks(redis.asyncio.Redis(), "k")\n'
        'PathLocks(redis.asyncio.Redis(), "k")\n'
        'AsyncPathLocks(redis.Redis(), "k")\n'
        'PathLocks(redis.Redis(), "k").lock([("EXCL", "/X")])\n'
    )
    checked = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--cache-dir", os.devnull,
         str(source)],
        capture_output=True,
        text=True,
        # This checkout's package, whether or not it is the one installed.
        env={**os.environ, "MYPYPATH": str(Path(__file__).resolve().parents[1] / "src")},
    )
    errors = [line for line in checked.stdout.splitlines() if ": error:" in line]
    assert [line.split(":")[1] for line in errors] == ["6", "7", "8"], checked.stdout
    assert all("[arg-type]" in line or "[list-item]" in line for line in errors), checked.stdout
