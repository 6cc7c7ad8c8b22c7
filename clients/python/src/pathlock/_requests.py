"""What goes on the wire: checked options and paths, command arguments, and replies turned into
Python values.

Level 1: builds on `_types`.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any, Callable, List, Optional, Sequence, Tuple, Union

from redis.exceptions import ConnectionError, ResponseError, TimeoutError

from ._types import Blocker, Key, LockRequest, Mode, Waiter

#: Errors after which the command may or may not have run: an acquire is retried with its token,
#: a renewal is retried while the deadline is ahead.
CONNECTION_ERRORS = (ConnectionError, TimeoutError, OSError)

#: How long the watchdog waits before it retries a renewal that failed with a connection error,
#: as a fraction of the renewal period; the lease is lost anyway once its deadline passes.
RETRY_FRACTION = 0.25

Note = Union[str, bytes]

#: Each number an acquire takes: its least value and its unit, for the message that refuses it.
LIMITS = {
    "ttl_ms": (1, "a number of milliseconds"),
    "wait_ms": (0, "a number of milliseconds (0: do not wait)"),
    "replicas": (0, "a whole number of replicas"),
    "replicas_timeout_ms": (1, "a number of milliseconds"),
}


def whole(name: str, value: Any) -> int:
    """`value` as the whole number the commands take, or ValueError naming its unit.

    A fraction of a millisecond is rounded up to the next whole one, as every client does, so a
    wait or a lease is never shorter than asked; a count of replicas is whole already.
    """
    low, unit = LIMITS[name]
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if number and name == "replicas" and not isinstance(value, int):
        number = False
    if not number or not math.isfinite(value) or value < low:
        raise ValueError(f"{name} must be {unit}, at least {low}; got {value!r}")
    return int(math.ceil(value))


class Attempts:
    """The retry rule of an acquire, for both clients: after a connection error the grant may or
    may not have happened, and sending the same token again is idempotent, so it is retried at
    least once and while the wait budget lasts, each time asking the server to wait only for
    what is left of it."""

    def __init__(self, wait_ms: float, now: float) -> None:
        # The commands take whole milliseconds, rounded up as `whole` does.
        self.wait_ms = int(math.ceil(wait_ms))
        self.budget_end = now + wait_ms / 1000.0
        #: How many attempts failed with a connection error so far.
        self.failed = 0

    def wait_now(self, now: float) -> int:
        """The WAIT of the attempt sent at `now`: all of it first, what is left after."""
        if not self.failed:
            return self.wait_ms
        return max(0, math.ceil((self.budget_end - now) * 1000))

    def pause_after_failure(self, now: float) -> Optional[float]:
        """Seconds to sleep before the next attempt, or None to give up and raise."""
        self.failed += 1
        if self.failed > 1 and now >= self.budget_end:
            return None
        return min(0.01 * 2.0**self.failed, 0.2)


@dataclass(frozen=True)
class Options:
    """The settings of one acquire: the handle's defaults with the call's overrides applied."""

    # Whole numbers once checked; a fraction of a millisecond is given as a float.
    ttl_ms: float
    wait_ms: float
    replicas: int
    replicas_timeout_ms: float
    note: Optional[Note]
    on_lost: Optional[Callable[[Any], Any]]

    def __post_init__(self) -> None:
        for name in LIMITS:
            # Frozen: the checked whole number replaces what was given.
            object.__setattr__(self, name, whole(name, getattr(self, name)))
        if self.note is not None and not isinstance(self.note, (str, bytes)):
            raise ValueError(f"note must be a str or bytes, not {self.note!r}")

    def override(
        self,
        ttl_ms: Optional[float] = None,
        wait_ms: Optional[float] = None,
        replicas: Optional[int] = None,
        replicas_timeout_ms: Optional[float] = None,
        note: Optional[Note] = None,
        on_lost: Optional[Callable[[Any], Any]] = None,
    ) -> "Options":
        """These settings with the given ones instead; None keeps the setting."""
        return Options(
            ttl_ms=self.ttl_ms if ttl_ms is None else ttl_ms,
            wait_ms=self.wait_ms if wait_ms is None else wait_ms,
            replicas=self.replicas if replicas is None else replicas,
            replicas_timeout_ms=(
                self.replicas_timeout_ms if replicas_timeout_ms is None else replicas_timeout_ms
            ),
            note=self.note if note is None else note,
            on_lost=self.on_lost if on_lost is None else on_lost,
        )

    @property
    def period(self) -> float:
        """Seconds between renewals: a third of the TTL, so two may fail before the lease ends."""
        return self.ttl_ms / 3000.0

    @property
    def blocks(self) -> bool:
        """Whether the acquire blocks its connection on the server (`WAIT` of either kind)."""
        return self.wait_ms > 0 or self.replicas > 0


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


def named(path: str, what: str = "path") -> str:
    """`path` as an operation helper takes it: a file or folder, never the whole project.

    A helper called with `""` or `/` most likely got a variable that was never set; locking the
    whole project must be asked for in so many words, with `lock([("WRITE", "/")])`.
    """
    if not isinstance(path, str):
        raise ValueError(f"{what} must be a str, not {path!r}")
    if not segments(path):
        raise ValueError(
            f"{what} {path!r} names the whole project, not a file or folder; to lock the whole "
            'project, say so: lock([("WRITE", "/")]) or lock([("READ", "/")])'
        )
    refuse_dot_dot(path, what)
    return path


def refuse_dot_dot(path: str, what: str) -> None:
    """ValueError for a path with a `..` segment, before it is sent: the server would refuse it
    with an error of its own, and every helper and `lock()` refuse it the same way here."""
    if ".." in path.split("/"):
        raise ValueError(f"{what} {path!r} has a '..' segment, which pathlock refuses")


def normalised(path: str, what: str) -> List[str]:
    """The segments of a path that an operation compares with another, `..` refused: the server
    refuses it too, and it would make `/A/../A/C` look unrelated to `/A`."""
    refuse_dot_dot(path, what)
    return segments(path)


def into(into_folder: str, path: str, operation: str) -> str:
    """Where `path` lands when it is moved or copied into `into_folder`: refused when that is
    `path` itself or inside it (a folder into itself), or when `into_folder` is the folder
    `path` is already in (the target would be the source)."""
    if not isinstance(into_folder, str) or into_folder == "":
        raise ValueError(f"into_folder must name a folder ('/' for the project root), not {into_folder!r}")
    source = normalised(named(path), "path")
    folder = normalised(into_folder, "into_folder")
    if folder[: len(source)] == source:
        raise ValueError(
            f"cannot {operation} {path} into {into_folder}: a folder cannot go into itself or "
            "its own subtree"
        )
    if folder == source[:-1]:
        raise ValueError(
            f"cannot {operation} {path} into {into_folder}: it is already in that folder (the "
            "target would be the source itself)"
        )
    return "/" + "/".join(folder + source[-1:])


def sibling(path: str, new_name: str) -> str:
    """Where `path` goes when it is renamed to `new_name`: the same folder, the new name.

    Anything but one new name is refused: rename takes a name, and `move` changes folders.
    """
    source = normalised(named(path), "path")
    if (
        not isinstance(new_name, str)
        or new_name in ("", ".", "..", source[-1])
        or "/" in new_name
    ):
        raise ValueError(
            f"rename takes a name for {path} in the same folder, not {new_name!r}: a name has "
            "no '/' and is not '', '.', '..' or the current name; to change folders, use move"
        )
    return "/" + "/".join(source[:-1] + [new_name])


def checked(locks: Sequence[LockRequest]) -> Tuple[LockRequest, ...]:
    """The requests with their modes upper-cased, or ValueError naming what is wrong. The root
    is allowed when it is written out (`/`); an empty path is refused."""
    result: List[LockRequest] = []
    for request in locks:
        mode, path = request
        if not isinstance(path, str):
            raise ValueError(f"lock path must be a str, not {path!r}")
        if path == "":
            raise ValueError("lock path is empty; write '/' to lock the whole project")
        refuse_dot_dot(path, "lock path")
        result.append((mode_of(mode), path))
    if not result:
        raise ValueError("an operation needs at least one lock")
    return tuple(result)


def mode_of(mode: Any) -> Mode:
    """`"READ"` or `"WRITE"`, in any case, as the commands take it; ValueError otherwise."""
    word = mode.upper() if isinstance(mode, str) else mode
    if word == "READ":
        return "READ"
    if word == "WRITE":
        return "WRITE"
    raise ValueError(f"lock mode must be READ or WRITE, not {mode!r}")


def described(locks: Sequence[LockRequest]) -> str:
    """The default note of `lock(requests)`."""
    return "lock " + ", ".join(f"{mode} {path}" for mode, path in locks)


def acquire_args(
    key: Key,
    token: str,
    options: Options,
    wait_ms: int,
    locks: Sequence[LockRequest],
) -> List[Any]:
    args: List[Any] = ["PATHLOCK.ACQUIRE", key, "TOKEN", token, "TTL", options.ttl_ms]
    if wait_ms > 0:
        args += ["WAIT", wait_ms]
    if options.note is not None:
        args += ["NOTE", options.note]
    for mode, path in locks:
        args += [mode, path]
    return args


def check_args(key: Key, token: Optional[str], locks: Sequence[LockRequest]) -> List[Any]:
    args: List[Any] = ["PATHLOCK.CHECK", key]
    if token is not None:
        args += ["TOKEN", token]
    for mode, path in locks:
        args += [mode, path]
    return args


def locks_args(key: Key, path: Optional[str], token: Optional[str]) -> List[Any]:
    args: List[Any] = ["PATHLOCK.LOCKS", key]
    if path is not None:
        args.append(path)
    if token is not None:
        args += ["TOKEN", token]
    return args


def waiters_args(key: Key, path: Optional[str]) -> List[Any]:
    return ["PATHLOCK.WAITERS", key] + ([] if path is None else [path])


def is_wrong_type(error: BaseException) -> bool:
    """Whether the server answered that the key holds another type of value."""
    return isinstance(error, ResponseError) and str(error).startswith("WRONGTYPE")


def text(value: Any) -> str:
    """A reply string as str, whether or not the Redis client decodes responses."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "surrogateescape")
    return str(value)


