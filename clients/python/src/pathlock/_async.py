"""The asyncio client: `AsyncPathLocks` on `redis.asyncio.Redis` or `redis.asyncio.RedisCluster`."""

from __future__ import annotations

import asyncio
import inspect
import logging
import math
from contextlib import asynccontextmanager
from types import TracebackType
from typing import (
    Any,
    AsyncIterator,
    Awaitable,
    Callable,
    Generator,
    Optional,
    Sequence,
    Set,
    Tuple,
    Type,
    TypeVar,
    Union,
)

import redis.asyncio
from redis.asyncio.cluster import RedisCluster

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
from ._sync import NO_RENEWAL, RENEWED_ZERO
from ._timers import LoopTimers

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


class AsyncPathLocks(Operations["Acquiring"]):
    """The asyncio twin of `PathLocks`. Each operation returns an `Acquiring`: await it for an
    `AsyncLease`, or use it directly in `async with`.
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
        on_lost: Optional[Callable[["AsyncLease"], Any]] = None,
    ) -> None:
        self.client = client
        self.key = key
        self.options = Options(ttl_ms, wait_ms, replicas, replicas_timeout_ms, on_lost)
        self._timers: Optional[LoopTimers] = None

    def _timers_of_loop(self) -> LoopTimers:
        loop = asyncio.get_running_loop()
        if self._timers is None or self._timers.loop is not loop:
            self._timers = LoopTimers(loop)
        return self._timers

    def _acquire(
        self,
        locks: Sequence[LockRequest],
        ttl_ms: Optional[int],
        wait_ms: Optional[int],
        replicas: Optional[int],
        on_lost: Optional[Callable[[Any], Any]],
    ) -> "Acquiring":
        options = self.options.override(ttl_ms, wait_ms, replicas, on_lost)
        return Acquiring(lambda: self._acquire_now(locks, options))

    async def _acquire_now(self, locks: Sequence[LockRequest], options: Options) -> "AsyncLease":
        # The client makes the token, so that a retry after a lost reply is the same owner.
        token = new_token()
        if isinstance(self.client, RedisCluster):
            # A cluster client's first command learns the slots and the commands' key positions
            # first; that must not count against the lease's TTL, which starts when it is sent.
            cluster: Any = self.client
            await cluster.initialize()
        if options.replicas == 0:
            return await self._grant(self.client.execute_command, token, locks, options)
        # WAIT counts the acknowledgements of the writes made on its own connection, so it must
        # follow the ACQUIRE on the very connection that sent it.
        async with self._pinned() as run:
            lease = await self._grant(run, token, locks, options)
            try:
                acknowledged = int(await run("WAIT", options.replicas, options.replicas_timeout_ms))
            except BaseException:
                await lease.release()
                raise
            if acknowledged < options.replicas:
                await lease.release()
                raise NotReplicated(acknowledged, options.replicas)
            return lease

    async def _grant(
        self, run: Run, token: str, locks: Sequence[LockRequest], options: Options
    ) -> "AsyncLease":
        sent, reply = await self._send_acquire(run, token, locks, options)
        if reply is None:
            blockers = await self.client.execute_command(*check_args(self.key, token, locks))
            raise Busy(locks, blockers_of(blockers))
        lease = AsyncLease(self, token, fence_of(reply), locks, options, sent)
        lease._start()
        return lease

    async def _send_acquire(
        self, run: Run, token: str, locks: Sequence[LockRequest], options: Options
    ) -> Tuple[float, Any]:
        """The ACQUIRE's reply and when the attempt that got it was sent.

        After a connection error the grant may or may not have happened; sending the same token
        again is then idempotent. It is retried at least once and while the wait budget lasts.
        """
        # The event loop's clock, which the watchdog's timers run on.
        loop = asyncio.get_running_loop()
        budget_end = loop.time() + options.wait_ms / 1000.0
        attempt = 0
        while True:
            sent = loop.time()
            wait_ms = max(0, math.ceil((budget_end - sent) * 1000)) if attempt else options.wait_ms
            try:
                return sent, await run(
                    *acquire_args(self.key, token, options.ttl_ms, wait_ms, locks)
                )
            except CONNECTION_ERRORS:
                attempt += 1
                if attempt > 1 and loop.time() >= budget_end:
                    # A grant may have happened that no reply reported: free it once possible.
                    until = loop.time() + options.ttl_ms / 1000.0
                    _keep(
                        asyncio.ensure_future(_release_later(self.client, self.key, token, until))
                    )
                    raise
                await asyncio.sleep(min(0.01 * 2**attempt, 0.2))

    @asynccontextmanager
    async def _pinned(self) -> AsyncIterator[Run]:
        """One connection to the key's master, held for a few commands."""
        client: Any = self.client
        if not isinstance(client, RedisCluster):
            pinned = client.client()
            try:
                yield pinned.execute_command
            finally:
                await pinned.aclose()
            return
        cluster: Any = client
        await cluster.initialize()
        node: Any = cluster.get_node_from_key(self.key)
        # A connection of its own to the key's master: the cluster client has no public way to
        # hold one of its pooled connections, and it is only for acquires that ask for replicas.
        connection = node.connection_class(**node.connection_kwargs)

        async def run(*args: Any) -> Any:
            await connection.send_command(*args)
            return await connection.read_response()

        try:
            yield run
        finally:
            await connection.disconnect()


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


