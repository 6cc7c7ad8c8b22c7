from __future__ import annotations

from typing import Iterator

import pytest
import redis

from servers import Server


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
