"""Hierarchical path locks on Redis with the pathlock module: leases renewed by a watchdog.

    locks = PathLocks(redis.Redis(), "proj:42")
    with locks.move("/A/C", "/B") as lease:
        move_folder("/A/C", "/B/C", fence=lease.fence)

`AsyncPathLocks` is the same on `redis.asyncio`. The package's modules build on one another in
levels, without a circle: `_types`, `_errors`, `_requests`, `_lease` and `_operations`, then `_sync` and
`_async` (with `_scheduler` and `_timers`, which import nothing of the package).
"""

from ._async import Acquiring, AsyncLease, AsyncLostSignal, AsyncPathLocks
from ._errors import LOST_REASONS, Busy, LeaseLost, NotReplicated, PathLockError, WrongType
from ._sync import Lease, LostSignal, PathLocks
from ._types import Blocker, LockRequest, Waiter

__all__ = [
    "Acquiring",
    "AsyncLease",
    "AsyncLostSignal",
    "AsyncPathLocks",
    "Blocker",
    "Busy",
    "LOST_REASONS",
    "Lease",
    "LeaseLost",
    "LockRequest",
    "LostSignal",
    "NotReplicated",
    "PathLockError",
    "PathLocks",
    "Waiter",
    "WrongType",
]
