"""The shared contract (`clients/contract/`): every scenario, run by the sync client and by the
asyncio client against real servers. `clients/contract/README.md` defines the steps; this is the
reference runner the other languages' runners follow."""

from __future__ import annotations

import asyncio
import inspect
import json
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional

import pytest
import redis
import redis.asyncio
import redis.asyncio.cluster
from redis.cluster import RedisCluster

from servers import Server, cluster, replica_of, wait_until

from pathlock import AsyncPathLocks, Busy, LeaseLost, NotReplicated, PathLocks, WrongType

CONTRACT = Path(__file__).resolve().parents[2] / "contract"
SETTINGS = json.loads((CONTRACT / "contract.json").read_text())
SLACK = SETTINGS["slack_ms"] / 1000.0
TASK_TIMEOUT = SETTINGS["task_timeout_ms"] / 1000.0
SCENARIOS = [
    scenario
    for file in sorted((CONTRACT / "scenarios").glob("*.json"))
    for scenario in json.loads(file.read_text())["scenarios"]
]


# The servers of each topology, shared by the scenarios and started again after one stops them.


class Topology:
    def __init__(self, name: str) -> None:
        self.name = name
        self.replica: Optional[Server] = None
        if name == "cluster":
            self.masters = cluster(3)
        else:
            self.masters = [Server()]
            if name == "replica":
                self.replica = replica_of(self.masters[0])
        self.stopped = False
        self.admin: Any = self._client(self.masters[0])

    def _client(self, server: Server) -> Any:
        if self.name == "cluster":
            return RedisCluster(host="127.0.0.1", port=server.port)
        return server.client()

    def on(self, where: str) -> Any:
        if where == "replica":
            assert self.replica is not None, "this topology has no replica"
            return self.replica.client()
        return self.admin

    def flush(self) -> None:
        for server in self.masters:
            server.client().flushall()
            server.client().config_resetstat()

    def stop(self, which: str) -> None:
        self.stopped = True
        server = self.replica if which == "replica" else self.masters[0]
        assert server is not None
        server.stop()

    def close(self) -> None:
        for server in self.masters + ([self.replica] if self.replica else []):
            server.close()


@pytest.fixture(scope="module")
def topologies() -> Iterator[Callable[[str], Topology]]:
    live: Dict[str, Topology] = {}

    def get(name: str) -> Topology:
        if name in live and live[name].stopped:
            live.pop(name).close()
        if name not in live:
            live[name] = Topology(name)
        live[name].flush()
        return live[name]

    yield get
    for topology in live.values():
        topology.close()


# The two clients behind one interface: `do` runs a client call and answers its value (awaited
# on the asyncio client's loop), `spawn` runs it in the background.


class SyncDriver:
    name = "python"

    def __init__(self, topology: Topology) -> None:
        self.client = topology._client(topology.masters[0])
        self.pool = ThreadPoolExecutor(8)

    def handle(self, key: str, options: Dict[str, Any]) -> Any:
        return PathLocks(self.client, key, **options)

    def do(self, call: Callable[[], Any]) -> Any:
        return call()

    def spawn(self, call: Callable[[], Any]) -> "Future[Any]":
        return self.pool.submit(call)

    def wait_lost(self, lease: Any, timeout: float) -> bool:
        return bool(lease.lost.wait(timeout))

    def close(self) -> None:
        self.pool.shutdown(wait=False)
        self.client.close()


class AsyncDriver:
    name = "python-asyncio"

    def __init__(self, topology: Topology) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        port = topology.masters[0].port

        def make() -> Any:
            if topology.name == "cluster":
                return redis.asyncio.cluster.RedisCluster(host="127.0.0.1", port=port)
            return redis.asyncio.Redis(host="127.0.0.1", port=port)

        self.client = self.do(make)

    def handle(self, key: str, options: Dict[str, Any]) -> Any:
        return AsyncPathLocks(self.client, key, **options)

    async def _run(self, call: Callable[[], Any]) -> Any:
        value = call()
        return await value if inspect.isawaitable(value) else value

    def spawn(self, call: Callable[[], Any]) -> "Future[Any]":
        return asyncio.run_coroutine_threadsafe(self._run(call), self.loop)

    def do(self, call: Callable[[], Any]) -> Any:
        return self.spawn(call).result(TASK_TIMEOUT)

    def wait_lost(self, lease: Any, timeout: float) -> bool:
        async def wait() -> bool:
            try:
                return await asyncio.wait_for(lease.lost.wait(), timeout)
            except asyncio.TimeoutError:
                return False

        return bool(self.do(wait))

    def close(self) -> None:
        try:
            self.do(self.client.aclose)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(5)


