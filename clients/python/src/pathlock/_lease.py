"""What a lease is and decides, whichever client holds it: its fields, its state, and the
watchdog's rules (when to wake, whether a renewal's answer loses the lease). The sync `Lease` and
the `AsyncLease` add only how they wait, send and call back.

Level 2: builds on `_errors`, `_requests` and `_types`.
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Optional, Sequence, Tuple

from ._errors import LeaseLost, PathLockError
from ._requests import RETRY_FRACTION, Options, is_wrong_type
from ._types import Key, LockRequest


class LeaseState:
    """The fields and rules both leases share. A lease is `finished` once released or lost; the
    watchdog's renewals are one at a time (`_renewing`), and its deadline is known from the
    client's own clock only: when the last successful command was sent, plus the TTL."""

    def __init__(
        self, key: Key, token: str, fence: int, locks: Sequence[LockRequest], options: Options,
        sent: float,
    ) -> None:
        self.key = key
        self.token = token
        #: The fence of the grant: pass it to the storage the locks protect.
        self.fence = fence
        #: Every lock the lease holds: the operation's, then those `lock()` added.
        self.locks: Tuple[LockRequest, ...] = tuple(locks)
        self.ttl_ms = options.ttl_ms
        #: The note sent with the grant, shown with the locks to whoever they block.
        self.note = options.note
        #: `"gone"`, `"expired"` or `"replaced"` once the lease is lost (see `LOST_REASONS`).
        self.lost_reason: Optional[str] = None
        self._options = options
        self._on_lost = options.on_lost
        self._ttl = options.ttl_ms / 1000.0
        self._period = options.period
        self._released = False
        self._lost = False
        self._renewing = False
        self._deadline = sent + self._ttl
        self._next_renew = sent + self._period
        self._wake_at = math.inf
        # The most locks a renewal has found: the watchdog's renewals are one at a time, so the
        # count they see only falls when locks of the lease are gone (released by someone with
        # the token, or expired), even while `lock()` grants more.
        self._most = 0

    def __repr__(self) -> str:
        state = "released" if self._released else "lost" if self._lost else "held"
        return f"<{type(self).__name__} {self.token} fence={self.fence} {state} {list(self.locks)}>"

    @property
    def released(self) -> bool:
        return self._released

    @property
    def finished(self) -> bool:
        """Nothing more for the watchdog to do: released or lost."""
        return self._released or self._lost

    def check(self) -> None:
        """Raises `LeaseLost` if the lease was lost; call it between steps of long work."""
        if self._lost:
            raise LeaseLost(self.key, self.token, self.lost_reason or "expired")

    def _usable(self) -> None:
        self.check()
        if self._released:
            raise PathLockError(f"lease {self.token} is released: it can take no more locks")

    def _add(self, locks: Iterable[LockRequest]) -> None:
        """Records locks `lock()` was granted, each once, after those the lease holds."""
        self.locks += tuple(lock for lock in dict.fromkeys(locks) if lock not in self.locks)

    def _proved(self, sent: float, renewed: int, error: Optional[BaseException]) -> Optional[str]:
        """The verdict of the renewal `lock()` sends first: why the lease is lost, or None with its
        deadline moved. Unlike the watchdog's, it is not retried: a connection error is raised."""
        if error is not None and not is_wrong_type(error):
            raise error
        if error is not None:
            return "replaced"
        if renewed == 0:
            return "gone"
        if not self.finished:
            self._deadline = max(self._deadline, sent + self._ttl)
        return None

    # The watchdog's rules.

    def _wake(self) -> Optional[float]:
        """When the watchdog must look at the lease next (its next renewal, or its deadline while
        a renewal is out), or None when an earlier wake-up is already asked for or it is done."""
        if self.finished:
            return None
        wake = self._deadline if self._renewing else min(self._next_renew, self._deadline)
        # One pending wake-up is enough; an earlier one replaces a later one.
        if wake >= self._wake_at:
            return None
        self._wake_at = wake
        return wake

    def _due(self, when: float, now: float) -> Optional[str]:
        """At a wake-up asked for `when`: `"expired"` past the deadline, `"renew"` when a renewal
        is due (and now out), or None."""
        if when == self._wake_at:
            self._wake_at = math.inf
        if self.finished:
            return None
        if now >= self._deadline:
            return "expired"
        if not self._renewing and now >= self._next_renew:
            self._renewing = True
            return "renew"
        return None

    def _renewed(self, sent: float, answer: Any, now: float) -> Optional[str]:
        """The watchdog's verdict on a renewal sent at `sent`: why the lease is lost, or None.

        `answer` is how many locks the renewal found, or the exception it failed with. 0, or fewer
        than an earlier renewal found, is `"gone"`; `WRONGTYPE` is `"replaced"`; any other error
        is retried soon while the deadline is ahead. A renewal that answers after the lease was
        released (0, or what the RELEASE then frees) is not a loss.
        """
        self._renewing = False
        if self.finished:
            return None
        if isinstance(answer, BaseException):
            if is_wrong_type(answer):
                return "replaced"
            self._next_renew = now + self._period * RETRY_FRACTION
            return None
        renewed = int(answer)
        if renewed == 0 or renewed < self._most:
            return "gone"
        self._most = renewed
        self._deadline = max(self._deadline, sent + self._ttl)
        self._next_renew = sent + self._period
        return None

    def _mark_lost(self, reason: str) -> bool:
        """Makes the lease lost for `reason`, unless it is finished already; answers whether."""
        if self.finished:
            return False
        self.lost_reason = reason
        self._lost = True
        return True