class AsyncLease:
    """Locks held by one owner, renewed in the background until released.

    Also an async context manager that releases them when the block ends. `lost` (an
    `asyncio.Event`) is set when the lease is lost; `check()` then raises `LeaseLost`, and
    `run(awaitable)` cancels the work it runs.
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
        self.key = owner.key
        self.token = token
        #: The fence of the grant: pass it to the storage the locks protect.
        self.fence = fence
        self.locks: Tuple[LockRequest, ...] = tuple(locks)
        self.ttl_ms = options.ttl_ms
        self.lost = asyncio.Event()
        self.lost_reason: Optional[str] = None
        self._client = owner.client
        self._on_lost = options.on_lost
        self._ttl = options.ttl_ms / 1000.0
        self._period = options.period
        self._released = False
        # Known from the client's own clock only: when the last successful command was sent.
        self._deadline = sent + self._ttl
        self._next_renew = sent + self._period
        self._renewing = False
        self._wake_at = math.inf
        self._timers = owner._timers_of_loop()

    def __repr__(self) -> str:
        state = "released" if self._released else "lost" if self.lost.is_set() else "held"
        return f"<AsyncLease {self.token} fence={self.fence} {state} {list(self.locks)}>"

    @property
    def released(self) -> bool:
        return self._released

    @property
    def finished(self) -> bool:
        return self._released or self.lost.is_set()

    def check(self) -> None:
        """Raises `LeaseLost` if the lease was lost; call it between steps of long work."""
        if self.lost.is_set():
            raise LeaseLost(self.token, self.lost_reason or NO_RENEWAL)

    async def run(self, work: Awaitable[T]) -> T:
        """Awaits `work`; if the lease is lost first, cancels it and raises `LeaseLost`."""
        self.check()
        task = asyncio.ensure_future(work)
        lost = asyncio.ensure_future(self.lost.wait())
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
        try:
            await self._client.execute_command("PATHLOCK.RELEASE", self.key, self.token)
        except CONNECTION_ERRORS:
            until = self._timers.loop.time() + self._ttl
            _keep(asyncio.ensure_future(_release_later(self._client, self.key, self.token, until)))

    async def __aenter__(self) -> "AsyncLease":
        return self

    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> None:
        await self.release()

    # The watchdog: the handle's timer wakes the lease at each renewal (which then runs as a
    # task of its own) and at its deadline.

    def _start(self) -> None:
        self._schedule()

    def _schedule(self) -> None:
        if self.finished:
            return
        wake = self._deadline if self._renewing else min(self._next_renew, self._deadline)
        # One pending wake-up is enough; an earlier one replaces a later one.
        if wake < self._wake_at:
            self._wake_at = wake
            self._timers.at(wake, self)

    def fire(self, when: float) -> None:
        if when == self._wake_at:
            self._wake_at = math.inf
        if self.finished:
            return
        # The timer may run a moment before `when`; the lease goes by the time it asked for.
        now = max(self._timers.loop.time(), when)
        if now >= self._deadline:
            self._lose(NO_RENEWAL)
            return
        if not self._renewing and now >= self._next_renew:
            self._renewing = True
            # Its own task, left to finish even if the lease is released meanwhile: after the
            # RELEASE it answers 0 and changes nothing, and its answer is no longer looked at.
            _keep(asyncio.ensure_future(self._renew(self._timers.loop.time())))
        self._schedule()

    async def _renew(self, sent: float) -> None:
        try:
            renewed: Optional[int] = int(
                await self._client.execute_command(
                    "PATHLOCK.RENEW", self.key, self.token, self.ttl_ms
                )
            )
        except Exception as error:  # retried while the deadline is ahead, whatever it was
            log.debug("pathlock: renewing %s failed: %r", self.token, error)
            renewed = None
        self._renewing = False
        if self.finished:
            return
        if renewed is None:
            self._next_renew = self._timers.loop.time() + self._period * RETRY_FRACTION
        elif renewed == 0:
            self._lose(RENEWED_ZERO)
            return
        else:
            self._deadline = max(self._deadline, sent + self._ttl)
            self._next_renew = sent + self._period
        self._schedule()

    def _lose(self, reason: str) -> None:
        if self.finished:
            return
        self.lost_reason = reason
        self.lost.set()
        log.warning("pathlock: lease %s on %r lost: %s", self.token, self.key, reason)
        if self._on_lost is not None:
            try:
                result = self._on_lost(self)
                if inspect.isawaitable(result):
                    _keep(asyncio.ensure_future(result))
            except Exception:
                log.exception("pathlock: on_lost callback failed")


async def _release_later(client: Client, key: Key, token: str, until: float) -> None:
    """Sends RELEASE for a token until it gets through or the locks have surely expired."""
    loop = asyncio.get_running_loop()
    while True:
        try:
            await client.execute_command("PATHLOCK.RELEASE", key, token)
            return
        except Exception:
            if loop.time() >= until:
                return
            await asyncio.sleep(0.2)