# What the steps compare.


def text(value: Any) -> Any:
    """A reply as the scenarios write it: bytes as str, redis-py's True for OK as "OK"."""
    if isinstance(value, bytes):
        return value.decode()
    if value is True:
        return "OK"
    if isinstance(value, (list, tuple)):
        return [text(v) for v in value]
    return value


def matches(pattern: str, message: str) -> bool:
    """Whether `message` is `pattern`, each `{n}` in it standing for one or more digits."""
    pieces = pattern.split("{n}")
    if not message.startswith(pieces[0]):
        return False
    at = len(pieces[0])
    for piece in pieces[1:]:
        digits = at
        while digits < len(message) and message[digits].isdigit():
            digits += 1
        if digits == at or not message.startswith(piece, digits):
            return False
        at = digits + len(piece)
    return at == len(message)


def entry_matches(want: Dict[str, Any], got: Any) -> bool:
    for field, value in want.items():
        if field == "ttl_ms_at_most":
            if not 0 < got.ttl_ms <= value:
                return False
        elif field == "fence":
            if got.fence != int(value):
                return False
        elif field == "locks":
            if [list(lock) for lock in got.locks] != value:
                return False
        elif getattr(got, field) != value:
            return False
    return True


class Run:
    """One scenario's run: its handles, leases, tasks and marks by name."""

    def __init__(self, scenario: Dict[str, Any], topology: Topology, driver: Any) -> None:
        self.key: str = scenario.get("key", "proj:contract")
        self.topology = topology
        self.d = driver
        self.handles: Dict[str, Any] = {}
        self.leases: Dict[str, Any] = {}
        self.tasks: Dict[str, "Future[Any]"] = {}
        self.task_leases: Dict[str, Optional[str]] = {}
        self.marks: Dict[str, float] = {}

    def sub(self, value: Any) -> Any:
        """The value with its placeholders replaced."""
        if isinstance(value, list):
            return [self.sub(v) for v in value]
        if isinstance(value, dict):
            return {k: self.sub(v) for k, v in value.items()}
        if not isinstance(value, str):
            return value
        value = value.replace("{key}", self.key)
        for name, lease in self.leases.items():
            value = value.replace("{token:%s}" % name, lease.token)
            value = value.replace("{fence:%s}" % name, str(lease.fence))
        assert "{token:" not in value and "{fence:" not in value, f"unknown lease in {value}"
        return value

    @staticmethod
    def options(given: Dict[str, Any]) -> Dict[str, Any]:
        """The options as the client takes them; "NaN" and "Infinity", which JSON lacks, as floats."""
        return {k: v if k == "note" or not isinstance(v, str) else float(v) for k, v in given.items()}

    def outcome(self, call: Callable[[], Any], expect: Optional[Dict[str, Any]], as_: Any) -> None:
        try:
            value, error = self.d.do(call), None
        except Exception as raised:  # compared with what the scenario expects below
            value, error = None, raised
        self.check(value, error, expect, as_)

    def check(self, value: Any, error: Any, expect: Optional[Dict[str, Any]], as_: Any) -> None:
        expect = self.sub(expect or {})
        kind = expect.get("error")
        if kind is None:
            if error is not None:
                raise AssertionError(f"expected success, got {error!r}") from error
            if isinstance(as_, str):
                self.leases[as_] = value
            if "lost" in expect or "released" in expect:
                lease = as_
                assert value is bool(expect.get("lost")), f"the loss wait answered {value}"
                assert lease.lost_reason == expect.get("lost")
                return
            fence = value if isinstance(value, int) else value.fence
            if "fence_above" in expect:
                assert fence > self.leases[expect["fence_above"]].fence
            if "locks" in expect:
                assert [list(lock) for lock in value.locks] == expect["locks"]
            if "ttl_ms" in expect:
                assert value.ttl_ms == expect["ttl_ms"]
            if "note" in expect:
                assert (value.note or None) == expect["note"]
            return
        expected_type = {
            "invalid": ValueError,
            "busy": Busy,
            "lost": LeaseLost,
            "not_replicated": NotReplicated,
            "wrong_type": WrongType,
        }[kind]
        assert isinstance(error, expected_type), f"expected {kind}, got {error!r} / {value!r}"
        for piece in expect.get("contains", []):
            assert piece in str(error), f"{piece!r} not in {str(error)!r}"
        if "message" in expect:
            assert matches(expect["message"], str(error)), f"message {str(error)!r}"
        if "blockers" in expect:
            got = list(error.blockers)
            assert len(got) == len(expect["blockers"]), f"blockers {got}"
            for want, blocker in zip(expect["blockers"], got):
                assert entry_matches(want, blocker), f"{blocker} is not {want}"
        if "reason" in expect:
            assert error.reason == expect["reason"]

    # The steps, one method each, named as in the contract.

    def step_handle(self, s: Dict[str, Any]) -> None:
        options = self.options(self.sub(s.get("options", {})))
        self.handles[s["name"]] = self.d.handle(self.sub(s.get("key", self.key)), options)

    def step_acquire(self, s: Dict[str, Any]) -> None:
        handle = self.handles[s["handle"]]
        args = self.sub(s["args"])
        options = self.options(self.sub(s.get("options", {})))
        if s["op"] == "lock":
            args = [[tuple(pair) for pair in args]]

        def call() -> Any:
            return getattr(handle, s["op"])(*args, **options)

        self.run_or_spawn(s, call, s.get("as"))

    def step_lock(self, s: Dict[str, Any]) -> None:
        lease = self.leases[s["lease"]]
        requests = [tuple(pair) for pair in self.sub(s["requests"])]
        options = self.options(self.sub(s.get("options", {})))
        self.run_or_spawn(s, lambda: lease.lock(requests, **options), None)

    def run_or_spawn(self, s: Dict[str, Any], call: Callable[[], Any], as_: Any) -> None:
        if "task" in s:
            self.tasks[s["task"]] = self.d.spawn(call)
            self.task_leases[s["task"]] = as_
        else:
            self.outcome(call, s.get("expect"), as_)

    def step_await(self, s: Dict[str, Any]) -> None:
        future = self.tasks[s["task"]]
        try:
            value, error = future.result(TASK_TIMEOUT), None
        except Exception as raised:  # compared with what the scenario expects
            value, error = None, raised
        self.check(value, error, s.get("expect"), self.task_leases[s["task"]])

    def step_pending(self, s: Dict[str, Any]) -> None:
        assert not self.tasks[s["task"]].done(), f"task {s['task']} has finished"

    def step_release(self, s: Dict[str, Any]) -> None:
        lease = self.leases[s["lease"]]
        try:
            self.d.do(lease.release)
        except Exception:
            if not s.get("may_fail"):
                raise

    def step_sleep(self, s: Dict[str, Any]) -> None:
        time.sleep(s["ms"] / 1000.0)

    def step_mark(self, s: Dict[str, Any]) -> None:
        self.marks[s["name"]] = time.monotonic()

    def step_held(self, s: Dict[str, Any]) -> None:
        lease = self.leases[s["lease"]]
        assert not lease.lost.is_set(), f"lost: {lease.lost_reason}"
        lease.check()
        if "locks" in s:
            assert [list(lock) for lock in lease.locks] == self.sub(s["locks"])

    def step_lost(self, s: Dict[str, Any]) -> None:
        lease = self.leases[s["lease"]]
        since = self.marks[s["since"]] if "since" in s else time.monotonic()
        limit = (s["within_ms"] / 1000.0 + SLACK) if "within_ms" in s else TASK_TIMEOUT
        lost = self.d.wait_lost(lease, max(0.0, since + limit - time.monotonic()))
        took = time.monotonic() - since
        assert lost, f"not reported lost within {limit:.3f} s"
        assert took <= limit + 0.05, f"reported lost after {took:.3f} s, limit {limit:.3f} s"
        if "at_least_ms" in s:
            assert took >= s["at_least_ms"] / 1000.0, f"reported lost after only {took:.3f} s"
        assert lease.lost.is_set() and lease.lost_reason == s["reason"]
        with pytest.raises(LeaseLost) as raised:
            lease.check()
        self.check(None, raised.value, {"error": "lost", "reason": s["reason"], **(
            {"message": s["message"]} if "message" in s else {})}, None)

    def step_loss_wait(self, s: Dict[str, Any]) -> None:
        lease = self.leases[s["lease"]]
        self.tasks[s["task"]] = self.d.spawn(lambda: lease.lost.wait())
        self.task_leases[s["task"]] = lease

    def step_redis(self, s: Dict[str, Any]) -> None:
        reply = text(self.topology.on(s.get("on", "master")).execute_command(*self.sub(s["command"])))
        if "reply" in s:
            assert reply == self.sub(s["reply"]), f"{s['command']} answered {reply!r}"

    def step_stop(self, s: Dict[str, Any]) -> None:
        self.topology.stop(s["server"])

    def step_server_locks(self, s: Dict[str, Any]) -> None:
        key = self.sub(s.get("key", self.key))
        reply = self.topology.on(s.get("on", "master")).execute_command("PATHLOCK.LOCKS", key)
        got = sorted([text(mode), text(path), text(token)] for path, mode, token, *_ in reply)
        assert got == sorted(self.sub(s["locks"]))

    def step_inspect(self, s: Dict[str, Any]) -> None:
        handle = self.handles[s["handle"]]
        token = self.sub(s.get("token"))
        path = self.sub(s.get("path"))
        if s["call"] == "locks":
            call: Callable[[], Any] = lambda: handle.locks(path, token=token)
        elif s["call"] == "check":
            requests = [tuple(pair) for pair in self.sub(s["requests"])]
            call = lambda: handle.check(requests, token=token)
        else:
            call = lambda: handle.waiters(path)
        expect = self.sub(s["expect"])
        if isinstance(expect, dict):
            self.outcome(call, expect, None)
            return
        got = self.d.do(call)
        assert len(got) == len(expect), f"{s['call']} answered {got}"
        for want, entry in zip(expect, got):
            assert entry_matches(want, entry), f"{entry} is not {want}"

    def step_waiting(self, s: Dict[str, Any]) -> None:
        admin = self.topology.on("master")
        wait_until(
            lambda: len(admin.execute_command("PATHLOCK.WAITERS", self.key)) >= s["count"],
            timeout=TASK_TIMEOUT,
            what=f"{s['count']} waiting requests",
        )

    def step_calls(self, s: Dict[str, Any]) -> None:
        stats = self.topology.masters[0].client().info("commandstats")
        stats = {name.lower(): value for name, value in stats.items()}
        calls = int(stats.get(f"cmdstat_{s['command'].lower()}", {}).get("calls", 0))
        assert calls == s["count"], f"{calls} calls of {s['command']}"

    def clean_up(self) -> None:
        for name, future in self.tasks.items():
            try:
                value = future.result(TASK_TIMEOUT)
            except Exception:  # what failed holds nothing
                continue
            if hasattr(value, "release") and value not in self.leases.values():
                self.leases[f"task {name}"] = value
        for lease in self.leases.values():
            try:
                self.d.do(lease.release)
            except Exception:  # the server may be gone; the locks expire anyway
                pass


@pytest.mark.parametrize("client", ["python", "python-asyncio"])
@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s["name"] for s in SCENARIOS])
def test_contract(scenario: Dict[str, Any], client: str, topologies: Any) -> None:
    if client in scenario.get("except", {}):
        pytest.skip(scenario["except"][client])
    topology = topologies(scenario["topology"])
    driver = SyncDriver(topology) if client == "python" else AsyncDriver(topology)
    run = Run(scenario, topology, driver)
    try:
        for number, step in enumerate(scenario["steps"], 1):
            if client in step.get("except", {}):
                continue
            try:
                getattr(run, "step_" + step["do"])(step)
            except Exception as failure:
                raise AssertionError(f"step {number} {json.dumps(step)}: {failure}") from failure
    finally:
        try:
            run.clean_up()
        finally:
            driver.close()


def test_every_scenario_has_a_known_topology_and_steps() -> None:
    names: List[str] = [s["name"] for s in SCENARIOS]
    assert len(names) == len(set(names)) and len(names) >= 20
    for scenario in SCENARIOS:
        assert scenario["topology"] in ("single", "replica", "cluster")
        for step in scenario["steps"]:
            assert hasattr(Run, "step_" + step["do"]), step