def note_of(value: Any) -> Optional[str]:
    return None if value is None else text(value)


def fence_of(reply: Any) -> int:
    """The fence of an ACQUIRE's `[token, fence]` reply."""
    return int(reply[1])


def blockers_of(reply: Any) -> List[Blocker]:
    """LOCKS' and CHECK's entries `[path, mode, token, ttl-ms, fence, note]` as Blockers."""
    return [
        Blocker(text(path), text(mode), text(token), int(ttl), int(fence), note_of(note))
        for path, mode, token, ttl, fence, note in (reply or [])
    ]


def waiters_of(reply: Any) -> List[Waiter]:
    """WAITERS' entries `[token, [mode, path, ...], waited-ms, left-ms, note]` as Waiters."""
    result = []
    for token, pairs, waited, left, note in reply or []:
        words = [text(word) for word in pairs]
        locks = tuple((mode_of(mode), path) for mode, path in zip(words[0::2], words[1::2]))
        result.append(Waiter(text(token), locks, int(waited), int(left), note_of(note)))
    return result


#: The longest default note, in bytes: well under the server's `pathlock.max-note-bytes` (256 by
#: default), however long the paths it names.
DEFAULT_NOTE_BYTES = 100


def default_note(words: str) -> str:
    """An operation's default note, `"move /A/C -> /B"`, cut to `DEFAULT_NOTE_BYTES`."""
    raw = words.encode("utf-8", "surrogateescape")
    if len(raw) <= DEFAULT_NOTE_BYTES:
        return words
    return raw[: DEFAULT_NOTE_BYTES - 3].decode("utf-8", "ignore") + "..."
