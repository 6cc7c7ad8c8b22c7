"""The plain values the client hands out: lock requests, the locks and waiters the server lists.

Level 0: imports nothing of the package. `_errors` and `_requests` both build on it.
"""

from __future__ import annotations

from typing import Literal, NamedTuple, Optional, Tuple, Union

#: A lock's mode. Type checkers hold requests to these two; at run time a mode in another case
#: (`"write"`) is accepted too and sent upper-cased, as the other clients do.
Mode = Literal["READ", "WRITE"]
#: One lock an operation asks for: `("READ" | "WRITE", path)`.
LockRequest = Tuple[Mode, str]
Key = Union[str, bytes]


class Blocker(NamedTuple):
    """A live lock as `PATHLOCK.LOCKS` and `PATHLOCK.CHECK` report it: who holds what, and why.

    `note` is what its holder said it is doing (`"move /A/C -> /B"` by default), or None.
    """

    path: str
    mode: str
    token: str
    ttl_ms: int
    fence: int
    note: Optional[str] = None


class Waiter(NamedTuple):
    """A request queued by a waiting acquire, as `PATHLOCK.WAITERS` reports it."""

    token: str
    locks: Tuple[LockRequest, ...]
    waited_ms: int
    left_ms: int
    note: Optional[str] = None
