"""The README's cloud-drive operations, each mapped to the locks it needs, shared by both handles.

Level 2: builds on `_requests` and `_types`.
"""

from __future__ import annotations

from typing import (
    TYPE_CHECKING,
    Any,
    Callable,
    Generic,
    Iterable,
    List,
    Optional,
    Sequence,
    Tuple,
    TypeVar,
)

import redis.asyncio.client
import redis.asyncio.cluster
import redis.client
import redis.cluster

from ._requests import Note, Options, checked, default_note, described, into, named, sibling
from ._types import Key, LockRequest

if TYPE_CHECKING:
    # Only for type checkers (typing.Unpack is Python 3.11+); never imported at run time.
    from typing_extensions import TypedDict, Unpack

    class Overrides(TypedDict, total=False):
        """What every operation takes to override the handle's defaults for one lease."""

        ttl_ms: float
        wait_ms: float
        replicas: int
        replicas_timeout_ms: float
        note: Note
        on_lost: Callable[[Any], Any]


#: Clients that queue commands instead of sending them; refused by both handles.
PIPELINES = (
    redis.client.Pipeline,
    redis.cluster.ClusterPipeline,
    redis.asyncio.client.Pipeline,
    redis.asyncio.cluster.ClusterPipeline,
)

L = TypeVar("L")
C = TypeVar("C")


class Operations(Generic[C, L]):
    """Every operation asks for its locks in one all-or-nothing `PATHLOCK.ACQUIRE`.

    Each takes the keyword arguments `ttl_ms`, `wait_ms`, `replicas`, `replicas_timeout_ms`,
    `note` and `on_lost`, overriding the handle's defaults. The note sent is the call's, else the
    handle's, else one naming the operation (`"move /A/C -> /B"`). The helpers refuse an empty
    path and the project root; `lock()` takes the root when it is written out
    (`lock([("WRITE", "/")])`). Nothing is sent when an argument is refused (`ValueError`).
    """

    #: The client classes this handle works on, and the other handle's name and clients, for
    #: the message that refuses any other kind (`PathLocks` is blocking, `AsyncPathLocks`
    #: asyncio; each would otherwise fail only once a command was sent, or granted).
    _clients: Tuple[type, ...] = ()
    _wants = ""
    _other_clients: Tuple[type, ...] = ()
    _instead = ""

    def __init__(
        self,
        client: C,
        key: Key,
        *,
        ttl_ms: float = 30000,
        wait_ms: float = 0,
        replicas: int = 0,
        replicas_timeout_ms: float = 1000,
        note: Optional[Note] = None,
        on_lost: Optional[Callable[[Any], Any]] = None,
    ) -> None:
        handle = type(self).__name__
        if not isinstance(client, self._clients):
            got = f"{type(client).__module__}.{type(client).__qualname__}"
            hint = f": {self._instead}" if isinstance(client, self._other_clients) else ""
            raise TypeError(f"{handle} takes {self._wants}, not a {got}{hint}")
        if isinstance(client, PIPELINES):
            # A pipeline is a client too, but queues the commands until it is executed.
            raise TypeError(f"{handle} takes {self._wants}, not a pipeline")
        #: The redis-py client (one server or a cluster) the leases go through.
        self.client = client
        # Its `execute_command`, which some redis-py versions leave unannotated on a cluster.
        untyped: Any = client
        self._command: Callable[..., Any] = untyped.execute_command
        self.key = key
        #: The defaults of every lease, checked (a `ValueError` names what is wrong).
        self.options = Options(ttl_ms, wait_ms, replicas, replicas_timeout_ms, note, on_lost)

    def _acquire(self, locks: Sequence[LockRequest], options: Options) -> L:
        raise NotImplementedError

    def _operation(self, locks: Sequence[LockRequest], name: str, overrides: Any) -> L:
        options = self.options.override(**overrides)
        if overrides.get("note") is None and self.options.note is None:
            options = options.override(note=default_note(name))
        return self._acquire(locks, options)

    def lock(self, requests: Iterable[LockRequest], **overrides: Unpack[Overrides]) -> L:
        """Any `(mode, path)` pairs, `mode` being `"READ"` or `"WRITE"`; `"/"` is the whole
        project."""
        locks = checked(list(requests))
        return self._operation(locks, described(locks), overrides)

    def upload(self, path: str, **overrides: Unpack[Overrides]) -> L:
        """`WRITE path`."""
        return self._operation([("WRITE", named(path))], f"upload {path}", overrides)

    def create(self, path: str, **overrides: Unpack[Overrides]) -> L:
        """`WRITE path` (a new file or folder)."""
        return self._operation([("WRITE", named(path))], f"create {path}", overrides)

    def read(self, path: str, **overrides: Unpack[Overrides]) -> L:
        """`READ path`."""
        return self._operation([("READ", named(path))], f"read {path}", overrides)

    def rename(self, path: str, new_name: str, **overrides: Unpack[Overrides]) -> L:
        """`WRITE path`, `WRITE <its folder>/new_name`: a new name in the same folder (`move`
        changes folders). A `new_name` with a `/`, empty, `.`, `..` or the current name is
        refused."""
        target = sibling(path, new_name)
        locks: List[LockRequest] = [("WRITE", path), ("WRITE", target)]
        return self._operation(locks, f"rename {path} -> {target}", overrides)

    def move(self, path: str, into_folder: str, **overrides: Unpack[Overrides]) -> L:
        """`WRITE path`, `WRITE into_folder/<last segment of path>`. Refused when `into_folder`
        is `path`, inside it, or the folder `path` is already in."""
        locks: List[LockRequest] = [("WRITE", path), ("WRITE", into(into_folder, path, "move"))]
        return self._operation(locks, f"move {path} -> {into_folder}", overrides)

    def copy(self, path: str, into_folder: str, **overrides: Unpack[Overrides]) -> L:
        """`READ path`, `WRITE into_folder/<last segment of path>`, refused as `move` is."""
        locks: List[LockRequest] = [("READ", path), ("WRITE", into(into_folder, path, "copy"))]
        return self._operation(locks, f"copy {path} -> {into_folder}", overrides)

    def delete(self, path: str, **overrides: Unpack[Overrides]) -> L:
        """`WRITE path`."""
        return self._operation([("WRITE", named(path))], f"delete {path}", overrides)

    def purge(self, *paths: str, **overrides: Unpack[Overrides]) -> L:
        """`WRITE` each path: emptying the recycle bin."""
        locks = checked([("WRITE", named(path)) for path in paths])
        return self._operation(locks, "purge " + " ".join(paths), overrides)
