"""Real redis-server processes with the pathlock module, each on a free loopback port in its own
directory, for the tests to start, pause, stop and wire into replicas and clusters."""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import List, Optional

import redis

REPO = Path(__file__).resolve().parents[3]
MODULE = os.environ.get("PATHLOCK_MODULE") or str(REPO / "target" / "release" / "libpathlock.so")


def _die_with_parent() -> None:
    """Runs in the child before exec: on Linux, the server is killed when the test process dies,
    so that a test run cut short leaves no server behind."""
    try:
        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def free_port(cluster: bool = False) -> int:
    """A loopback port nobody listens on; for a cluster node, its bus port (+10000) too."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if not cluster or port + 10000 > 65535:
            if not cluster:
                return port
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port + 10000))
            except OSError:
                continue
        return port


class Server:
    def __init__(self, *args: str, cluster: bool = False) -> None:
        if not Path(MODULE).exists():
            raise RuntimeError(f"no module at {MODULE}: run `make build` or set PATHLOCK_MODULE")
        self.port = free_port(cluster)
        self.dir = tempfile.mkdtemp(prefix="pathlock-py-")
        self.args = [
            "redis-server",
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--dir",
            self.dir,
            "--save",
            "",
            "--appendonly",
            "no",
            "--loadmodule",
            MODULE,
            "--logfile",
            "redis.log",
        ]
        if cluster:
            self.args += ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"]
        self.args += list(args)
        self.process: Optional[subprocess.Popen[bytes]] = None
        self.start()

    def start(self) -> None:
        self.process = subprocess.Popen(
            self.args,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=_die_with_parent,
        )
        deadline = time.monotonic() + 10
        while True:
            try:
                self.client().ping()
                return
            except redis.ConnectionError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"redis-server did not start: {self.log()}")
                time.sleep(0.02)

    def client(self, **kwargs: object) -> "redis.Redis":
        return redis.Redis(host="127.0.0.1", port=self.port, **kwargs)  # type: ignore[arg-type]

    def stop(self) -> None:
        """Kills the server at once, as a crash would."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def log(self) -> str:
        try:
            return (Path(self.dir) / "redis.log").read_text()[-2000:]
        except OSError:
            return ""


def wait_until(condition, timeout: float = 10.0, what: str = "condition") -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def replica_of(master: Server) -> Server:
    replica = Server("--replicaof", "127.0.0.1", str(master.port))
    client = master.client()
    wait_until(
        lambda: client.info("replication")["connected_slaves"] >= 1, what="replica to connect"
    )
    wait_until(
        lambda: replica.client().info("replication").get("master_link_status") == "up",
        what="replica link up",
    )
    return replica


def cluster(masters: int = 3) -> List[Server]:
    nodes = [Server(cluster=True) for _ in range(masters)]
    try:
        subprocess.run(
            [
                "redis-cli",
                "--cluster",
                "create",
                *(f"127.0.0.1:{n.port}" for n in nodes),
                "--cluster-replicas",
                "0",
                "--cluster-yes",
            ],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=60,
        )
        for node in nodes:
            client = node.client()
            wait_until(lambda: client.cluster("info")["cluster_state"] == "ok", what="cluster ok")
    except BaseException:
        for node in nodes:
            node.close()
        raise
    return nodes
