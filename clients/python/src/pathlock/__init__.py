"""Hierarchical path locks on Redis with the pathlock module: leases renewed by a watchdog.

    locks = PathLocks(redis.Redis(), "proj:42")
    with locks.move("/A/C", "/B") as lease:
        move_folder("/A/C", "/B/C", fence=lease.fence)

`AsyncPathLocks` is the same on `redis.asyncio`.
"""

from ._async import Acquiring, AsyncLease, AsyncPathLocks
from ._errors import Blocker, Busy, LeaseLost, NotReplicated, PathLockError
from ._requests import LockRequest
from ._sync import Lease, PathLocks

__all__ = [
    "Acquiring",
    "AsyncLease",
    "AsyncPathLocks",
    "Blocker",
    "Busy",
    "Lease",
    "LeaseLost",
    "LockRequest",
    "NotReplicated",
    "PathLockError",
    "PathLocks",
]
