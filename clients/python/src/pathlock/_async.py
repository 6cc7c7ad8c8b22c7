"""The asyncio client: `AsyncPathLocks` on `redis.asyncio.Redis` or `redis.asyncio.RedisCluster`.

Level 3: builds on `_lease`, `_operations`, `_requests`, `_errors`, `_types` and `_timers`.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from contextlib import asynccontextmanager
from types import TracebackType
from typing import (
    Any,
    AsyncIterator,
    Awaitable,
    Callable,
    Generator,
    Iterable,
    List,
    Optional,
    Sequence,
    Set,
    Tuple,
    Type,
    TypeVar,
    Union,
)

import redis
import redis.asyncio
from redis.asyncio.cluster import RedisCluster
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
from ._timers import LoopTimers
from ._types import Blocker, Key, LockRequest, Waiter

log = logging.getLogger("pathlock")

T = TypeVar("T")
Client = Union["redis.asyncio.Redis", "RedisCluster"]
Run = Callable[..., Awaitable[Any]]

# Tasks nobody awaits (a renewal left in flight, a release retried later, an async on_lost) are
# kept here so that they are not garbage-collected before they finish.
_background: Set["asyncio.Future[Any]"] = set()


def _keep(future: "asyncio.Future[Any]") -> None:
    _background.add(future)
    future.add_done_callback(_forget)


def _forget(future: "asyncio.Future[Any]") -> None:
    _background.discard(future)
    if not future.cancelled() and future.exception() is not None:
        log.debug("pathlock: background task failed: %r", future.exception())


class AsyncPathLocks(Operations[Client, "Acquiring"]):
    """The asyncio twin of `PathLocks`. Each operation returns an `Acquiring`: await it for an
    `AsyncLease`, or use it directly in `async with`.

    Commands go through the client's connection pool, so a renewal never waits behind another
    lease's command; an acquire that blocks on the server (`wait_ms`, `replicas`) holds a
    connection of its own for as long as it blocks.
    """

    _timers: Optional[LoopTimers] = None
    _clients = (redis.asyncio.Redis, RedisCluster)
    _wants = "a redis.asyncio.Redis or a redis.asyncio.RedisCluster"
    _other_clients = (redis.Redis, redis.RedisCluster)
    _instead = "use PathLocks with a blocking redis client"

    def _timers_of_loop(self) -> LoopTimers:
        loop = asyncio.get_running_loop()
        if self._timers is None or self._timers.loop is not loop:
            self._timers = LoopTimers(loop)
        return self._timers

    # Inspecting.

    async def check(
        self, requests: Iterable[LockRequest], *, token: Optional[str] = None
    ) -> List[Blocker]:
        """The live locks that would block `requests` now (`PATHLOCK.CHECK`): empty when they
        would be granted, waiters aside. With `token`, that owner's own locks do not count."""
        return blockers_of(await self._run(*check_args(self.key, token, checked(list(requests)))))

    async def locks(
        self, path: Optional[str] = None, *, token: Optional[str] = None
    ) -> List[Blocker]:
        """The live locks at or under `path` (the whole project by default), only `token`'s when
        it is given (`PATHLOCK.LOCKS`)."""
        return blockers_of(await self._run(*locks_args(self.key, path, token)))

    async def waiters(self, path: Optional[str] = None) -> List[Waiter]:
        """The waiting acquires for paths at or under `path`, in queue order (`PATHLOCK.WAITERS`)."""
        return waiters_of(await self._run(*waiters_args(self.key, path)))

    async def _run(self, *args: Any) -> Any:
        try:
            return await self._command(*args)
        except ResponseError as error:
            if is_wrong_type(error):
                raise WrongType(self.key) from error
            raise

    # Acquiring.

    def _acquire(self, locks: Sequence[LockRequest], options: Options) -> "Acquiring":
        return Acquiring(lambda: self._acquire_now(locks, options))

    async def _acquire_now(self, locks: Sequence[LockRequest], options: Options) -> "AsyncLease":
        # The client makes the token, so that a retry after a lost reply is the same owner.
        token = new_token()
        await self._ready()
        granted = False
        try:
            sent, fence = await self._grant(token, locks, options, fresh=True)
            granted = True
            loop = asyncio.get_running_loop()
            if loop.time() - sent > options.period:
                # The grant waited on the server, and the client cannot tell when in that wait
                # it was made: a renewal proves the lease alive and dates its deadline.
                sent = loop.time()
                if int(await self._run("PATHLOCK.RENEW", self.key, token, options.ttl_ms)) == 0:
                    raise LeaseLost(self.key, token, "gone")
        except BaseException as error:
            # Cancelled once the ACQUIRE may have been sent, the grant may have happened (its
            # reply on its way, or read and not yet a lease); granted, the renewal that dates it
            # may have failed. Either way nobody would renew or release those locks, so the
            # token is released before the error goes on. A refusal or a failed grant has
            # released what it had to in `_grant`.
            if granted or isinstance(error, asyncio.CancelledError):
                await self._release_shielded(token, locks, options)
            raise
        lease = AsyncLease(self, token, fence, locks, options, sent)
        lease._schedule()
        return lease

    async def _ready(self) -> None:
        if isinstance(self.client, RedisCluster):
            # A cluster client's first command learns the slots and the commands' key positions
            # first; that must not count against the lease's TTL, which starts when it is sent.
            cluster: Any = self.client
            await cluster.initialize()

    async def _grant(
        self, token: str, locks: Sequence[LockRequest], options: Options, fresh: bool
    ) -> Tuple[float, int]:
        """Sends the ACQUIRE (and the replicas' WAIT); answers when it was sent and the fence.

        `fresh` is a new owner's first grant, whose token holds nothing else: on a failure after
        which it may hold locks anyway, the token is released. A lease's own further locks
        (`fresh` false) are never released that way, since that would free the lease too.
        """
        if not options.blocks:
            granted = await self._send_acquire(
                self._command, token, locks, options, fresh
            )
        else:
            # A call that blocks on the server holds its connection up: it gets one of its own,
            # so that the renewals of other leases never queue behind it. WAIT also counts the
            # writes of its own connection, so it must follow the ACQUIRE on that connection.
            async with self._pinned() as run:
                granted = await self._send_acquire(run, token, locks, options, fresh)
                if granted is not None and options.replicas > 0:
                    await self._replicated(run, token, options, fresh)
        if granted is None:
            # Asked once the blocking connection is closed, through the client's pool.
            raise await self._busy(token, locks)
        return granted

    async def _replicated(self, run: Run, token: str, options: Options, fresh: bool) -> None:
        """Waits for the replicas to acknowledge a grant; `NotReplicated` if too few did."""
        try:
            acknowledged = int(await run("WAIT", options.replicas, options.replicas_timeout_ms))
        except Exception:
            # A cancellation is left to `_acquire_now`, which releases a fresh token shielded.
            if fresh:
                await self._release_token(token, options)
            raise
        if acknowledged < options.replicas:
            if fresh:
                await self._release_token(token, options)
            raise NotReplicated(acknowledged, options.replicas)

    async def _send_acquire(
        self, run: Run, token: str, locks: Sequence[LockRequest], options: Options, fresh: bool
    ) -> Optional[Tuple[float, int]]:
        """When the attempt that was granted was sent, and the grant's fence; None if refused.

        After a connection error the grant may or may not have happened; sending the same token
        again is then idempotent. It is retried at least once and while the wait budget lasts.
        """
        # The event loop's clock, which the watchdog's timers run on.
        loop = asyncio.get_running_loop()
        attempts = Attempts(options.wait_ms, loop.time())
        while True:
            sent = loop.time()
            wait_ms = attempts.wait_now(sent)
            try:
                reply = await run(*acquire_args(self.key, token, options, wait_ms, locks))
                break
            except CONNECTION_ERRORS:
                pause = attempts.pause_after_failure(loop.time())
                if pause is None:
                    if fresh:
                        # A grant may have happened that no reply reported: free it once possible.
                        self._release_later(token, options)
                    raise
                await asyncio.sleep(pause)
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

    async def _busy(self, token: str, locks: Sequence[LockRequest]) -> Busy:
        """The `Busy` of a refused request, with the blockers `PATHLOCK.CHECK` reports now. When
        they cannot be read, it says so: an empty list would claim that nothing holds them."""
        try:
            return Busy(self.key, locks, await self.check(locks, token=token))
        except WrongType:
            raise  # The key now holds another type of value: so says any later call too.
        except (*CONNECTION_ERRORS, ResponseError) as error:
            # A connection error, or a refusal of the CHECK alone (NOPERM for an ACL user
            # without +pathlock.check): the acquire was refused all the same.
            return Busy(self.key, locks, [], check_error=error)

    async def _release_token(self, token: str, options: Options) -> None:
        try:
            await self._command("PATHLOCK.RELEASE", self.key, token)
        except CONNECTION_ERRORS:
            self._release_later(token, options)

    async def _release_shielded(
        self, token: str, locks: Sequence[LockRequest], options: Options
    ) -> None:
        """Releases the token of an acquire that ended before it became a lease, shielded from
        a cancellation: a second one ends the wait for it, not the release."""
        release = asyncio.ensure_future(self._release_unqueued(token, locks, options))
        _keep(release)
        try:
            await asyncio.shield(release)
        except asyncio.CancelledError:
            pass
        except Exception as error:
            log.debug("pathlock: releasing %s failed: %r", token, error)

    async def _release_unqueued(
        self, token: str, locks: Sequence[LockRequest], options: Options
    ) -> None:
        """Sends RELEASE for a token once its request is no longer queued.

        A waiting request leaves the queue when the server reads the close of its connection,
        which redis-py closes on a cancellation; this RELEASE goes over another connection and
        may be read first. A request still queued then could be granted after it, so the
        RELEASE is sent again until a look at the queue, before it, no longer finds the token.
        """
        try:
            while True:
                queued = options.wait_ms > 0 and any(
                    waiter.token == token for waiter in await self.waiters(locks[0][1])
                )
                await self._command("PATHLOCK.RELEASE", self.key, token)
                if not queued:
                    return
                await asyncio.sleep(0.01)
        except CONNECTION_ERRORS:
            self._release_later(token, options)

    def _release_later(self, token: str, options: Options) -> None:
        until = asyncio.get_running_loop().time() + (options.wait_ms + options.ttl_ms) / 1000.0
        _keep(asyncio.ensure_future(_release_later(self._command, self.key, token, until)))

    @asynccontextmanager
    async def _pinned(self) -> AsyncIterator[Run]:
        """A connection of its own to the key's master, outside the client's pool, held for the
        commands of one blocking call and closed after them.

        Not one of the pool's: a pool with `max_connections` would otherwise be emptied by as
        many waits, and the renewals, which need a connection of it, would fail or queue until
        their leases are lost. A connection of its own costs a connect per blocking call, small
        beside a wait; and closing it is what takes a cancelled wait off the server's queue.
        """
        client: Any = self.client
        if isinstance(client, RedisCluster):
            cluster: Any = client
            await cluster.initialize()
            # The cluster client has no public way to hold one of its pooled connections either.
            node: Any = cluster.get_node_from_key(self.key)
            connection = node.connection_class(**node.connection_kwargs)
        else:
            pool = client.connection_pool
            connection = pool.connection_class(**pool.connection_kwargs)

        async def run(*args: Any) -> Any:
            await connection.send_command(*args)
            return await connection.read_response()

        try:
            yield run
        finally:
            await connection.disconnect()


