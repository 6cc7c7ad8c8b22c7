"""The blocking client: `PathLocks` on `redis.Redis` or `redis.RedisCluster`, and its `Lease`."""

from __future__ import annotations

import logging
import math
import threading
import time
from contextlib import contextmanager
from types import TracebackType
from typing import Any, Callable, Iterator, Optional, Sequence, Tuple, Type, Union

import redis
from redis.cluster import RedisCluster

from ._errors import Busy, LeaseLost, NotReplicated
from ._operations import Operations
from ._requests import (
    CONNECTION_ERRORS,
    RETRY_FRACTION,
    Key,
    LockRequest,
    Options,
    acquire_args,
    blockers_of,
    check_args,
    fence_of,
    new_token,
)
from ._scheduler import SCHEDULER

log = logging.getLogger("pathlock")

Client = Union["redis.Redis", "RedisCluster"]
Run = Callable[..., Any]

RENEWED_ZERO = (
    "a renewal answered 0 (the lease expired, was released with its token, or its key was deleted)"
)
NO_RENEWAL = "no renewal succeeded before the lease's deadline"


class PathLocks(Operations["Lease"]):
    """A Redis connection bound to one project key, with the defaults of every lease it takes.

    `client` is a `redis.Redis` or a `redis.RedisCluster`. `on_lost(lease)` is called (on one of
    the watchdog's worker threads) when a lease is lost.
    """

    def __init__(
        self,
        client: Client,
        key: Key,
        *,
        ttl_ms: int = 30000,
        wait_ms: int = 0,
        replicas: int = 0,
        replicas_timeout_ms: int = 1000,
        on_lost: Optional[Callable[["Lease"], Any]] = None,
    ) -> None:
        self.client = client
        self.key = key
        self.options = Options(ttl_ms, wait_ms, replicas, replicas_timeout_ms, on_lost)
        self._execute: Run = client.execute_command

    def _acquire(
        self,
        locks: Sequence[LockRequest],
        ttl_ms: Optional[int],
        wait_ms: Optional[int],
        replicas: Optional[int],
        on_lost: Optional[Callable[[Any], Any]],
    ) -> "Lease":
        options = self.options.override(ttl_ms, wait_ms, replicas, on_lost)
        # The client makes the token, so that a retry after a lost reply is the same owner.
        token = new_token()
        if options.replicas == 0:
            return self._grant(self._execute, token, locks, options)
        # WAIT counts the acknowledgements of the writes made on its own connection, so it must
        # follow the ACQUIRE on the very connection that sent it.
        with self._pinned() as run:
            lease = self._grant(run, token, locks, options)
            try:
                acknowledged = int(run("WAIT", options.replicas, options.replicas_timeout_ms))
            except BaseException:
                lease.release()
                raise
            if acknowledged < options.replicas:
                lease.release()
                raise NotReplicated(acknowledged, options.replicas)
            return lease

    def _grant(
        self, run: Run, token: str, locks: Sequence[LockRequest], options: Options
    ) -> "Lease":
        sent, reply = self._send_acquire(run, token, locks, options)
        if reply is None:
            blockers = self._execute(*check_args(self.key, token, locks))
            raise Busy(locks, blockers_of(blockers))
        lease = Lease(self, token, fence_of(reply), locks, options, sent)
        lease._schedule()
        return lease

    def _send_acquire(
        self, run: Run, token: str, locks: Sequence[LockRequest], options: Options
    ) -> Tuple[float, Any]:
        """The ACQUIRE's reply and when the attempt that got it was sent.

        After a connection error the grant may or may not have happened; sending the same token
        again is then idempotent. It is retried at least once and while the wait budget lasts.
        """
        budget_end = time.monotonic() + options.wait_ms / 1000.0
        attempt = 0
        while True:
            sent = time.monotonic()
            wait_ms = max(0, math.ceil((budget_end - sent) * 1000)) if attempt else options.wait_ms
            try:
                return sent, run(*acquire_args(self.key, token, options.ttl_ms, wait_ms, locks))
            except CONNECTION_ERRORS:
                attempt += 1
                if attempt > 1 and time.monotonic() >= budget_end:
                    # A grant may have happened that no reply reported: free it once possible.
                    _ReleaseLater(
                        self._execute, self.key, token, time.monotonic() + options.ttl_ms / 1000.0
                    )._start()
                    raise
                time.sleep(min(0.01 * 2**attempt, 0.2))

    @contextmanager
    def _pinned(self) -> Iterator[Run]:
        """One connection of the pool to the key's master, held for a few commands."""
        client: Any = self.client
        if isinstance(client, RedisCluster):
            cluster: Any = client
            client = cluster.get_redis_connection(cluster.get_node_from_key(self.key))
        pinned = client.client()
        try:
            yield pinned.execute_command
        finally:
            pinned.close()


