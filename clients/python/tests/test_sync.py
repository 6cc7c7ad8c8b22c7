"""The blocking client beyond the shared contract (`test_contract.py`): `on_lost`, retries
through a proxy that drops replies, the renewal/release race, and scopes."""

from __future__ import annotations

import random
import threading
import time
from typing import Any, List

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from helpers import KEY, held, renew_calls
from proxy import DroppingProxy
from servers import Server, wait_until

from pathlock import Lease, LeaseLost, PathLocks

# Loss must be reported within one renewal period after the lease ends; this much more is
# allowed for a loaded test machine.
SLACK = 0.25

def lost_within(lease: Lease, since: float, limit: float) -> float:
    assert lease.lost.wait(limit + 2), "the lease was never reported lost"
    took = time.monotonic() - since
    assert took <= limit, f"reported lost after {took:.3f}s, more than {limit:.3f}s"
    return took


def test_on_lost_is_called_once_on_a_worker_thread(client: redis.Redis) -> None:
    called: List[Lease] = []
    locks = PathLocks(client, KEY, ttl_ms=900, on_lost=called.append)
    lease = locks.upload("/A/f")
    time.sleep(0.4)
    assert client.execute_command("PATHLOCK.RELEASE", KEY, lease.token) == 1
    lost_within(lease, time.monotonic(), 0.3 + SLACK)
    wait_until(lambda: called == [lease], timeout=1, what="on_lost to be called")
    assert lease.lost_reason == "gone"
    with pytest.raises(LeaseLost):
        lease.check()
    lease.release()
    lease.release()
    assert called == [lease]

def no_retry_client(port: int) -> redis.Redis:
    """redis-py retries on its own by default; without that, the client's own retry is tested."""
    return redis.Redis(host="127.0.0.1", port=port, retry=Retry(NoBackoff(), 0))


@pytest.mark.parametrize("redis_py_retries", [False, True])
def test_an_acquire_whose_reply_is_lost_is_retried_as_the_same_owner(
    client: redis.Redis, server: Server, redis_py_retries: bool
) -> None:
    proxy = DroppingProxy(server.port, drops=1)
    try:
        # Whether redis-py resends the command itself or the client does, the token is the same.
        proxied = redis.Redis(port=proxy.port) if redis_py_retries else no_retry_client(proxy.port)
        locks = PathLocks(proxied, KEY)
        with locks.move("/A/C", "/B") as lease:
            assert proxy.dropped == 1 and proxy.acquires == 2
            # One owner, not two: both locks under the one token.
            assert sorted(held(client)) == [
                ("WRITE", "/A/C", lease.token),
                ("WRITE", "/B/C", lease.token),
            ]
            # The retry was a re-acquire: every lock carries the fence of the last grant.
            fences = {e[4] for e in client.execute_command("PATHLOCK.LOCKS", KEY)}
            assert fences == {lease.fence}
        assert held(client) == []
    finally:
        proxy.close()


def test_an_acquire_that_keeps_failing_releases_its_token(
    client: redis.Redis, server: Server
) -> None:
    proxy = DroppingProxy(server.port, drops=1000)
    try:
        locks = PathLocks(no_retry_client(proxy.port), KEY, ttl_ms=60000)
        with pytest.raises(redis.ConnectionError):
            locks.upload("/A/f")
        assert proxy.acquires >= 2
        # The server granted it; the client frees it in the background, long before the TTL.
        wait_until(lambda: held(client) == [], timeout=5, what="the orphaned grant to be released")
    finally:
        proxy.close()

class GatedRedis(redis.Redis):
    """A real client whose renewals can be held back before they are sent or after they are
    answered, to put a renewal in flight exactly when the lease is released."""

    def __init__(self, *args: Any, hold: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.hold = hold
        self.gate = threading.Event()
        self.gate.set()
        self.holding = threading.Event()
        self.answers: List[int] = []

    def execute_command(self, *args: Any, **options: Any) -> Any:
        if args[0] != "PATHLOCK.RENEW" or self.gate.is_set():
            return super().execute_command(*args, **options)
        if self.hold == "before-send":
            self.holding.set()
            self.gate.wait()
        answer = super().execute_command(*args, **options)
        if self.hold == "after-answer":
            self.holding.set()
            self.gate.wait()
        self.answers.append(answer)
        return answer


@pytest.mark.parametrize("hold", ["before-send", "after-answer"])
def test_a_renewal_in_flight_at_release_neither_keeps_the_lock_nor_reports_a_loss(
    server: Server, hold: str
) -> None:
    gated = GatedRedis(host="127.0.0.1", port=server.port, hold=hold)
    client = server.client()
    lost: List[Lease] = []
    lease = PathLocks(gated, KEY, ttl_ms=600, on_lost=lost.append).upload("/A/f")
    gated.gate.clear()
    assert gated.holding.wait(2)
    lease.release()
    assert held(client) == []
    gated.gate.set()
    wait_until(lambda: len(gated.answers) == 1, what="the held-back renewal to be answered")
    # Sent after the RELEASE it answers 0; answered before it, the RELEASE freed what it renewed.
    assert gated.answers == [0 if hold == "before-send" else 1]
    time.sleep(0.8)
    assert held(client) == []
    assert not lease.lost.is_set() and lost == []


def test_releases_racing_renewals_never_report_a_loss(client: redis.Redis) -> None:
    lost: List[Lease] = []
    locks = PathLocks(client, KEY, ttl_ms=300, on_lost=lost.append)
    rng = random.Random(7)
    calls = renew_calls(client)
    for i in range(40):
        with locks.upload(f"/f{i % 5}"):
            # Around the renewal period (100 ms), so that releases land before, during and
            # after renewals.
            time.sleep(rng.uniform(0.06, 0.14))
    assert renew_calls(client) > calls, "no renewal ever ran"
    time.sleep(0.1)
    assert lost == [] and held(client) == []


def test_scope_ends_by_an_exception_release_and_lost_release_are_no_errors(
    client: redis.Redis,
) -> None:
    locks = PathLocks(client, KEY)
    with pytest.raises(RuntimeError):
        with locks.delete("/A") as lease:
            raise RuntimeError("work failed")
    assert lease.released and held(client) == []
    lease.release()
    assert not lease.lost.is_set()
