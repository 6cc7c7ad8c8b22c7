"""The README's example, and what a newcomer writes from the README alone: one client shared by
the whole application, a waiting upload into a folder being moved, more locks under the move,
who holds what, an empty path and a wrong TTL."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Dict, List

import pytest
import redis

from helpers import KEY
from servers import Server

import pathlock
from pathlock import Busy, PathLocks

README = Path(__file__).resolve().parents[1] / "README.md"


def test_the_readme_example_runs_as_written(server: Server, capsys: Any) -> None:
    example = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)[0]
    # The example's client is the default one; here it is the test server's.
    example = example.replace("redis.Redis()", f"redis.Redis(port={server.port})")
    exec(compile(example, str(README), "exec"), {})
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].startswith("copy with fence ") and printed[1].startswith("delete with ")
    assert "note='alice: move /A/C into /B'" in printed[2] and "/B/C/new.txt" in printed[2]
    # With the folder taken by someone else, the example's busy branch says by whom.
    bob = PathLocks(server.client(), "proj:42").rename("/A/C", "D", note="bob: rename /A/C to /A/D")
    exec(compile(example, str(README), "exec"), {})
    assert capsys.readouterr().out == "/A/C is locked (WRITE) by bob: rename /A/C to /A/D\n"
    # With nobody holding the folders but a request waiting for them first, it says to retry.
    waiter = threading.Thread(
        target=lambda: PathLocks(server.client(), "proj:42")
        .lock([("WRITE", "/A"), ("WRITE", "/B")], wait_ms=10000)
        .release()
    )
    waiter.start()
    while not PathLocks(server.client(), "proj:42").waiters():
        time.sleep(0.01)
    example_holding_only_a = example.replace('locks.move("/A/C", "/B"', 'locks.upload("/B/C"')
    exec(compile(example_holding_only_a, str(README), "exec"), {})
    assert capsys.readouterr().out == "the folders were busy a moment ago; try again\n"
    bob.release()
    waiter.join(10)


def test_the_async_readme_example_runs_as_written_and_closes_its_client(server: Server) -> None:
    example = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)[1]
    example = example.replace("redis.asyncio.Redis()", f"redis.asyncio.Redis(port={server.port})")
    # The work the example leaves to the application.
    copy_file = "async def copy_file(source, target, fence):\n    print('copied', source, target)\n"
    # -X dev reports what a newcomer would see: a client or connection left open, a coroutine
    # never awaited. This checkout's package goes first, whether or not it is the one installed.
    src = str(Path(__file__).resolve().parents[1] / "src")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
    ran = subprocess.run(
        [sys.executable, "-X", "dev", "-c", copy_file + example],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert (ran.returncode, ran.stdout, ran.stderr) == (0, "copied /A/a.txt /B/a.txt\n", "")


def test_what_a_newcomer_writes(server: Server) -> None:
    client = redis.Redis(port=server.port)  # one client for the whole application
    locks = PathLocks(client, KEY, ttl_ms=3000)
    said: List[str] = []
    results: Dict[str, Any] = {}

    def bob_uploads() -> None:
        # Bob is willing to wait up to 10 s for the move to finish.
        with locks.upload("/B/C/bob.txt", wait_ms=10000, note="bob: upload") as upload:
            results["bob"] = upload.fence

    with locks.move("/A/C", "/B", note="alice: move /A/C into /B") as move:
        move.lock([("WRITE", "/B/C/new.txt")])
        bob = threading.Thread(target=bob_uploads)
        bob.start()
        while not locks.waiters():
            time.sleep(0.01)
        for waiter in locks.waiters():
            said.append(f"{waiter.note} waits for {waiter.locks}")
        for lock in locks.locks(token=move.token):
            said.append(f"{lock.path}: {lock.note}")
        try:
            locks.upload("/B/C/new.txt")
        except Busy as busy:
            said.append(f"busy: {busy.blockers[0].note}")
        bob.join(4)  # longer than the TTL: the move is still held, bob still waits
        move.check()
        assert bob.is_alive()
    bob.join(10)
    assert results["bob"] > move.fence
    assert said == [
        "bob: upload waits for (('WRITE', '/B/C/bob.txt'),)",
        "/A/C: alice: move /A/C into /B",
        "/B/C: alice: move /A/C into /B",
        "/B/C/new.txt: alice: move /A/C into /B",
        "busy: alice: move /A/C into /B",
    ]
    assert locks.locks() == []

    # Mistakes a newcomer makes are told what to do instead.
    with pytest.raises(ValueError) as empty:
        locks.upload("")
    assert 'lock([("WRITE", "/")])' in str(empty.value)
    with pytest.raises(ValueError) as ttl:
        locks.upload("/A", ttl_ms=0.5)  # half a millisecond? A TTL is at least one.
    assert "milliseconds, at least 1; got 0.5" in str(ttl.value)
    with pytest.raises(ValueError, match="rename takes a name"):
        locks.rename("/A/C", "/A/C2")  # a whole path, as 0.1 took it
    client.set("settings", "{}")
    with pytest.raises(pathlock.WrongType, match='"settings" is not a pathlock project'):
        PathLocks(client, "settings").upload("/A")
