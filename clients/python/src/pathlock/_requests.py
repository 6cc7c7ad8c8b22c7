"""What goes on the wire: lock requests, command arguments, and replies turned into Python values."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable, List, Optional, Sequence, Tuple, Union

from redis.exceptions import ConnectionError, TimeoutError

from ._errors import Blocker

#: One lock an operation asks for: `("READ" | "WRITE", path)`.
LockRequest = Tuple[str, str]
Key = Union[str, bytes]

MODES = ("READ", "WRITE")

#: Errors after which the command may or may not have run: an acquire is retried with its token,
#: a renewal is retried while the deadline is ahead.
CONNECTION_ERRORS = (ConnectionError, TimeoutError, OSError)

#: How long the watchdog waits before it retries a renewal that failed with a connection error,
#: as a fraction of the renewal period; the lease is lost anyway once its deadline passes.
RETRY_FRACTION = 0.25


@dataclass(frozen=True)
class Options:
    """The settings of one acquire: the handle's defaults with the call's overrides applied."""

    ttl_ms: int
    wait_ms: int
    replicas: int
    replicas_timeout_ms: int
    on_lost: Optional[Callable[[Any], Any]]

    def __post_init__(self) -> None:
        for name, low in (
            ("ttl_ms", 1),
            ("wait_ms", 0),
            ("replicas", 0),
            ("replicas_timeout_ms", 0),
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise ValueError(f"{name} must be an integer of at least {low}, not {value!r}")

    def override(
        self,
        ttl_ms: Optional[int],
        wait_ms: Optional[int],
        replicas: Optional[int],
        on_lost: Optional[Callable[[Any], Any]],
    ) -> "Options":
        if ttl_ms is None and wait_ms is None and replicas is None and on_lost is None:
            return self
        return Options(
            ttl_ms=self.ttl_ms if ttl_ms is None else ttl_ms,
            wait_ms=self.wait_ms if wait_ms is None else wait_ms,
            replicas=self.replicas if replicas is None else replicas,
            replicas_timeout_ms=self.replicas_timeout_ms,
            on_lost=self.on_lost if on_lost is None else on_lost,
        )

    @property
    def period(self) -> float:
        """Seconds between renewals: a third of the TTL, so two may fail before the lease ends."""
        return self.ttl_ms / 3000.0


def new_token() -> str:
    """A random UUID v4 in its canonical form, which the module stores compactly.

    The same as `str(uuid.uuid4())`, at a fraction of its cost on every acquire.
    """
    b = bytearray(os.urandom(16))
    b[6] = (b[6] & 0x0F) | 0x40
    b[8] = (b[8] & 0x3F) | 0x80
    h = b.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def segments(path: str) -> List[str]:
    """The path's segments as the module counts them: empty ones and `.` are dropped."""
    return [s for s in path.split("/") if s not in ("", ".")]


def into(folder: str, path: str) -> str:
    """Where `path` lands when it is moved or copied into `folder`."""
    parts = segments(path)
    if not parts:
        raise ValueError(f"cannot move or copy the project root ({path!r}) into a folder")
    return "/" + "/".join(segments(folder) + [parts[-1]])


def checked(locks: Sequence[LockRequest]) -> Tuple[LockRequest, ...]:
    """The requests with their modes upper-cased, or ValueError naming what is wrong."""
    result = []
    for request in locks:
        mode, path = request
        if not isinstance(mode, str) or mode.upper() not in MODES:
            raise ValueError(f"lock mode must be READ or WRITE, not {mode!r}")
        if not isinstance(path, str):
            raise ValueError(f"lock path must be a str, not {path!r}")
        result.append((mode.upper(), path))
    if not result:
        raise ValueError("an operation needs at least one lock")
    return tuple(result)


def acquire_args(
    key: Key, token: str, ttl_ms: int, wait_ms: int, locks: Sequence[LockRequest]
) -> List[Any]:
    args: List[Any] = ["PATHLOCK.ACQUIRE", key, "TOKEN", token, "TTL", ttl_ms]
    if wait_ms > 0:
        args += ["WAIT", wait_ms]
    for mode, path in locks:
        args += [mode, path]
    return args


def check_args(key: Key, token: str, locks: Sequence[LockRequest]) -> List[Any]:
    args: List[Any] = ["PATHLOCK.CHECK", key, "TOKEN", token]
    for mode, path in locks:
        args += [mode, path]
    return args


def text(value: Any) -> str:
    """A reply string as str, whether or not the Redis client decodes responses."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "surrogateescape")
    return str(value)


def fence_of(reply: Any) -> int:
    """The fence of an ACQUIRE's `[token, fence]` reply."""
    return int(reply[1])


def blockers_of(reply: Any) -> List[Blocker]:
    """CHECK's entries `[path, mode, token, ttl-ms, fence, ...]` as Blockers (the server's
    sixth field, the note, is not read yet)."""
    return [
        Blocker(text(path), text(mode), text(token), int(ttl), int(fence))
        for path, mode, token, ttl, fence, *_ in (reply or [])
    ]
