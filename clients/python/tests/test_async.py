"""The asyncio client beyond the shared contract (`test_contract.py`): scopes, `on_lost` as a
coroutine, `run()`, retries through a proxy that drops replies, the renewal/release race."""

from __future__ import annotations

import asyncio
import random
import time
from typing import Any, Awaitable, Callable, List

import pytest
import redis
import redis.asyncio
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from helpers import KEY, held, renew_calls, run_async
from proxy import DroppingProxy
from servers import Server

from pathlock import AsyncLease, AsyncPathLocks, LeaseLost

SLACK = 0.25


def run(server: Server, body: Callable[[redis.asyncio.Redis], Awaitable[None]]) -> None:
    run_async(server.port, body)


async def lost_within(lease: AsyncLease, since: float, limit: float) -> float:
    await asyncio.wait_for(lease.lost.wait(), limit + 2)
    took = time.monotonic() - since
    assert took <= limit, f"reported lost after {took:.3f}s, more than {limit:.3f}s"
    return took


def test_operations_and_scopes(server: Server, client: redis.Redis) -> None:
    async def body(aclient: redis.asyncio.Redis) -> None:
        locks = AsyncPathLocks(aclient, KEY)
        async with locks.move("/A/C", "/B") as lease:
            assert isinstance(lease, AsyncLease)
            assert sorted(held(client)) == [
                ("WRITE", "/A/C", lease.token),
                ("WRITE", "/B/C", lease.token),
            ]
        assert held(client) == []
        lease = await locks.copy("/A/a.txt", "/B")
        async with lease:
            assert sorted(held(client)) == [
                ("READ", "/A/a.txt", lease.token),
                ("WRITE", "/B/a.txt", lease.token),
            ]
        assert lease.released and held(client) == []
        with pytest.raises(RuntimeError):
            async with locks.purge("/bin/1", "/bin/2") as lease:
                assert len(held(client)) == 2
                raise RuntimeError("work failed")
        assert held(client) == []
        await lease.release()

    run(server, body)

def test_on_lost_is_called_on_the_loop_and_a_coroutine_is_run(
    server: Server, client: redis.Redis
) -> None:
    async def body(aclient: redis.asyncio.Redis) -> None:
        called: List[AsyncLease] = []

        async def on_lost(lease: AsyncLease) -> None:
            called.append(lease)

        locks = AsyncPathLocks(aclient, KEY, ttl_ms=900, on_lost=on_lost)
        lease = await locks.upload("/A/f")
        await asyncio.sleep(0.4)
        assert client.execute_command("PATHLOCK.RELEASE", KEY, lease.token) == 1
        await lost_within(lease, time.monotonic(), 0.3 + SLACK)
        await asyncio.sleep(0.01)
        assert called == [lease]
        await lease.release()

    run(server, body)


def test_run_cancels_work_when_the_lease_is_lost(server: Server, client: redis.Redis) -> None:
    async def body(aclient: redis.asyncio.Redis) -> None:
        async with AsyncPathLocks(aclient, KEY, ttl_ms=600).upload("/A/f") as lease:
            cancelled = asyncio.Event()

            async def long_work() -> None:
                try:
                    await asyncio.sleep(30)
                except asyncio.CancelledError:
                    cancelled.set()
                    raise

            assert await lease.run(asyncio.sleep(0.05, "done")) == "done"
            asyncio.get_running_loop().call_later(0.3, lambda: client.delete(KEY))
            with pytest.raises(LeaseLost):
                await lease.run(long_work())
            assert cancelled.is_set()

    run(server, body)

