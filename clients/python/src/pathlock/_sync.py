"""The blocking client: `PathLocks` on `redis.Redis` or `redis.RedisCluster`, and its `Lease`.

Level 3: builds on `_lease`, `_operations`, `_requests`, `_errors`, `_types` and `_scheduler`.
"""

from __future__ import annotations

import logging
import threading
import time
from contextlib import contextmanager
from types import TracebackType
from typing import Any, Callable, Iterable, Iterator, List, Optional, Sequence, Tuple, Type, Union

import redis
import redis.asyncio
from redis.cluster import RedisCluster
from redis.exceptions import ResponseError

from ._errors import Busy, LeaseLost, NotReplicated, WrongType
from ._lease import LeaseState
from ._operations import Operations
from ._requests import (
    CONNECTION_ERRORS,
    Attempts,
    Note,
    Options,
    acquire_args,
    blockers_of,
    check_args,
    checked,
    fence_of,
    is_wrong_type,
    locks_args,
    new_token,
    waiters_args,
    waiters_of,
)
from ._scheduler import SCHEDULER
from ._types import Blocker, Key, LockRequest, Waiter

log = logging.getLogger("pathlock")

Client = Union["redis.Redis", "RedisCluster"]
Run = Callable[..., Any]


class PathLocks(Operations[Client, "Lease"]):
    """A Redis connection bound to one project key, with the defaults of every lease it takes.

    `client` is a `redis.Redis` or a `redis.RedisCluster`. `note` is the note of every lease
    (by default each operation's own, e.g. `"move /A/C -> /B"`). `on_lost(lease)` is called (on
    one of the watchdog's worker threads) when a lease is lost.

    Commands go through the client's connection pool, so a renewal never waits behind another
    lease's command; an acquire that blocks on the server (`wait_ms`, `replicas`) holds a
    connection of the pool of its own for as long as it blocks.
    """

    _clients = (redis.Redis, RedisCluster)
    _wants = "a redis.Redis or a redis.RedisCluster"
    _other_clients = (redis.asyncio.Redis, redis.asyncio.RedisCluster)
    _instead = "use AsyncPathLocks with a redis.asyncio client"

    # Inspecting.

    def check(
        self, requests: Iterable[LockRequest], *, token: Optional[str] = None
    ) -> List[Blocker]:
        """The live locks that would block `requests` now (`PATHLOCK.CHECK`): empty when they
        would be granted, waiters aside. With `token`, that owner's own locks do not count."""
        return blockers_of(self._run(*check_args(self.key, token, checked(list(requests)))))

    def locks(self, path: Optional[str] = None, *, token: Optional[str] = None) -> List[Blocker]:
        """The live locks at or under `path` (the whole project by default), only `token`'s when
        it is given (`PATHLOCK.LOCKS`)."""
        return blockers_of(self._run(*locks_args(self.key, path, token)))

    def waiters(self, path: Optional[str] = None) -> List[Waiter]:
        """The waiting acquires for paths at or under `path`, in queue order (`PATHLOCK.WAITERS`)."""
        return waiters_of(self._run(*waiters_args(self.key, path)))

    def _run(self, *args: Any) -> Any:
        try:
            return self._command(*args)
        except ResponseError as error:
            if is_wrong_type(error):
                raise WrongType(self.key) from error
            raise

    # Acquiring.

    def _acquire(self, locks: Sequence[LockRequest], options: Options) -> "Lease":
        # The client makes the token, so that a retry after a lost reply is the same owner.
        token = new_token()
        sent, fence = self._grant(token, locks, options, fresh=True)
        if time.monotonic() - sent > options.period:
            # The grant waited on the server, and the client cannot tell when in that wait it
            # was made: a renewal proves the lease alive and dates its deadline.
            try:
                sent = self._renew_now(token, options)
            except BaseException:
                # Granted, but the caller gets no lease to release: nobody else would.
                self._release_token(token, options)
                raise
        lease = Lease(self, token, fence, locks, options, sent)
        lease._schedule()
        return lease

    def _grant(
        self, token: str, locks: Sequence[LockRequest], options: Options, fresh: bool
    ) -> Tuple[float, int]:
        """Sends the ACQUIRE (and the replicas' WAIT); answers when it was sent and the fence.

        `fresh` is a new owner's first grant, whose token holds nothing else: on a failure after
        which it may hold locks anyway, the token is released. A lease's own further locks
        (`fresh` false) are never released that way, since that would free the lease too.
        """
        if not options.blocks:
            granted = self._send_acquire(
                self._command, token, locks, options, fresh
            )
        else:
            # A call that blocks on the server holds its connection up: it gets one of its own,
            # so that the renewals of other leases never queue behind it. WAIT also counts the
            # writes of its own connection, so it must follow the ACQUIRE on that connection.
            with self._pinned() as run:
                granted = self._send_acquire(run, token, locks, options, fresh)
                if granted is not None and options.replicas > 0:
                    self._replicated(run, token, options, fresh)
        if granted is None:
            # Asked once the blocking connection is closed, through the client's pool.
            raise self._busy(token, locks)
        return granted

    def _replicated(self, run: Run, token: str, options: Options, fresh: bool) -> None:
        """Waits for the replicas to acknowledge a grant; `NotReplicated` if too few did."""
        try:
            acknowledged = int(run("WAIT", options.replicas, options.replicas_timeout_ms))
        except BaseException:
            if fresh:
                self._release_token(token, options)
            raise
        if acknowledged < options.replicas:
            if fresh:
                self._release_token(token, options)
            raise NotReplicated(acknowledged, options.replicas)

    def _send_acquire(
        self, run: Run, token: str, locks: Sequence[LockRequest], options: Options, fresh: bool
    ) -> Optional[Tuple[float, int]]:
        """When the attempt that was granted was sent, and the grant's fence; None if refused.

        After a connection error the grant may or may not have happened; sending the same token
        again is then idempotent. It is retried at least once and while the wait budget lasts.
        """
        attempts = Attempts(options.wait_ms, time.monotonic())
        while True:
            sent = time.monotonic()
            wait_ms = attempts.wait_now(sent)
            try:
                reply = run(*acquire_args(self.key, token, options, wait_ms, locks))
                break
            except CONNECTION_ERRORS:
                pause = attempts.pause_after_failure(time.monotonic())
                if pause is None:
                    if fresh:
                        # A grant may have happened that no reply reported: free it once possible.
                        self._release_later(token, options)
                    raise
                time.sleep(pause)
            except ResponseError as error:
                if is_wrong_type(error):
                    raise WrongType(self.key) from error
                raise
        if reply is None:
            if fresh and attempts.failed:
                # An earlier attempt may have been granted before its reply was lost, and a
                # waiter that queued since refused the retry: do not leave that grant behind.
                self._release_later(token, options)
            return None
        return sent, fence_of(reply)

    def _busy(self, token: str, locks: Sequence[LockRequest]) -> Busy:
        """The `Busy` of a refused request, with the blockers `PATHLOCK.CHECK` reports now. When
        they cannot be read, it says so: an empty list would claim that nothing holds them."""
        try:
            return Busy(self.key, locks, self.check(locks, token=token))
        except WrongType:
            raise  # The key now holds another type of value: so says any later call too.
        except (*CONNECTION_ERRORS, ResponseError) as error:
            # A connection error, or a refusal of the CHECK alone (NOPERM for an ACL user
            # without +pathlock.check): the acquire was refused all the same.
            return Busy(self.key, locks, [], check_error=error)

    def _renew_now(self, token: str, options: Options) -> float:
        sent = time.monotonic()
        if int(self._run("PATHLOCK.RENEW", self.key, token, options.ttl_ms)) == 0:
            raise LeaseLost(self.key, token, "gone")
        return sent

    def _release_token(self, token: str, options: Options) -> None:
        try:
            self._command("PATHLOCK.RELEASE", self.key, token)
        except CONNECTION_ERRORS:
            self._release_later(token, options)

    def _release_later(self, token: str, options: Options) -> None:
        until = time.monotonic() + (options.wait_ms + options.ttl_ms) / 1000.0
        _ReleaseLater(self._command, self.key, token, until)._start()

    @contextmanager
    def _pinned(self) -> Iterator[Run]:
        """A connection of its own to the key's master, outside the client's pool, held for the
        commands of one blocking call and closed after them.

        Not one of the pool's: a pool with `max_connections` would otherwise be emptied by as
        many waits, and the renewals, which need a connection of it, would fail or queue until
        their leases are lost. A connection of its own costs a connect per blocking call, small
        beside a wait.
        """
        client: Any = self.client
        if isinstance(client, RedisCluster):
            cluster: Any = client
            client = cluster.get_redis_connection(cluster.get_node_from_key(self.key))
        pool = client.connection_pool
        connection = pool.connection_class(**pool.connection_kwargs)

        def run(*args: Any) -> Any:
            connection.send_command(*args)
            return connection.read_response()

        try:
            yield run
        finally:
            connection.disconnect()


