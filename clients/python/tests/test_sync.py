"""The blocking client against a real standalone server (and a real replica)."""

from __future__ import annotations

import random
import threading
import time
import uuid
from typing import Any, List

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from helpers import KEY, held, renew_calls
from proxy import DroppingProxy
from servers import Server, replica_of, wait_until

from pathlock import Blocker, Busy, Lease, LeaseLost, NotReplicated, PathLocks

# Loss must be reported within one renewal period after the lease ends; this much more is
# allowed for a loaded test machine.
SLACK = 0.25


def test_each_operation_asks_for_the_locks_of_the_table(client: redis.Redis) -> None:
    locks = PathLocks(client, KEY)
    cases = [
        (lambda: locks.upload("/D/f"), [("WRITE", "/D/f")]),
        (lambda: locks.create("/D/N"), [("WRITE", "/D/N")]),
        (lambda: locks.read("/D/f"), [("READ", "/D/f")]),
        (lambda: locks.rename("/D/f", "/D/g"), [("WRITE", "/D/f"), ("WRITE", "/D/g")]),
        (lambda: locks.move("/A/C", "/B"), [("WRITE", "/A/C"), ("WRITE", "/B/C")]),
        (lambda: locks.move("/A/C", "/"), [("WRITE", "/A/C"), ("WRITE", "/C")]),
        (lambda: locks.copy("/A/a.txt", "/B"), [("READ", "/A/a.txt"), ("WRITE", "/B/a.txt")]),
        (lambda: locks.delete("/A"), [("WRITE", "/A")]),
        (lambda: locks.purge("/bin/1", "/bin/2"), [("WRITE", "/bin/1"), ("WRITE", "/bin/2")]),
        (
            lambda: locks.lock([("read", "/X"), ("WRITE", "/X/y")]),
            [("READ", "/X"), ("WRITE", "/X/y")],
        ),
    ]
    for acquire, expected in cases:
        with acquire() as lease:
            assert isinstance(lease, Lease)
            assert (
                str(uuid.UUID(lease.token)) == lease.token and uuid.UUID(lease.token).version == 4
            )
            assert sorted(held(client)) == sorted((m, p, lease.token) for m, p in expected)
            assert list(lease.locks) == expected
        assert held(client) == []
    with pytest.raises(ValueError):
        locks.move("/", "/B")
    with pytest.raises(ValueError):
        locks.lock([("SHARED", "/A")])


def test_watchdog_keeps_a_300ms_lease_for_3s(client: redis.Redis) -> None:
    locks = PathLocks(client, KEY, ttl_ms=300)
    with locks.move("/A/C", "/B") as lease:
        time.sleep(3.0)
        assert not lease.lost.is_set()
        assert sorted(held(client)) == [
            ("WRITE", "/A/C", lease.token),
            ("WRITE", "/B/C", lease.token),
        ]
        with pytest.raises(Busy):
            PathLocks(client, KEY).upload("/A/C/x")
    assert held(client) == []
    assert not lease.lost.is_set()


def test_second_owner_is_busy_with_blockers_then_granted(client: redis.Redis) -> None:
    alice, bob = PathLocks(client, KEY), PathLocks(client, KEY)
    moving = alice.move("/A/C", "/B", ttl_ms=60000)
    with pytest.raises(Busy) as refused:
        bob.upload("/A/C/D/new.txt")
    [blocker] = refused.value.blockers
    assert isinstance(blocker, Blocker)
    assert (blocker.path, blocker.mode, blocker.token, blocker.fence) == (
        "/A/C",
        "WRITE",
        moving.token,
        moving.fence,
    )
    assert 50000 < blocker.ttl_ms <= 60000
    assert refused.value.locks == (("WRITE", "/A/C/D/new.txt"),)
    # Beside the folder being moved, work goes on.
    with bob.upload("/A/CD/notes.txt") as beside:
        assert beside.fence == moving.fence + 1
    moving.release()
    with bob.upload("/A/C/D/new.txt") as upload:
        assert held(client) == [("WRITE", "/A/C/D/new.txt", upload.token)]

    # With wait_ms, the second owner waits for the release instead.
    moving = alice.move("/A/C", "/B")
    threading.Timer(0.2, moving.release).start()
    started = time.monotonic()
    with bob.upload("/A/C/D/new.txt", wait_ms=5000):
        assert 0.15 < time.monotonic() - started < 4


def lost_within(lease: Lease, since: float, limit: float) -> float:
    assert lease.lost.wait(limit + 2), "the lease was never reported lost"
    took = time.monotonic() - since
    assert took <= limit, f"reported lost after {took:.3f}s, more than {limit:.3f}s"
    return took


def test_lost_when_the_token_is_released_elsewhere(client: redis.Redis) -> None:
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


def test_lost_when_the_key_is_deleted(client: redis.Redis) -> None:
    with PathLocks(client, KEY, ttl_ms=900).upload("/A/f") as lease:
        lease.check()
        client.delete(KEY)
        lost_within(lease, time.monotonic(), 0.3 + SLACK)
        with pytest.raises(LeaseLost):
            lease.check()


def test_lost_when_the_server_is_paused_past_the_deadline(own_server: Server) -> None:
    client = own_server.client()
    lease = PathLocks(client, KEY, ttl_ms=900).upload("/A/f")
    time.sleep(0.5)
    paused = time.monotonic()
    client.execute_command("CLIENT", "PAUSE", 3000, "WRITE")
    # The last renewal that got through was sent about one period before the pause at most: the
    # loss waits for the deadline, it is not reported at the first renewal that hangs.
    took = lost_within(lease, paused, 0.9 + 0.3 + SLACK)
    assert took >= 0.9 - 0.3 - 0.15
    assert lease.lost_reason == "expired"
    client.execute_command("CLIENT", "UNPAUSE")
    lease.release()
    wait_until(lambda: held(client) == [], what="the lost lease to be released")


def test_lost_when_the_server_is_stopped_past_the_deadline(own_server: Server) -> None:
    lease = PathLocks(own_server.client(), KEY, ttl_ms=900).upload("/A/f")
    time.sleep(0.5)
    stopped = time.monotonic()
    own_server.stop()
    lost_within(lease, stopped, 0.9 + 0.3 + SLACK)
    lease.release()  # the server is gone: not an error


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


def test_replicas_with_a_real_replica_and_not_replicated_without(own_server: Server) -> None:
    replica = replica_of(own_server)
    client = own_server.client()
    try:
        locks = PathLocks(client, KEY, replicas=1, replicas_timeout_ms=2000)
        with locks.upload("/A/f") as lease:
            # WAIT answered, so the replica has the lock already.
            assert held(replica.client()) == [("WRITE", "/A/f", lease.token)]
        replica.stop()
        with pytest.raises(NotReplicated) as refused:
            PathLocks(client, KEY, replicas=1, replicas_timeout_ms=300).upload("/A/g")
        assert (refused.value.acknowledged, refused.value.wanted) == (0, 1)
        assert held(client) == []
        # Without replicas asked for, the same request is granted.
        with locks.upload("/A/g", replicas=0):
            pass
    finally:
        replica.close()


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
