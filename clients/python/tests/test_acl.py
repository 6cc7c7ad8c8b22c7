"""The application user of docs/operations.md's ACL recipe (the lock commands on proj:* keys,
nothing else) uses every feature of the client but `replicas`, which needs WAIT: a cancelled
waiting acquire closes its connection, which takes the request off the server's queue, and an
acquire with replicas fails with the server's NOPERM and holds nothing."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, Iterator, List

import pytest
import redis
import redis.asyncio
import redis.asyncio.cluster
from redis.cluster import RedisCluster

from helpers import KEY, held, run_async
from servers import Server, cluster

from pathlock import AsyncPathLocks, PathLocks


def set_recipe_user(server: Server, *extra: str) -> None:
    """Makes the recipe user `app` (password `pw`) on the server, with extra rules. ACL users are
    per node: a cluster's test makes it on every node."""
    admin = server.client()
    categories = [c.decode() for c in admin.execute_command("ACL", "CAT")]
    rules = ["+@pathlock"]
    if "pathlock" not in categories:
        commands = ("acquire", "release", "renew", "locks", "check", "waiters")
        rules = [f"+pathlock.{c}" for c in commands]
    admin.execute_command("ACL", "SETUSER", "app", "reset", "on", ">pw", "~proj:*", *rules, *extra)
    admin.close()


@pytest.fixture
def app_user(server: Server) -> Iterator[None]:
    """The recipe user `app` (password `pw`): the pathlock category where the server has module
    categories, the commands by name on Redis 7.0."""
    admin = server.client()
    set_recipe_user(server)
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


# The rules docs/operations.md adds to the recipe on a cluster: the slot map (CLUSTER SLOTS) and
# redis-py's COMMAND, which RedisCluster reads at connect; CLUSTER NODES (Lettuce), CLUSTER INFO
# and PING (ioredis, the Node client, redis-rs) are for the other clients.
CLUSTER_RULES = ("+cluster|slots", "+cluster|nodes", "+cluster|info", "+command", "+ping")
CLUSTER_KEYS = [f"proj:acl{i}" for i in range(4)]


async def release_later(lease: Any, seconds: float) -> None:
    await asyncio.sleep(seconds)
    await lease.release()


@pytest.fixture(scope="module")
def cluster_nodes() -> Iterator[List[Server]]:
    nodes = cluster(3)
    yield nodes
    for node in nodes:
        node.close()


def test_the_recipe_user_with_the_cluster_rules_locks_and_waits_on_a_cluster(
    cluster_nodes: List[Server],
) -> None:
    for node in cluster_nodes:
        set_recipe_user(node, *CLUSTER_RULES)
    port = cluster_nodes[0].port
    client = RedisCluster(host="127.0.0.1", port=port, username="app", password="pw")
    try:
        for key in CLUSTER_KEYS:
            locks = PathLocks(client, key)
            holder = locks.delete("/A", ttl_ms=300)
            threading.Timer(0.4, holder.release).start()
            waited = locks.upload("/A/f", wait_ms=5000)
            assert not holder.lost.is_set(), "renewed past its TTL"
            waited.release()
            assert held(client, key) == []
    finally:
        client.close()

    async def body() -> None:
        aclient = redis.asyncio.cluster.RedisCluster(
            host="127.0.0.1", port=port, username="app", password="pw"
        )
        try:
            for key in CLUSTER_KEYS:
                locks = AsyncPathLocks(aclient, key)
                holder = await locks.delete("/A", ttl_ms=300)
                releasing = asyncio.ensure_future(release_later(holder, 0.4))
                waited = await locks.upload("/A/f", wait_ms=5000)
                await releasing
                await waited.release()
                assert await locks.locks() == []
        finally:
            await aclient.aclose()

    asyncio.run(body())


def test_the_recipe_user_without_the_cluster_rules_cannot_connect_to_a_cluster(
    cluster_nodes: List[Server],
) -> None:
    """redis-py reports the refused CLUSTER SLOTS as a node without cluster mode, and, given
    CLUSTER SLOTS alone, fails on the refused COMMAND: both when the client is made."""
    port = cluster_nodes[0].port
    for node in cluster_nodes:
        set_recipe_user(node)
    with pytest.raises(redis.exceptions.RedisClusterException, match="Cluster mode is not enabled"):
        RedisCluster(host="127.0.0.1", port=port, username="app", password="pw")
    for node in cluster_nodes:
        set_recipe_user(node, "+cluster|slots")
    with pytest.raises(redis.exceptions.NoPermissionError, match="'command'"):
        RedisCluster(host="127.0.0.1", port=port, username="app", password="pw")
