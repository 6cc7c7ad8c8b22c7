"""What each subcommand shows, read from the server as plain data (dicts and lists, as `--json`
prints them): the locks of a project, what blocks a request, the queue, the busiest projects.

Everything is read with the client's public pieces (`PathLocks.locks`, `.check`, `.waiters`)
and `SCAN ... TYPE path-lock`; nothing here changes the server.
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, List, Optional, Tuple, cast

import redis

from .. import Blocker, LockRequest, PathLocks, Waiter
from ._connection import Client, describe, primaries

#: The module's type name, for `SCAN ... TYPE`.
TYPE_NAME = "path-lock"
#: Keys `SCAN` looks at per call.
SCAN_COUNT = 1000


def lock_dict(lock: Blocker) -> Dict[str, Any]:
    return {
        "path": lock.path,
        "mode": lock.mode,
        "token": lock.token,
        "ttl_ms": lock.ttl_ms,
        "fence": lock.fence,
        "note": lock.note,
    }


def waiter_dict(waiter: Waiter, position: int) -> Dict[str, Any]:
    return {
        "position": position,
        "token": waiter.token,
        "locks": [{"mode": mode, "path": path} for mode, path in waiter.locks],
        "waited_ms": waiter.waited_ms,
        "left_ms": waiter.left_ms,
        "note": waiter.note,
    }


def tree(client: Client, key: str, path: Optional[str]) -> Dict[str, Any]:
    """The live locks at or under `path` and the requests waiting there."""
    project = PathLocks(client, key)
    locks = project.locks(path)
    waiters = project.waiters(path)
    return {
        "key": key,
        "path": normalise(path or "/"),
        "exists": bool(locks or waiters) or _exists(client, key),
        "locks": [lock_dict(lock) for lock in locks],
        "waiters": [waiter_dict(w, i + 1) for i, w in enumerate(waiters)],
    }


def why(client: Client, key: str, mode: str, path: str, token: Optional[str]) -> Dict[str, Any]:
    """The locks that block `mode path` now, and the waiters queued for paths it conflicts with:
    an acquire without `WAIT` is refused while either is there, one with `WAIT` queues behind
    the waiters."""
    project = PathLocks(client, key)
    # argparse let READ or WRITE through, upper-cased: the two modes LockRequest names.
    blockers = project.check([cast(LockRequest, (mode, path))], token=token)
    queue = project.waiters()
    ahead = [
        waiter_dict(w, i + 1)
        for i, w in enumerate(queue)
        if w.token != token and any(conflicts((mode, path), held) for held in w.locks)
    ]
    return {
        "key": key,
        "request": {"mode": mode, "path": normalise(path)},
        "token": token,
        "blockers": [lock_dict(lock) for lock in blockers],
        "waiters": ahead,
        "queued": len(queue),
        "free": not blockers and not ahead,
    }


def waiters(client: Client, key: str, path: Optional[str]) -> Dict[str, Any]:
    listed = PathLocks(client, key).waiters(path)
    return {
        "key": key,
        "path": normalise(path or "/"),
        "waiters": [waiter_dict(w, i + 1) for i, w in enumerate(listed)],
    }


def top(
    client: Client, *, count: int, max_keys: int, max_scans: int, match: Optional[str], by: str
) -> Dict[str, Any]:
    """The `count` busiest projects among at most `max_keys` project keys, found with at most
    `max_scans` `SCAN` calls per server (each looking at about SCAN_COUNT keys): each project
    costs one `LOCKS` and one `WAITERS`, which read every lock and waiter it has."""
    projects: List[Dict[str, Any]] = []
    complete = True
    nodes = primaries(client)
    for node in nodes:
        room = max_keys - len(projects)
        if room <= 0:
            complete = False
            break
        found, finished = _project_keys(node, room, max_scans, match)
        complete = complete and finished
        where = describe(client, node) if len(nodes) > 1 else None
        projects.extend(_project(node, key, where) for key in found)
    order = ("waiters", "locks") if by == "waiters" else ("locks", "waiters")
    projects.sort(key=lambda p: (-p[order[0]], -p[order[1]], p["key"]))
    return {
        "server": describe(client),
        "by": by,
        "projects_seen": len(projects),
        "complete": complete,
        "projects": projects[:count],
    }


def _project_keys(
    node: redis.Redis, limit: int, max_scans: int, match: Optional[str]
) -> Tuple[List[str], bool]:
    """Up to `limit` project keys of one server, and whether its whole keyspace was looked at."""
    keys: List[str] = []
    cursor = 0
    for _ in range(max_scans):
        cursor, batch = node.scan(cursor, match=match, count=SCAN_COUNT, _type=TYPE_NAME)
        keys.extend(_text(k) for k in batch)
        if len(keys) >= limit:
            return keys[:limit], cursor == 0 and len(keys) == limit
        if cursor == 0:
            return keys, True
    return keys, False


def _project(node: redis.Redis, key: str, where: Optional[str]) -> Dict[str, Any]:
    project = PathLocks(node, key)
    try:
        locks = project.locks()
        queue = project.waiters()
    except redis.ResponseError:
        # Gone or moved (a reshard) since SCAN found it: counted as empty.
        locks, queue = [], []
    entry: Dict[str, Any] = {
        "key": key,
        "locks": len(locks),
        "owners": len({lock.token for lock in locks}),
        "waiters": len(queue),
        "longest_wait_ms": max((w.waited_ms for w in queue), default=0),
    }
    if where is not None:
        entry["node"] = where
    return entry


def _exists(client: Client, key: str) -> bool:
    return bool(client.exists(key))


def _text(value: Any) -> str:
    return value.decode("utf-8", "surrogateescape") if isinstance(value, bytes) else str(value)


def normalise(path: str) -> str:
    """A path as the module normalises it (`/A//C/`, `A/C` and `/A/./C` are `/A/C`), for
    comparing the paths a user typed with those the server lists."""
    segments = [s for s in path.split("/") if s not in ("", ".")]
    return "/" + "/".join(segments)


def segments(path: str) -> List[str]:
    return [s for s in normalise(path).split("/") if s]


def related(a: str, b: str) -> bool:
    """Whether one path is equal to or above the other."""
    x, y = segments(a), segments(b)
    shorter = min(len(x), len(y))
    return x[:shorter] == y[:shorter]


def conflicts(asked: Tuple[str, str], held: Iterable[str]) -> bool:
    """Whether `(mode, path)` and another request's `(mode, path)` cannot be held by two owners."""
    mode, path = asked
    other_mode, other_path = tuple(held)
    return "WRITE" in (mode.upper(), other_mode.upper()) and related(path, other_path)