class Lease(LeaseState):
    """Locks held by one owner, renewed in the background until released.

    Also a context manager that releases them when the block ends, also by an exception.
    `lost` is set when the lease is lost; `check()` then raises `LeaseLost`. `lock(requests)`
    takes more locks under the same token, which the watchdog renews and `release()` frees.
    The watchdog's rules are `LeaseState`'s; this class adds threads: the state is changed
    under `_mutex`, the timer thread calls `fire`, a worker thread `_renew`.
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
        super().__init__(owner.key, token, fence, locks, options, sent)
        self._owner = owner
        self._execute = owner._command
        self._mutex = threading.Lock()
        # Set once the lease is lost or released, for `lost.wait()`. Made on first use: most
        # leases end without anyone waiting for their loss, and an Event (a Condition and its
        # lock) is a noticeable part of an acquire's cost.
        self._ended: Optional[threading.Event] = None

    @property
    def lost(self) -> "LostSignal":
        """Set when the lease is lost: poll it (`lost.is_set()`), or wait on it from another
        thread (`lost.wait(timeout)`, which also returns, False, once the lease is released)."""
        return LostSignal(self)

    def _ended_event(self) -> threading.Event:
        with self._mutex:
            if self._ended is None:
                self._ended = threading.Event()
                if self.finished:
                    self._ended.set()
            return self._ended

    def lock(
        self,
        requests: Iterable[LockRequest],
        *,
        wait_ms: Optional[float] = None,
        note: Optional[Note] = None,
    ) -> int:
        """Takes more locks under this lease's token, inside or beside what it holds, and
        answers the fence of that grant. They have the lease's TTL and replicas, are renewed by
        its watchdog and freed by its release; `note` defaults to the lease's. Locking what the
        lease already holds is an idempotent re-acquire (a new fence; `note` replaces theirs).
        Raises `Busy` when another owner is in the way, `LeaseLost` once the lease is lost."""
        locks = checked(list(requests))
        options = self._options.override(wait_ms=wait_ms, note=note)
        self._prove_held()
        _, fence = self._owner._grant(self.token, locks, options, fresh=False)
        with self._mutex:
            ended = self.finished
            if not ended:
                self._add(locks)
        if ended:
            # The lease ended while the grant was on its way: nobody renews those locks now.
            self._owner._release_token(self.token, options)
            self._usable()
        return fence

    def _prove_held(self) -> None:
        """Renews the lease before it takes more locks: once its own locks are gone (its key
        deleted, its token released elsewhere), an ACQUIRE under its token would make new ones
        that keep answering its renewals, and the loss would go unseen."""
        self._usable()
        sent = time.monotonic()
        renewed, error = 0, None
        try:
            renewed = int(self._execute("PATHLOCK.RENEW", self.key, self.token, self.ttl_ms))
        except ResponseError as raised:
            error = raised
        with self._mutex:
            lost = self._proved(sent, renewed, error)
        if lost is not None:
            self._lose(lost)
        self._usable()

    def release(self) -> None:
        """Stops the watchdog, then frees the locks. Releasing twice or a lost lease is fine.

        When the server cannot be reached the release is retried in the background until the
        TTL has passed (by then the locks have expired anyway), rather than raised.
        """
        with self._mutex:
            if self._released:
                return
            self._released = True
            if self._ended is not None:
                self._ended.set()
        try:
            self._execute("PATHLOCK.RELEASE", self.key, self.token)
        except CONNECTION_ERRORS:
            _ReleaseLater(
                self._execute, self.key, self.token, time.monotonic() + self._ttl
            )._start()
        except ResponseError as error:
            # A key overwritten by another value took the locks with it: nothing left to free.
            if not is_wrong_type(error):
                raise

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
            wake = self._wake()
        if wake is not None:
            SCHEDULER.at(wake, self)

    def fire(self, when: float) -> None:
        with self._mutex:
            due = self._due(when, time.monotonic())
        if due == "expired":
            self._lose("expired")
            return
        if due == "renew":
            SCHEDULER.submit(self._renew)
        self._schedule()

    def _renew(self) -> None:
        sent = time.monotonic()
        try:
            answer: Any = self._execute("PATHLOCK.RENEW", self.key, self.token, self.ttl_ms)
        except Exception as error:  # retried while the deadline is ahead, whatever it was
            log.debug("pathlock: renewing %s failed: %r", self.token, error)
            answer = error
        with self._mutex:
            lost = self._renewed(sent, answer, time.monotonic())
        if lost is not None:
            self._lose(lost)
            return
        self._schedule()

    def _lose(self, reason: str) -> None:
        with self._mutex:
            if not self._mark_lost(reason):
                return
            if self._ended is not None:
                self._ended.set()
        log.warning("pathlock: %s", LeaseLost(self.key, self.token, reason))
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


class LostSignal:
    """A lease's loss, as a flag and a wait: `is_set()` once the lease is lost (never after a
    normal release); `wait(timeout=None)` returns True when it is lost, and False once it is
    released or the timeout passed, so that nothing waits for the loss of a released lease."""

    def __init__(self, lease: Lease) -> None:
        self._lease = lease

    def is_set(self) -> bool:
        return self._lease._lost

    def wait(self, timeout: Optional[float] = None) -> bool:
        self._lease._ended_event().wait(timeout)
        return self._lease._lost

    def __repr__(self) -> str:
        return f"<LostSignal {'set' if self.is_set() else 'unset'}>"


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
