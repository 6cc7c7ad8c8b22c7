"""The exceptions a pathlock client raises, and why a lease can be lost.

Level 1: builds on `_types` only.
"""

from __future__ import annotations

from typing import Optional, Sequence, Tuple

from redis.exceptions import ResponseError

from ._types import Blocker, Key, LockRequest

#: Why a lease was lost (`LeaseLost.reason`, `lease.lost_reason`), with what each means.
#: The texts are the contract's (`clients/contract/contract.json`), the same in every client.
LOST_REASONS = {
    "gone": "a renewal answered 0, or fewer locks than the lease held: its locks expired, were "
    "released with its token, or the key was deleted",
    "expired": "no renewal succeeded before its deadline, counted on the client's own clock",
    "replaced": "the key now holds another type of value, and the locks went with the old one",
}


def shown(key: Key) -> str:
    """A key in double quotes for a message, as every client shows it: `"` and `\\` escaped
    with a backslash, control characters and bytes that are not UTF-8 as `\\xHH`."""
    raw = key if isinstance(key, bytes) else key.encode("utf-8", "surrogateescape")
    text = raw.decode("utf-8", "surrogateescape")
    out = []
    for char in text:
        code = ord(char)
        if char in ('"', "\\"):
            out.append("\\" + char)
        elif 0xDC80 <= code <= 0xDCFF:  # a byte that is not UTF-8
            out.append(f"\\x{code - 0xDC00:02x}")
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\x{code:02x}")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


class PathLockError(Exception):
    """Base class of every error this package raises on its own."""


class Busy(PathLockError):
    """The locks an operation needs are held by someone else (or the wait for them timed out).

    `blockers` lists who holds them and why (their notes), so that an application can tell its
    user "`/A/C` is being moved by Alice". It is empty when nothing holds them any more: the
    holders let go between the refusal and the check, or only an earlier waiting request stood
    in the way. Then the message says so, and trying again is the answer. It is also empty when
    the check itself failed (a connection error, or a `NOPERM` for an ACL user without
    `+pathlock.check`): then `check_error` is that error (None otherwise, and the error's cause
    too), and the message says the blockers could not be read.
    """

    def __init__(
        self,
        key: Key,
        locks: Sequence[LockRequest],
        blockers: Sequence[Blocker],
        check_error: Optional[BaseException] = None,
    ) -> None:
        self.key = key
        self.locks: Tuple[LockRequest, ...] = tuple(locks)
        self.blockers: Tuple[Blocker, ...] = tuple(blockers)
        self.check_error = check_error
        self.__cause__ = check_error
        wanted = ", ".join(f"{mode} {path}" for mode, path in self.locks)
        if self.blockers:
            held = "; ".join(
                f"{b.mode} {b.path} held by {b.token}"
                + (f" ({b.note})" if b.note else "")
                + f" for {b.ttl_ms} ms more"
                for b in self.blockers
            )
            super().__init__(f"busy: {wanted} in {shown(key)}: {held}")
        elif check_error is not None:
            # Never "nothing holds these paths": the client does not know who does.
            super().__init__(
                f"busy: {wanted} in {shown(key)}: the locks in the way could not be read "
                f"({type(check_error).__name__}: {check_error}); try again"
            )
        else:
            super().__init__(
                f"busy: {wanted} in {shown(key)}: nothing holds these paths now: the holders let "
                "go in between, or an earlier waiting request goes first; try again"
            )


class LeaseLost(PathLockError):
    """The lease is gone; work under it must stop, and its fence must not be used again.

    `reason` is `"gone"`, `"expired"` or `"replaced"` (see `LOST_REASONS`).
    """

    def __init__(self, key: Key, token: str, reason: str) -> None:
        self.key = key
        self.token = token
        self.reason = reason
        super().__init__(
            f"lease {token} on {shown(key)} is lost: {LOST_REASONS.get(reason, reason)}"
        )


class NotReplicated(PathLockError):
    """Fewer replicas than asked for acknowledged the grant in time; the lease was released."""

    def __init__(self, acknowledged: int, wanted: int) -> None:
        self.acknowledged = acknowledged
        self.wanted = wanted
        super().__init__(f"grant acknowledged by {acknowledged} of the {wanted} replicas asked for")


class WrongType(PathLockError, ResponseError):
    """The key holds another type of value than a pathlock project (the server's `WRONGTYPE`).

    Also a redis-py `ResponseError`, which is what the server's reply was.
    """

    def __init__(self, key: Key) -> None:
        self.key = key
        super().__init__(
            f"key {shown(key)} is not a pathlock project: it holds another type of value "
            "(check the key name)"
        )
