"""How the `pathlock` command reaches a server: the options redis-cli users know (`-h`, `-p`,
`-a`, `--user`, `-n`, `--tls` with `--cacert`, `--cacertdir`, `--cert`, `--key`, `--insecure`,
`-c`) or `--url`, and a cluster found by asking the server.

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
    # redis-cli's names for the TLS settings; each needs --tls (or a rediss:// URL).
    group.add_argument(
        "--cacert",
        dest="tls_cacert",
        default=default(None),
        metavar="FILE",
        help="trust the CA certificates of this PEM file (with --tls)",
    )
    group.add_argument(
        "--cacertdir",
        dest="tls_cacertdir",
        default=default(None),
        metavar="DIR",
        help="trust the CA certificates of this directory (with --tls)",
    )
    group.add_argument(
        "--cert",
        dest="tls_cert",
        default=default(None),
        metavar="FILE",
        help="the client's certificate, for a server that asks for one (with --tls)",
    )
    # Not `key`, which is the project key of the subcommands.
    group.add_argument(
        "--key",
        dest="tls_key",
        default=default(None),
        metavar="FILE",
        help="the private key of --cert",
    )
    group.add_argument(
        "--insecure",
        dest="tls_insecure",
        action="store_true",
        default=default(False),
        help="do not verify the server's certificate nor its host name (with --tls)",
    )
    group.add_argument(
        "-c",
        "--cluster",
        action="store_true",
        default=default(False),
        help="a Redis Cluster (found by itself when the server says so)",
    )


#: The TLS options (as redis-cli names them) and the redis-py connection argument each sets.
TLS_OPTIONS = {
    "--cacert": "ssl_ca_certs",
    "--cacertdir": "ssl_ca_path",
    "--cert": "ssl_certfile",
    "--key": "ssl_keyfile",
}


def _tls_option(options: argparse.Namespace, name: str) -> Any:
    """The value of a TLS option, by its name on the command line (`--key` is `tls_key`)."""
    return getattr(options, "tls_" + name[2:])


def _uses_tls(options: argparse.Namespace) -> bool:
    return bool(options.tls) or (options.url or "").startswith("rediss://")


def tls_problem(options: argparse.Namespace) -> Optional[str]:
    """Why the TLS options cannot be used together, if they cannot: a TLS setting without TLS
    would be ignored, and a connection the user meant to protect would go out in the clear."""
    given = [name for name in (*TLS_OPTIONS, "--insecure") if _tls_option(options, name)]
    if options.url and options.tls and not options.url.startswith("rediss://"):
        return "--tls with --url needs a rediss:// URL"
    if given and not _uses_tls(options):
        return f"{', '.join(given)} needs --tls (or a rediss:// URL)"
    if options.tls_key and not options.tls_cert:
        return "--key needs --cert"
    return None


def _tls_kwargs(options: argparse.Namespace) -> Dict[str, Any]:
    """redis-py's connection arguments for the TLS options given (none without TLS)."""
    if not _uses_tls(options):
        return {}
    kwargs: Dict[str, Any] = {
        argument: _tls_option(options, name)
        for name, argument in TLS_OPTIONS.items()
        if _tls_option(options, name)
    }
    if options.tls_insecure:
        kwargs.update(ssl_cert_reqs="none", ssl_check_hostname=False)
    return kwargs


def connect(options: argparse.Namespace) -> Client:
    """A client of the server or cluster the options name (checked by `tls_problem` first)."""
    password = options.password or os.environ.get("REDISCLI_AUTH") or None
    common: Dict[str, Any] = dict(socket_timeout=TIMEOUT_S, socket_connect_timeout=TIMEOUT_S)
    tls = _tls_kwargs(options)
    if options.url:
        single: redis.Redis = redis.Redis.from_url(options.url, **common, **tls)
    else:
        single = redis.Redis(
            host=options.host,
            port=options.port,
            db=options.db,
            username=options.user,
            password=password,
            ssl=options.tls,
            **common,
            **tls,
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
        ssl=_uses_tls(options),
        **common,
        **tls,
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
