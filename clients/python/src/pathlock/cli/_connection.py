"""How the `pathlock` command reaches a server: the options redis-cli users know (`-h`, `-p`,
`-a`, `--user`, `-n`, `--tls`, `-c`) or `--url`, and a cluster found by asking the server.

A server that answers `cluster_enabled:1` in `INFO cluster` is reached through
`redis.RedisCluster`, so `-c` is needed only to insist on it.
"""

from __future__ import annotations

import argparse
import os
from typing import Any, Dict, List, Optional, Union

import redis
from redis.cluster import RedisCluster

Client = Union[redis.Redis, RedisCluster]

#: Seconds a command may take before the command gives up on the server.
TIMEOUT_S = 10.0


def add_options(parser: argparse.ArgumentParser, *, defaults: bool) -> None:
    """The connection options; given before the subcommand or after it. Without `defaults` an
    option left out stays unset, so a subcommand's copy never hides the main parser's value."""

    def default(value: Any) -> Any:
        return value if defaults else argparse.SUPPRESS

    group = parser.add_argument_group("connection (as redis-cli)")
    group.add_argument(
        "--url", default=default(None), help="redis://[user:pass@]host:port/db, rediss://, unix://"
    )
    group.add_argument(
        "-h", "--host", default=default("127.0.0.1"), help="server host (default 127.0.0.1)"
    )
    group.add_argument(
        "-p", "--port", type=int, default=default(6379), help="server port (default 6379)"
    )
    group.add_argument(
        "-a", "--pass", dest="password", default=default(None), help="password (or REDISCLI_AUTH)"
    )
    group.add_argument("--user", default=default(None), help="ACL user name")
    group.add_argument(
        "-n", "--db", type=int, default=default(0), help="database number (default 0)"
    )
    group.add_argument(
        "--tls", action="store_true", default=default(False), help="connect with TLS"
    )
    group.add_argument(
        "-c",
        "--cluster",
        action="store_true",
        default=default(False),
        help="a Redis Cluster (found by itself when the server says so)",
    )


def connect(options: argparse.Namespace) -> Client:
    """A client of the server or cluster the options name."""
    password = options.password or os.environ.get("REDISCLI_AUTH") or None
    common: Dict[str, Any] = dict(socket_timeout=TIMEOUT_S, socket_connect_timeout=TIMEOUT_S)
    if options.url:
        single: redis.Redis = redis.Redis.from_url(options.url, **common)
    else:
        single = redis.Redis(
            host=options.host,
            port=options.port,
            db=options.db,
            username=options.user,
            password=password,
            ssl=options.tls,
            **common,
        )
    if not options.cluster and not _cluster_enabled(single):
        return single
    kwargs = single.connection_pool.connection_kwargs
    single.close()
    return RedisCluster(
        host=kwargs.get("host", options.host),
        port=kwargs.get("port", options.port),
        username=kwargs.get("username"),
        password=kwargs.get("password"),
        ssl=options.tls or (options.url or "").startswith("rediss://"),
        **common,
    )


def _cluster_enabled(client: redis.Redis) -> bool:
    try:
        return str(client.info("cluster").get("cluster_enabled", 0)) == "1"
    except redis.ResponseError:
        return False  # A server that knows no `cluster` section is not one.


def primaries(client: Client) -> List[redis.Redis]:
    """One client per server that holds keys: the server itself, or each cluster primary."""
    if isinstance(client, RedisCluster):
        return [node.redis_connection for node in _primary_nodes(client)]
    return [client]


def _primary_nodes(client: RedisCluster) -> List[Any]:
    # `get_primaries` is untyped in some redis-py releases and typed in others.
    nodes: List[Any] = getattr(client, "get_primaries")()
    return nodes


def describe(client: Client, node: Optional[redis.Redis] = None) -> str:
    """`host:port` of a node (or of the client's own server)."""
    target = node if node is not None else client
    if isinstance(target, RedisCluster):
        return ", ".join(f"{n.host}:{n.port}" for n in _primary_nodes(target))
    kwargs = target.connection_pool.connection_kwargs
    if "path" in kwargs:
        return str(kwargs["path"])
    return f"{kwargs.get('host', '127.0.0.1')}:{kwargs.get('port', 6379)}"