class AsyncLostSignal:
    """A lease's loss, as a flag and a wait: `is_set()` once the lease is lost (never after a
    normal release); `await wait()` returns True when it is lost, and False once it is released,
    so that nothing waits for the loss of a released lease."""

    def __init__(self) -> None:
        self._lost = asyncio.Event()
        # Set by a loss or by the release, whichever comes first.
        self._ended = asyncio.Event()

    def is_set(self) -> bool:
        return self._lost.is_set()

    async def wait(self) -> bool:
        await self._ended.wait()
        return self._lost.is_set()

    def _set(self) -> None:
        self._lost.set()
        self._ended.set()

    def __repr__(self) -> str:
        return f"<AsyncLostSignal {'set' if self.is_set() else 'unset'}>"


class Acquiring:
    """An acquire not yet sent: `await` it for the lease, or `async with` it to hold the lease
    for the block."""

    def __init__(self, start: Callable[[], Awaitable["AsyncLease"]]) -> None:
        self._start = start
        self._lease: Optional[AsyncLease] = None

    def __await__(self) -> Generator[Any, None, "AsyncLease"]:
        return self._start().__await__()

    async def __aenter__(self) -> "AsyncLease":
        self._lease = await self._start()
        return self._lease

    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> None:
        if self._lease is not None:
            await self._lease.release()


