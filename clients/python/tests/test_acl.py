"""The application user of docs/operations.md's ACL recipe (the lock commands on proj:* keys,
nothing else) uses every feature of the client but `replicas`, which needs WAIT: a cancelled
waiting acquire closes its connection, which takes the request off the server's queue, and an
acquire with replicas fails with the server's NOPERM and holds nothing."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, Iterator

import pytest
import redis
import redis.asyncio

from helpers import KEY, held, run_async
from servers import Server

from pathlock import AsyncPathLocks, PathLocks


@pytest.fixture
def app_user(server: Server) -> Iterator[None]:
    """The recipe user `app` (password `pw`): the pathlock category where the server has module
    categories, the commands by name on Redis 7.0."""
    admin = server.client()
    categories = [c.decode() for c in admin.execute_command("ACL", "CAT")]
    rules = ["+@pathlock"]
    if "pathlock" not in categories:
        commands = ("acquire", "release", "renew", "locks", "check", "waiters")
        rules = [f"+pathlock.{c}" for c in commands]
    admin.execute_command("ACL", "SETUSER", "app", "reset", "on", ">pw", "~proj:*", *rules)
    yield
    admin.execute_command("ACL", "DELUSER", "app")
    admin.close()


def test_the_recipe_user_locks_waits_and_is_refused_replicas_cleanly(
    server: Server, client: redis.Redis, app_user: None
) -> None:
    locks = PathLocks(server.client(username="app", password="pw"), KEY)
    holder = locks.delete("/A", ttl_ms=300)
    time.sleep(0.5)
    assert not holder.lost.is_set(), "renewed past its TTL"
    threading.Timer(0.3, holder.release).start()
    waited = locks.upload("/A/f", wait_ms=5000)
    with pytest.raises(redis.exceptions.NoPermissionError, match="wait"):
        locks.upload("/B", replicas=1, replicas_timeout_ms=100)
    assert [path for _mode, path, _token in held(client)] == ["/A/f"]
    waited.release()


def test_the_recipe_user_cancels_a_waiting_acquire(
    server: Server, client: redis.Redis, app_user: None
) -> None:
    async def body(aclient: Any) -> None:
        locks = AsyncPathLocks(aclient, KEY)
        async with locks.upload("/F/x"):
            waiter = asyncio.ensure_future(locks.upload("/F/x", wait_ms=30000))
            while not await locks.waiters():
                await asyncio.sleep(0.005)
            waiter.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiter
            assert client.execute_command("PATHLOCK.WAITERS", KEY) == []

    run_async(server.port, body, username="app", password="pw")