class Lease:
    """Locks held by one owner, renewed in the background until released.

    Also a context manager that releases them when the block ends, also by an exception.
    `lost` is set when the lease is lost; `check()` then raises `LeaseLost`.
    """

    def __init__(
        self,
        owner: PathLocks,
        token: str,
        fence: int,
        locks: Sequence[LockRequest],
        options: Options,
        sent: float,
    ) -> None:
        self.key = owner.key
        self.token = token
        #: The fence of the grant: pass it to the storage the locks protect.
        self.fence = fence
        self.locks: Tuple[LockRequest, ...] = tuple(locks)
        self.ttl_ms = options.ttl_ms
        self.lost_reason: Optional[str] = None
        # `lost` is made on first use: most leases end without anyone waiting for their loss,
        # and an Event (a Condition and its lock) is a noticeable part of an acquire's cost.
        self._lost_event: Optional[threading.Event] = None
        self._lost = False
        self._execute = owner._execute
        self._on_lost = options.on_lost
        self._ttl = options.ttl_ms / 1000.0
        self._period = options.period
        self._mutex = threading.Lock()
        self._released = False
        self._renewing = False
        # Known from the client's own clock only: when the last successful command was sent.
        self._deadline = sent + self._ttl
        self._next_renew = sent + self._period
        self._wake_at = math.inf

    def __repr__(self) -> str:
        state = "released" if self._released else "lost" if self._lost else "held"
        return f"<Lease {self.token} fence={self.fence} {state} {list(self.locks)}>"

    @property
    def lost(self) -> threading.Event:
        """Set when the lease is lost: poll it, or wait on it from another thread."""
        with self._mutex:
            if self._lost_event is None:
                self._lost_event = threading.Event()
                if self._lost:
                    self._lost_event.set()
            return self._lost_event

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
            raise LeaseLost(self.token, self.lost_reason or NO_RENEWAL)

    def release(self) -> None:
        """Stops the watchdog, then frees the locks. Releasing twice or a lost lease is fine.

        When the server cannot be reached the release is retried in the background until the
        TTL has passed (by then the locks have expired anyway), rather than raised.
        """
        with self._mutex:
            if self._released:
                return
            self._released = True
        try:
            self._execute("PATHLOCK.RELEASE", self.key, self.token)
        except CONNECTION_ERRORS:
            _ReleaseLater(
                self._execute, self.key, self.token, time.monotonic() + self._ttl
            )._start()

    def __enter__(self) -> "Lease":
        return self

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> None:
        self.release()

    # The watchdog. `fire` runs on the timer thread, `_renew` on a worker thread.

    def _schedule(self) -> None:
        """Asks the timer thread to wake this lease at its next renewal or deadline."""
        with self._mutex:
            if self.finished:
                return
            wake = self._deadline if self._renewing else min(self._next_renew, self._deadline)
            # One pending wake-up is enough; an earlier one replaces a later one.
            if wake >= self._wake_at:
                return
            self._wake_at = wake
        SCHEDULER.at(wake, self)

    def fire(self, when: float) -> None:
        now = time.monotonic()
        renew = False
        with self._mutex:
            if when == self._wake_at:
                self._wake_at = math.inf
            if self.finished:
                return
            expired = now >= self._deadline
            if not expired and not self._renewing and now >= self._next_renew:
                self._renewing = renew = True
        if expired:
            self._lose(NO_RENEWAL)
            return
        if renew:
            SCHEDULER.submit(self._renew)
        self._schedule()

    def _renew(self) -> None:
        sent = time.monotonic()
        try:
            renewed: Optional[int] = int(
                self._execute("PATHLOCK.RENEW", self.key, self.token, self.ttl_ms)
            )
        except Exception as error:  # retried while the deadline is ahead, whatever it was
            log.debug("pathlock: renewing %s failed: %r", self.token, error)
            renewed = None
        with self._mutex:
            self._renewing = False
            # A renewal that was in flight when the lease was released answers 0 (or renews
            # what the RELEASE then frees): either way it is not a loss.
            if self.finished:
                return
            if renewed is None:
                self._next_renew = time.monotonic() + self._period * RETRY_FRACTION
            elif renewed > 0:
                self._deadline = max(self._deadline, sent + self._ttl)
                self._next_renew = sent + self._period
        if renewed == 0:
            self._lose(RENEWED_ZERO)
            return
        self._schedule()

    def _lose(self, reason: str) -> None:
        with self._mutex:
            if self.finished:
                return
            self.lost_reason = reason
            self._lost = True
            if self._lost_event is not None:
                self._lost_event.set()
        log.warning("pathlock: lease %s on %r lost: %s", self.token, self.key, reason)
        if self._on_lost is not None:
            # On a worker thread: a callback that blocks must not hold up the timer thread,
            # which keeps every other lease's deadline.
            SCHEDULER.submit(self._call_on_lost)

    def _call_on_lost(self) -> None:
        if self._on_lost is None:
            return
        try:
            self._on_lost(self)
        except Exception:
            log.exception("pathlock: on_lost callback failed")


class _ReleaseLater:
    """Sends RELEASE for a token until it gets through or the locks have surely expired."""

    def __init__(self, execute: Run, key: Key, token: str, until: float) -> None:
        self._execute = execute
        self._key = key
        self._token = token
        self._until = until
        self.finished = False

    def _start(self) -> None:
        SCHEDULER.at(time.monotonic() + 0.05, self)

    def fire(self, when: float) -> None:
        SCHEDULER.submit(self._try)

    def _try(self) -> None:
        try:
            self._execute("PATHLOCK.RELEASE", self._key, self._token)
            self.finished = True
        except Exception:
            if time.monotonic() >= self._until:
                self.finished = True
            else:
                SCHEDULER.at(time.monotonic() + 0.2, self)
