"""The exceptions a pathlock client raises, and what a busy request reports about its blockers."""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple, Sequence, Tuple

if TYPE_CHECKING:
    from ._requests import LockRequest


class Blocker(NamedTuple):
    """A live lock that stands in the way of a request, as `PATHLOCK.CHECK` reports it."""

    path: str
    mode: str
    token: str
    ttl_ms: int
    fence: int


class PathLockError(Exception):
    """Base class of every error this package raises on its own."""


class Busy(PathLockError):
    """The locks an operation needs are held by someone else (or the wait for them timed out).

    `blockers` lists who holds them, so that an application can tell its user "`/A/C` is being
    moved". It may be empty when the blockers went away between the refusal and the check.
    """

    def __init__(self, locks: Sequence[LockRequest], blockers: Sequence[Blocker]) -> None:
        self.locks: Tuple[LockRequest, ...] = tuple(locks)
        self.blockers: Tuple[Blocker, ...] = tuple(blockers)
        wanted = ", ".join(f"{mode} {path}" for mode, path in self.locks)
        if self.blockers:
            held = "; ".join(
                f"{b.mode} {b.path} held by {b.token} for {b.ttl_ms} ms more" for b in self.blockers
            )
            super().__init__(f"busy: {wanted} (blocked by {held})")
        else:
            super().__init__(f"busy: {wanted}")


class LeaseLost(PathLockError):
    """The lease is gone: a renewal answered 0, or none succeeded before its deadline."""

    def __init__(self, token: str, reason: str) -> None:
        self.token = token
        self.reason = reason
        super().__init__(f"lease {token} lost: {reason}")


class NotReplicated(PathLockError):
    """Fewer replicas than asked for acknowledged the grant in time; the lease was released."""

    def __init__(self, acknowledged: int, wanted: int) -> None:
        self.acknowledged = acknowledged
        self.wanted = wanted
        super().__init__(f"grant acknowledged by {acknowledged} of the {wanted} replicas asked for")
