from __future__ import annotations

from typing import Iterator, List

import pytest
import redis
from redis.cluster import RedisCluster

from servers import Server, cluster


@pytest.fixture(scope="session")
def shared_server() -> Iterator[Server]:
    server = Server()
    yield server
    server.close()


@pytest.fixture
def server(shared_server: Server) -> Server:
    """A running server with an empty database, shared by the tests that do not stop it."""
    shared_server.client().flushall()
    return shared_server


@pytest.fixture
def own_server() -> Iterator[Server]:
    """A server of the test's own, which it may pause or stop."""
    server = Server()
    yield server
    server.close()


@pytest.fixture
def client(server: Server) -> Iterator["redis.Redis"]:
    c = server.client()
    yield c
    c.close()


@pytest.fixture(scope="session")
def cluster_nodes() -> Iterator[List[Server]]:
    nodes = cluster(3)
    yield nodes
    for node in nodes:
        node.close()


@pytest.fixture
def cluster_client(cluster_nodes: List[Server]) -> Iterator[RedisCluster]:
    c = RedisCluster(host="127.0.0.1", port=cluster_nodes[0].port)
    for key in ("proj:a", "proj:b", "proj:c", "proj:d"):
        c.delete(key)
    yield c
    c.close()