def test_an_acquire_whose_reply_is_lost_is_retried_as_the_same_owner(
    server: Server, client: redis.Redis
) -> None:
    proxy = DroppingProxy(server.port, drops=1)

    async def body(_: redis.asyncio.Redis) -> None:
        aclient = redis.asyncio.Redis(
            host="127.0.0.1", port=proxy.port, retry=Retry(NoBackoff(), 0)
        )
        async with AsyncPathLocks(aclient, KEY).move("/A/C", "/B") as lease:
            assert proxy.dropped == 1 and proxy.acquires == 2
            assert sorted(held(client)) == [
                ("WRITE", "/A/C", lease.token),
                ("WRITE", "/B/C", lease.token),
            ]
            # The retry was a re-acquire: every lock carries the fence of the last grant.
            fences = {e[4] for e in client.execute_command("PATHLOCK.LOCKS", KEY)}
            assert fences == {lease.fence}
        assert held(client) == []
        await aclient.aclose()

    try:
        run(server, body)
    finally:
        proxy.close()


def test_an_acquire_that_keeps_failing_releases_its_token(
    server: Server, client: redis.Redis
) -> None:
    proxy = DroppingProxy(server.port, drops=1000)

    async def body(_: redis.asyncio.Redis) -> None:
        aclient = redis.asyncio.Redis(
            host="127.0.0.1", port=proxy.port, retry=Retry(NoBackoff(), 0)
        )
        with pytest.raises(redis.ConnectionError):
            await AsyncPathLocks(aclient, KEY, ttl_ms=60000).upload("/A/f")
        deadline = time.monotonic() + 5
        while held(client) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert held(client) == []
        await aclient.aclose()

    try:
        run(server, body)
    finally:
        proxy.close()

class GatedRedis(redis.asyncio.Redis):
    """A real client whose renewals can be held back before they are sent or after they are
    answered, to put a renewal in flight exactly when the lease is released."""

    def __init__(self, *args: Any, hold: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.hold = hold
        self.gate = asyncio.Event()
        self.gate.set()
        self.holding = asyncio.Event()
        self.answers: List[int] = []

    async def execute_command(self, *args: Any, **options: Any) -> Any:
        if args[0] != "PATHLOCK.RENEW" or self.gate.is_set():
            return await super().execute_command(*args, **options)
        if self.hold == "before-send":
            self.holding.set()
            await self.gate.wait()
        answer = await super().execute_command(*args, **options)
        if self.hold == "after-answer":
            self.holding.set()
            await self.gate.wait()
        self.answers.append(answer)
        return answer


@pytest.mark.parametrize("hold", ["before-send", "after-answer"])
def test_a_renewal_in_flight_at_release_neither_keeps_the_lock_nor_reports_a_loss(
    server: Server, client: redis.Redis, hold: str
) -> None:
    async def body(_: redis.asyncio.Redis) -> None:
        gated = GatedRedis(host="127.0.0.1", port=server.port, hold=hold)
        lost: List[AsyncLease] = []
        lease = await AsyncPathLocks(gated, KEY, ttl_ms=600, on_lost=lost.append).upload("/A/f")
        gated.gate.clear()
        await asyncio.wait_for(gated.holding.wait(), 2)
        await lease.release()
        assert held(client) == []
        gated.gate.set()
        while not gated.answers:
            await asyncio.sleep(0.01)
        assert gated.answers == [0 if hold == "before-send" else 1]
        await asyncio.sleep(0.8)
        assert held(client) == []
        assert not lease.lost.is_set() and lost == []
        await gated.aclose()

    run(server, body)


def test_releases_racing_renewals_never_report_a_loss(server: Server, client: redis.Redis) -> None:
    async def body(aclient: redis.asyncio.Redis) -> None:
        lost: List[AsyncLease] = []
        locks = AsyncPathLocks(aclient, KEY, ttl_ms=300, on_lost=lost.append)
        rng = random.Random(7)
        calls = renew_calls(client)
        for i in range(40):
            async with locks.upload(f"/f{i % 5}"):
                await asyncio.sleep(rng.uniform(0.06, 0.14))
        assert renew_calls(client) > calls, "no renewal ever ran"
        await asyncio.sleep(0.1)
        assert lost == [] and held(client) == []

    run(server, body)