class AsyncLease(LeaseState):
    """Locks held by one owner, renewed in the background until released.

    Also an async context manager that releases them when the block ends. `lost` (an
    `AsyncLostSignal`) is set when the lease is lost; `check()` then raises `LeaseLost`, and
    `run(awaitable)` cancels the work it runs. `await lock(requests)` takes more locks under the
    same token, which the watchdog renews and `release()` frees. The watchdog's rules are
    `LeaseState`'s; this class adds the loop: the handle's timer wakes the lease, and each
    renewal runs as a task of its own.
    """

    def __init__(
        self,
        owner: AsyncPathLocks,
        token: str,
        fence: int,
        locks: Sequence[LockRequest],
        options: Options,
        sent: float,
    ) -> None:
        super().__init__(owner.key, token, fence, locks, options, sent)
        #: Set when the lease is lost; `await lost.wait()` also returns (False) once it is
        #: released, so that nothing waits for the loss of a released lease.
        self.lost = AsyncLostSignal()
        self._owner = owner
        self._command = owner._command
        self._timers = owner._timers_of_loop()

    async def lock(
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
        await self._prove_held()
        _, fence = await self._owner._grant(self.token, locks, options, fresh=False)
        if self.finished:
            # The lease ended while the grant was on its way: nobody renews those locks now.
            await self._owner._release_token(self.token, options)
            self._usable()
        self._add(locks)
        return fence

    async def _prove_held(self) -> None:
        """Renews the lease before it takes more locks: once its own locks are gone (its key
        deleted, its token released elsewhere), an ACQUIRE under its token would make new ones
        that keep answering its renewals, and the loss would go unseen."""
        self._usable()
        sent = self._timers.loop.time()
        renewed, error = 0, None
        try:
            renewed = int(
                await self._command("PATHLOCK.RENEW", self.key, self.token, self.ttl_ms)
            )
        except ResponseError as raised:
            error = raised
        lost = self._proved(sent, renewed, error)
        if lost is not None:
            self._lose(lost)
        self._usable()

    async def run(self, work: Awaitable[T]) -> T:
        """Awaits `work`; if the lease is lost first, cancels it and raises `LeaseLost`."""
        self.check()
        task = asyncio.ensure_future(work)
        lost = asyncio.ensure_future(self.lost._lost.wait())
        try:
            await asyncio.wait({task, lost}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            lost.cancel()
            if not task.done():
                task.cancel()
                try:
                    await task
                except asyncio.CancelledError:
                    pass
        if task.cancelled() and self.lost.is_set():
            self.check()
        return task.result()

    async def release(self) -> None:
        """Stops the watchdog, then frees the locks. Releasing twice or a lost lease is fine.

        When the server cannot be reached the release is retried in the background until the
        TTL has passed (by then the locks have expired anyway), rather than raised.
        """
        if self._released:
            return
        self._released = True
        self.lost._ended.set()
        try:
            await self._command("PATHLOCK.RELEASE", self.key, self.token)
        except CONNECTION_ERRORS:
            until = self._timers.loop.time() + self._ttl
            _keep(asyncio.ensure_future(_release_later(self._command, self.key, self.token, until)))
        except ResponseError as error:
            # A key overwritten by another value took the locks with it: nothing left to free.
            if not is_wrong_type(error):
                raise

    async def __aenter__(self) -> "AsyncLease":
        return self

    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> None:
        await self.release()

    # The watchdog.

    def _schedule(self) -> None:
        wake = self._wake()
        if wake is not None:
            self._timers.at(wake, self)

    def fire(self, when: float) -> None:
        # The timer may run a moment before `when`; the lease goes by the time it asked for.
        due = self._due(when, max(self._timers.loop.time(), when))
        if due == "expired":
            self._lose("expired")
            return
        if due == "renew":
            # Its own task, left to finish even if the lease is released meanwhile: after the
            # RELEASE it answers 0 and changes nothing, and its answer is no longer looked at.
            _keep(asyncio.ensure_future(self._renew(self._timers.loop.time())))
        self._schedule()

    async def _renew(self, sent: float) -> None:
        try:
            answer: Any = await self._command(
                "PATHLOCK.RENEW", self.key, self.token, self.ttl_ms
            )
        except Exception as error:  # retried while the deadline is ahead, whatever it was
            log.debug("pathlock: renewing %s failed: %r", self.token, error)
            answer = error
        lost = self._renewed(sent, answer, self._timers.loop.time())
        if lost is not None:
            self._lose(lost)
            return
        self._schedule()

    def _lose(self, reason: str) -> None:
        if not self._mark_lost(reason):
            return
        self.lost._set()
        log.warning("pathlock: %s", LeaseLost(self.key, self.token, reason))
        if self._on_lost is not None:
            try:
                result = self._on_lost(self)
                if inspect.isawaitable(result):
                    _keep(asyncio.ensure_future(result))
            except Exception:
                log.exception("pathlock: on_lost callback failed")


async def _release_later(command: Run, key: Key, token: str, until: float) -> None:
    """Sends RELEASE for a token until it gets through or the locks have surely expired."""
    loop = asyncio.get_running_loop()
    while True:
        try:
            await command("PATHLOCK.RELEASE", key, token)
            return
        except Exception:
            if loop.time() >= until:
                return
            await asyncio.sleep(0.2)
