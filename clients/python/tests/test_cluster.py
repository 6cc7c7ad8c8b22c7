"""Both handles on a real three-master Redis Cluster: each project key is routed to its shard."""

from __future__ import annotations

import asyncio
import time
from typing import List

import pytest
import redis.asyncio.cluster
from redis.cluster import RedisCluster

from helpers import held
from servers import Server

from pathlock import AsyncPathLocks, Busy, NotReplicated, PathLocks

KEYS = ["proj:a", "proj:b", "proj:c", "proj:d"]


def test_keys_live_on_more_than_one_shard(cluster_client: RedisCluster) -> None:
    shards = {cluster_client.get_node_from_key(key).name for key in KEYS}
    assert len(shards) >= 2


def test_sync_handle_on_a_cluster(cluster_client: RedisCluster) -> None:
    leases = []
    for key in KEYS:
        locks = PathLocks(cluster_client, key, ttl_ms=300)
        lease = locks.move("/A/C", "/B")
        with pytest.raises(Busy) as refused:
            PathLocks(cluster_client, key).upload("/A/C/x")
        assert [b.token for b in refused.value.blockers] == [lease.token]
        leases.append(lease)
    time.sleep(1.5)
    for key, lease in zip(KEYS, leases):
        assert not lease.lost.is_set()
        assert sorted(held(cluster_client, key)) == [
            ("WRITE", "/A/C", lease.token),
            ("WRITE", "/B/C", lease.token),
        ]
    cluster_client.delete(KEYS[0])
    assert leases[0].lost.wait(0.1 + 0.25)
    for lease in leases:
        lease.release()
    for key in KEYS:
        with PathLocks(cluster_client, key).upload("/A/C/x"):
            pass
        assert held(cluster_client, key) == []


def test_sync_replicas_on_a_cluster_without_replicas(cluster_client: RedisCluster) -> None:
    for key in KEYS:
        with pytest.raises(NotReplicated):
            PathLocks(cluster_client, key, replicas=1, replicas_timeout_ms=100).upload("/A")
        assert held(cluster_client, key) == []


def test_async_handle_on_a_cluster(
    cluster_nodes: List[Server], cluster_client: RedisCluster
) -> None:
    async def body() -> None:
        aclient = redis.asyncio.cluster.RedisCluster(host="127.0.0.1", port=cluster_nodes[1].port)
        try:
            leases = []
            for key in KEYS:
                lease = await AsyncPathLocks(aclient, key, ttl_ms=300).copy("/A/a.txt", "/B")
                with pytest.raises(Busy) as refused:
                    await AsyncPathLocks(aclient, key).delete("/B")
                assert [b.token for b in refused.value.blockers] == [lease.token]
                leases.append(lease)
            await asyncio.sleep(1.5)
            for key, lease in zip(KEYS, leases):
                assert not lease.lost.is_set()
                assert sorted(held(cluster_client, key)) == [
                    ("READ", "/A/a.txt", lease.token),
                    ("WRITE", "/B/a.txt", lease.token),
                ]
            cluster_client.delete(KEYS[1])
            await asyncio.wait_for(leases[1].lost.wait(), 0.1 + 0.25)
            for lease in leases:
                await lease.release()
            for key in KEYS:
                assert held(cluster_client, key) == []
                with pytest.raises(NotReplicated):
                    await AsyncPathLocks(aclient, key, replicas=1, replicas_timeout_ms=100).upload(
                        "/A"
                    )
                assert held(cluster_client, key) == []
        finally:
            await aclient.aclose()

    asyncio.run(body())
