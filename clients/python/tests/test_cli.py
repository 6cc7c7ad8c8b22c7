"""The `pathlock` command against real servers: its views of the README's example, what it says
on a server without the module or a key of another type, `top` over a server and a cluster
(bounded), plain output when piped and with NO_COLOR, and `--watch` on a terminal (a pty)."""

from __future__ import annotations

import io
import json
import os
import pty
import re
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, Iterator, List, Tuple

import pytest
import redis
from redis.cluster import RedisCluster

from servers import REPO, Server, cluster, free_port, wait_until

from pathlock.cli import EXIT_NOT_GRANTED, main

# The README's example: its tokens given explicitly, so that only times and fences vary.
ALICE = "0b5d3f62-3c5e-4c1e-9d1f-2f6c1a0e8b7a"
OTHER = "c7e1d7b0-6a43-4a3e-b1a4-2d3c8f0c9a11"
NOTE = "alice: move /A/C into /B"
SCRIPT = Path(sys.executable).parent / "pathlock"


def run(*args: str, port: int) -> Tuple[int, str]:
    out = io.StringIO()
    code = main([*args, "-p", str(port)], out=out)
    return code, out.getvalue()


def send(server: Server, *command: Any) -> redis.Connection:
    """Sends a command that blocks (an acquire that waits) on a connection of its own; its
    `read_response()` is the answer."""
    connection = redis.Connection(host="127.0.0.1", port=server.port)
    connection.send_command(*command)
    return connection


def readme_example(client: "redis.Redis") -> Tuple[int, int]:
    """The README's session: Alice's move, a refused upload, an unrelated upload. Its fences."""
    _, alice = client.execute_command(
        "PATHLOCK.ACQUIRE",
        "proj:42",
        "TOKEN",
        ALICE,
        "TTL",
        600000,
        "NOTE",
        NOTE,
        "WRITE",
        "/A/C",
        "WRITE",
        "/B/C",
    )
    assert client.execute_command("PATHLOCK.ACQUIRE", "proj:42", "WRITE", "/A/C/D/new.txt") is None
    _, other = client.execute_command(
        "PATHLOCK.ACQUIRE", "proj:42", "TOKEN", OTHER, "TTL", 600000, "WRITE", "/A/CD/notes.txt"
    )
    return int(alice), int(other)


def shape(text: str) -> str:
    """Output with what changes from run to run replaced: times, and fences (as an offset from
    the first fence printed, as the README's examples are compared)."""
    text = re.sub(r"\b\d+(?:\.\d)?(?:ms|s|m\d\ds|h\d\dm|d\d\dh)\b", "<t>", text)
    fences = [int(f) for f in re.findall(r"fence (\d+)", text)]
    return re.sub(r"fence (\d+)", lambda m: f"fence <f+{int(m.group(1)) - fences[0]}>", text)


def readme_block(command: str) -> str:
    """The output the README prints under `$ <command>`."""
    readme = (REPO / "README.md").read_text()
    match = re.search(r"^\$ " + re.escape(command) + r"\n(.*?)(?=^\$ |^```)", readme, re.M | re.S)
    assert match, f"README.md shows no `$ {command}`"
    return match.group(1).rstrip("\n")


def test_tree_of_the_readme_example_is_the_readme_s(client: "redis.Redis", server: Server) -> None:
    readme_example(client)
    code, out = run("tree", "proj:42", port=server.port)
    assert code == 0
    assert shape(out.rstrip("\n")) == shape(readme_block("pathlock tree proj:42"))
    lines = out.splitlines()
    assert lines[0] == "proj:42: 3 locks held by 2 owners, nobody waiting"
    assert lines[1:3] == ["/", "├── A"]
    # Every lock's columns start in one column, whatever the depth of its path.
    starts = {line.index("WRITE") for line in lines if "WRITE" in line}
    assert len(starts) == 1
    start = starts.pop()
    entries = [re.split(r"\s{2,}", line[start:]) for line in lines if "WRITE" in line]
    assert [e[:2] for e in entries] == [["WRITE", ALICE], ["WRITE", OTHER], ["WRITE", ALICE]]
    # Alice's locks show her note; the other upload has none, so its time comes third.
    assert [e[2] for e in entries[::2]] == [f'"{NOTE}"', f'"{NOTE}"'] and entries[1][2].endswith(
        " left"
    )
    assert all(e[-1].startswith("fence ") for e in entries)


def test_tree_json_is_what_the_server_lists(client: "redis.Redis", server: Server) -> None:
    alice, other = readme_example(client)
    code, out = run("tree", "proj:42", "/A", "--json", port=server.port)
    assert code == 0
    view = json.loads(out)
    listed = client.execute_command("PATHLOCK.LOCKS", "proj:42", "/A")
    assert [
        (lock["path"], lock["token"], lock["fence"], lock["note"]) for lock in view["locks"]
    ] == [
        (p.decode(), t.decode(), int(f), n.decode() if n else None)
        for p, _m, t, _ttl, f, n in listed
    ]
    assert [lock["fence"] for lock in view["locks"]] == [alice, other]
    assert all(0 < lock["ttl_ms"] <= 600000 for lock in view["locks"])
    assert view["waiters"] == [] and view["exists"] is True


def test_tree_with_readers_and_a_waiter_and_no_key(client: "redis.Redis", server: Server) -> None:
    for token in ("r1", "r2"):
        client.execute_command(
            "PATHLOCK.ACQUIRE", "p", "TOKEN", token, "TTL", 60000, "READ", "/B/x"
        )
    client.execute_command("PATHLOCK.ACQUIRE", "p", "TOKEN", "w", "TTL", 60000, "WRITE", "/B/z")
    blocked = send(
        server,
        "PATHLOCK.ACQUIRE",
        "p",
        "TOKEN",
        "bob",
        "WAIT",
        20000,
        "NOTE",
        "bob: upload",
        "WRITE",
        "/B",
    )
    wait_until(lambda: client.execute_command("PATHLOCK.WAITERS", "p"), what="bob to queue")
    code, out = run("tree", "p", port=server.port)
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "p: 3 locks held by 3 owners, 1 waiting"
    assert lines[1] == "/"
    assert re.match(
        r"└── B +waits #1  WRITE  bob  \"bob: upload\"  waited \S+, \S+ left$", lines[2]
    )
    assert re.match(r"    ├── x +READ   r1  ", lines[3])
    # The second reader of /B/x is on a line of its own, the branch to /B/z going on beside it.
    assert re.match(r"    │ +READ   r2  ", lines[4])
    assert re.match(r"    └── z +WRITE  w  ", lines[5])
    client.execute_command("PATHLOCK.RELEASE", "p", "r1")
    client.execute_command("PATHLOCK.RELEASE", "p", "r2")
    client.execute_command("PATHLOCK.RELEASE", "p", "w")
    assert blocked.read_response()[0] == b"bob"
    blocked.disconnect()
    assert run("tree", "nothing-here", port=server.port) == (0, "nothing-here: no such key\n")


def test_why_names_the_blocker_and_the_queue(client: "redis.Redis", server: Server) -> None:
    readme_example(client)
    blocked = send(
        server, "PATHLOCK.ACQUIRE", "proj:42", "TOKEN", "bob", "WAIT", 20000, "WRITE", "/A/C/D"
    )
    wait_until(lambda: client.execute_command("PATHLOCK.WAITERS", "proj:42"), what="bob to queue")
    code, out = run("why", "proj:42", "write", "/A/C/D/new.txt", port=server.port)
    assert code == EXIT_NOT_GRANTED
    lines = out.splitlines()
    assert lines[0] == "WRITE /A/C/D/new.txt on proj:42 would not be granted now"
    assert lines[1] == "held in its way:"
    # The README shows the same, before bob queued.
    assert shape("\n".join(lines[:3])) == shape(
        readme_block("pathlock why proj:42 WRITE /A/C/D/new.txt")
    )
    assert re.match(rf'  /A/C  WRITE  {ALICE}  "{NOTE}"  \S+ left  fence \d+$', lines[2])
    assert lines[3].startswith("queued before it")
    assert re.match(r"  waits #1  WRITE /A/C/D  bob  waited \S+, \S+ left$", lines[4])
    assert len(lines) == 5
    # Beside the folder being moved, nothing is in the way; bob's own request is not in his way.
    assert run("why", "proj:42", "READ", "/B/D", port=server.port) == (
        0,
        "READ /B/D on proj:42 would be granted now\n",
    )
    code, out = run(
        "why", "proj:42", "WRITE", "/A/C/D", "--token", "bob", "--json", port=server.port
    )
    view = json.loads(out)
    assert [b["token"] for b in view["blockers"]] == [ALICE] and view["waiters"] == []
    assert view["queued"] == 1 and view["free"] is False
    client.execute_command("PATHLOCK.RELEASE", "proj:42", ALICE)
    assert blocked.read_response()[0] == b"bob"
    blocked.disconnect()


def test_waiters_in_queue_order(client: "redis.Redis", server: Server) -> None:
    client.execute_command("PATHLOCK.ACQUIRE", "q", "TOKEN", "holder", "TTL", 60000, "WRITE", "/A")
    blocked = []
    for i, path in enumerate(("/A/1", "/A/2")):
        blocked.append(
            send(
                server,
                "PATHLOCK.ACQUIRE",
                "q",
                "TOKEN",
                f"w{i}",
                "WAIT",
                20000,
                "NOTE",
                f"n{i}",
                "WRITE",
                path,
            )
        )
        wait_until(
            lambda: len(client.execute_command("PATHLOCK.WAITERS", "q")) == i + 1, what="the queue"
        )
    code, out = run("waiters", "q", port=server.port)
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "q: 2 requests waiting, in queue order"
    assert re.match(r'  waits #1  WRITE /A/1  w0  "n0"  waited \S+, \S+ left$', lines[1])
    assert re.match(r'  waits #2  WRITE /A/2  w1  "n1"  waited \S+, \S+ left$', lines[2])
    assert run("waiters", "q", "/A/2", port=server.port)[1].count("waits #") == 1
    client.execute_command("PATHLOCK.RELEASE", "q", "holder")
    for connection in blocked:
        assert connection.read_response() is not None
        connection.disconnect()
    assert run("waiters", "q", port=server.port) == (0, "q: nobody waiting\n")


def busy_projects(client: Any) -> Dict[str, int]:
    """Projects with 1 to 5 locks each (proj:n holds n), and keys of other types beside them."""
    sizes = {f"proj:{n}": n for n in range(1, 6)}
    for key, n in sizes.items():
        for i in range(n):
            client.execute_command(
                "PATHLOCK.ACQUIRE", key, "TOKEN", f"t{i % 2}", "TTL", 60000, "WRITE", f"/f{i}"
            )
    for i in range(20):
        client.set(f"cache:{i}", "x")
    return sizes


def test_top_lists_the_busiest_projects_and_stays_bounded(
    client: "redis.Redis", server: Server
) -> None:
    busy_projects(client)
    code, out = run("top", "--count", "3", port=server.port)
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == f"127.0.0.1:{server.port}: 5 projects, busiest by locks"
    assert lines[1].split() == ["KEY", "LOCKS", "OWNERS", "WAITING", "LONGEST", "WAIT"]
    assert [line.split() for line in lines[2:]] == [
        ["proj:5", "5", "2", "0", "-"],
        ["proj:4", "4", "2", "0", "-"],
        ["proj:3", "3", "2", "0", "-"],
    ]
    # Bounded: no more project keys than asked are read, and the output says it stopped early.
    view = json.loads(run("top", "--max-keys", "2", "--json", port=server.port)[1])
    assert view["projects_seen"] == 2 and view["complete"] is False and len(view["projects"]) == 2
    assert "the first 2 found" in run("top", "--max-keys", "2", port=server.port)[1]
    view = json.loads(run("top", "--match", "proj:[12]", "--json", port=server.port)[1])
    assert (
        sorted(p["key"] for p in view["projects"]) == ["proj:1", "proj:2"]
        and view["complete"] is True
    )


def test_top_by_waiters(client: "redis.Redis", server: Server) -> None:
    busy_projects(client)
    blocked = send(server, "PATHLOCK.ACQUIRE", "proj:1", "WAIT", 20000, "WRITE", "/")
    wait_until(lambda: client.execute_command("PATHLOCK.WAITERS", "proj:1"), what="the waiter")
    view = json.loads(run("top", "--by", "waiters", "--count", "1", "--json", port=server.port)[1])
    assert [(p["key"], p["waiters"], p["locks"]) for p in view["projects"]] == [("proj:1", 1, 1)]
    assert view["projects"][0]["longest_wait_ms"] >= 0
    client.execute_command("PATHLOCK.RELEASE", "proj:1", "t0")
    assert blocked.read_response() is not None
    blocked.disconnect()


@pytest.fixture(scope="module")
def cluster_nodes() -> Iterator[List[Server]]:
    nodes = cluster(3)
    yield nodes
    for node in nodes:
        node.close()


@pytest.fixture
def cluster_client(cluster_nodes: List[Server]) -> Iterator[RedisCluster]:
    client = RedisCluster(host="127.0.0.1", port=cluster_nodes[0].port)
    yield client
    client.close()


def test_cluster_is_found_and_top_covers_every_primary(
    cluster_client: RedisCluster, cluster_nodes: List[Server]
) -> None:
    for i in range(12):
        cluster_client.execute_command(
            "PATHLOCK.ACQUIRE", f"proj:c{i}", "TTL", 60000, "WRITE", f"/f{i}"
        )
    try:
        port = cluster_nodes[0].port
        view = json.loads(
            run("top", "--count", "100", "--match", "proj:c*", "--json", port=port)[1]
        )
        assert sorted(p["key"] for p in view["projects"]) == sorted(f"proj:c{i}" for i in range(12))
        assert len({p["node"] for p in view["projects"]}) == 3
        # A key on another node than the one named is read where it lives.
        elsewhere = next(
            f"proj:c{i}"
            for i in range(12)
            if cluster_client.get_node_from_key(f"proj:c{i}").port != port
        )
        code, out = run("tree", elsewhere, "--url", f"redis://127.0.0.1:{port}", port=port)
        assert code == 0 and out.startswith(f"{elsewhere}: 1 lock held by 1 owner")
    finally:
        for i in range(12):
            cluster_client.delete(f"proj:c{i}")


def test_errors_are_said_plainly(
    client: "redis.Redis", server: Server, capsys: pytest.CaptureFixture[str]
) -> None:
    client.set("cache:1", "x")
    assert run("tree", "cache:1", port=server.port)[0] == 1
    assert "not a pathlock project" in capsys.readouterr().err
    bare = subprocess.Popen(
        ["redis-server", "--port", "0", "--unixsocket", "bare.sock", "--save", ""],
        cwd=server.dir,
        stdout=subprocess.DEVNULL,
    )
    try:
        socket = Path(server.dir) / "bare.sock"
        wait_until(socket.exists, what="a server without the module")
        out = io.StringIO()
        assert main(["tree", "p", "--url", f"unix://{socket}"], out=out) == 1
        assert "no pathlock module" in capsys.readouterr().err
    finally:
        bare.terminate()
        bare.wait()
    assert main(["top", "--count", "0"]) == 2


def test_piped_output_is_plain_and_a_terminal_gets_colour(
    client: "redis.Redis", server: Server
) -> None:
    readme_example(client)
    args = [str(SCRIPT), "tree", "proj:42", "-p", str(server.port)]
    piped = subprocess.run(args, capture_output=True, text=True, timeout=60, check=True).stdout
    assert "\x1b" not in piped and ALICE in piped
    assert "\x1b[1;31mWRITE" in run_in_pty(args, {}, until=ALICE)
    assert "\x1b" not in run_in_pty(args, {"NO_COLOR": "1"}, until=ALICE)


def run_in_pty(args: List[str], env: Dict[str, str], until: str, timeout: float = 60.0) -> str:
    """Runs the command on a pseudo-terminal until it exits; its screen output."""
    pid, fd = pty.fork()
    if pid == 0:  # The child: the pty is its terminal.
        os.execve(args[0], args, {**_base_env(), **env})
    output = _read_until(fd, lambda text: False, timeout, until_exit=pid)
    os.close(fd)
    assert until in output, output
    return output


def _base_env() -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "NO_COLOR"}
    env["TERM"] = "xterm"
    return env


def _read_until(fd: int, done: Any, timeout: float, until_exit: int = 0) -> str:
    """What the pty printed, read until `done(text)` or, with `until_exit`, until the child exits."""
    chunks: List[bytes] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.1)
        if ready:
            try:
                chunk = os.read(fd, 65536)
            except OSError:  # The child closed the terminal.
                break
            if not chunk:
                break
            chunks.append(chunk)
            if done(b"".join(chunks).decode("utf-8", "replace")):
                break
        elif until_exit and os.waitpid(until_exit, os.WNOHANG)[0]:
            until_exit = 0
    return b"".join(chunks).decode("utf-8", "replace")


@pytest.fixture
def interruptible() -> Iterator[None]:
    """The CLI is stopped with SIGINT, as a user's Ctrl-C stops it. A process a non-interactive
    shell starts in the background (`cmd &`, as a CI runner may start the whole suite) ignores
    SIGINT, every process it starts inherits that, and a Python program that starts ignoring it
    never turns it into `KeyboardInterrupt`; so while these tests run, this process handles
    SIGINT, and the CLI it starts begins with the default disposition."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def test_watch_redraws_on_a_terminal_until_ctrl_c(
    client: "redis.Redis", server: Server, interruptible: None
) -> None:
    args = [str(SCRIPT), "tree", "proj:42", "--watch", "0.2", "-p", str(server.port)]
    pid, fd = pty.fork()
    if pid == 0:
        os.execve(args[0], args, _base_env())
    try:
        # The first frame, on the alternate screen: the key does not exist yet.
        first = _read_until(fd, lambda text: "no such key" in text, 60)
        assert first.startswith("\x1b[?1049h") and "Every 0.2s: pathlock tree" in first
        readme_example(client)
        later = _read_until(fd, lambda text: NOTE in text, 30)
        assert "3 locks held by 2 owners" in later and "\x1b[H\x1b[2J" in later
        client.execute_command("PATHLOCK.RELEASE", "proj:42", ALICE)
        after = _read_until(fd, lambda text: "1 lock held by 1 owner" in text, 30)
        assert "1 lock held by 1 owner" in after
        os.write(fd, b"\x03")  # Ctrl-C, through the terminal.
        rest = _read_until(fd, lambda text: "\x1b[?1049l" in text, 30)
        assert "\x1b[?1049l" in rest and "Traceback" not in rest
        _, status = os.waitpid(pid, 0)
        pid = 0
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    finally:
        if pid:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        os.close(fd)


def test_watch_piped_prints_json_lines(
    client: "redis.Redis", server: Server, interruptible: None
) -> None:
    readme_example(client)
    process = subprocess.Popen(
        [str(SCRIPT), "top", "--json", "--watch", "0.1", "-p", str(server.port)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        frames = [json.loads(process.stdout.readline()) for _ in range(3)]  # type: ignore[union-attr]
    finally:
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=30) == 0
    assert [f["projects"][0]["locks"] for f in frames] == [3, 3, 3]


def test_why_counts_a_waiter_that_no_lock_explains(client: "redis.Redis", server: Server) -> None:
    """A reader holds /X, a writer waits for /X: a reader of /X/a meets no lock in its way, yet
    the server refuses it, because the waiter is served first. `why` says so, as the server does."""
    client.execute_command("PATHLOCK.ACQUIRE", "q", "TOKEN", "reader", "TTL", 60000, "READ", "/X")
    blocked = send(server, "PATHLOCK.ACQUIRE", "q", "TOKEN", "writer", "WAIT", 20000, "WRITE", "/X")
    wait_until(lambda: client.execute_command("PATHLOCK.WAITERS", "q"), what="the writer to queue")
    view = json.loads(run("why", "q", "READ", "/X/a", "--json", port=server.port)[1])
    assert view["blockers"] == [] and [w["token"] for w in view["waiters"]] == ["writer"]
    assert view["free"] is False
    assert client.execute_command("PATHLOCK.ACQUIRE", "q", "READ", "/X/a") is None
    # Beside the queue, a reader of /Y is free, and the server agrees.
    assert json.loads(run("why", "q", "READ", "/Y", "--json", port=server.port)[1])["free"] is True
    assert client.execute_command("PATHLOCK.ACQUIRE", "q", "READ", "/Y") is not None
    client.execute_command("PATHLOCK.RELEASE", "q", "reader")
    assert blocked.read_response()[0] == b"writer"
    blocked.disconnect()


def test_why_exits_3_when_the_request_would_not_be_granted(
    client: "redis.Redis", server: Server
) -> None:
    """A shell script tests `pathlock why` by its exit status: 0 granted now, 3 not (with
    `--json` too); 1 stays for an error (a key of another type, tested above)."""
    client.execute_command("PATHLOCK.ACQUIRE", "q", "TOKEN", "t", "TTL", 60000, "WRITE", "/A")

    def status(*args: str) -> int:
        command = [str(SCRIPT), "why", "q", *args, "-p", str(server.port)]
        return subprocess.run(command, capture_output=True, timeout=60, check=False).returncode

    assert EXIT_NOT_GRANTED == 3
    assert status("READ", "/A/x") == 3
    assert status("READ", "/A/x", "--json") == 3
    assert status("READ", "/B") == 0
    assert status("READ", "/A/x", "--token", "t") == 0  # the owner's own lock is not in its way


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tuple[Server, int, Path]]:
    """A server that also listens with TLS and asks clients for a certificate, with a CA of the
    test's own (made with openssl) that signed its certificate and a client's; the CA, the
    certificates and their keys in the folder it answers."""
    certs = tmp_path_factory.mktemp("tls")

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=certs, check=True, capture_output=True, timeout=60)

    openssl(
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=pathlock test CA",
        "-keyout", "ca.key", "-out", "ca.crt",
    )  # fmt: skip
    (certs / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    for name in ("server", "client"):
        openssl(
            "req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}",
            "-keyout", f"{name}.key", "-out", f"{name}.csr",
        )  # fmt: skip
        openssl(
            "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
            "-CAcreateserial", "-days", "1", "-extfile", "san.ext", "-out", f"{name}.crt",
        )  # fmt: skip
    # A CA directory is read by the hashed names that `openssl rehash` links.
    (certs / "cadir").mkdir()
    (certs / "cadir" / "ca.pem").write_bytes((certs / "ca.crt").read_bytes())
    openssl("rehash", "cadir")
    tls_port = free_port()
    server = Server(
        "--tls-port", str(tls_port), "--tls-cert-file", str(certs / "server.crt"),
        "--tls-key-file", str(certs / "server.key"), "--tls-ca-cert-file", str(certs / "ca.crt"),
        "--tls-auth-clients", "yes",
    )  # fmt: skip
    server.client().execute_command(
        "PATHLOCK.ACQUIRE", "tls", "TOKEN", "t", "TTL", 600000, "WRITE", "/A"
    )
    yield server, tls_port, certs
    server.close()


def test_tls_options_reach_a_tls_server(
    tls_server: Tuple[Server, int, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """`--tls --cacert --cert --key` (redis-cli's names) connect to a server that asks for a
    client certificate; without the CA or the certificate the connection is refused."""
    _, port, certs = tls_server
    ca, cert, key = (str(certs / name) for name in ("ca.crt", "client.crt", "client.key"))

    def run_tls(*args: str) -> Tuple[int, str]:
        out = io.StringIO()
        return main(["waiters", "tls", *args], out=out), out.getvalue()

    mine = ["--cert", cert, "--key", key]
    where = ["-p", str(port)]
    assert run_tls("--tls", "--cacert", ca, *mine, *where) == (0, "tls: nobody waiting\n")
    # The options go before the subcommand too; a CA directory; a rediss:// URL.
    out = io.StringIO()
    cadir = str(certs / "cadir")
    assert main(["--tls", "--cacertdir", cadir, *mine, *where, "tree", "tls"], out=out) == 0
    assert out.getvalue().startswith("tls: 1 lock held by 1 owner")
    url = f"rediss://127.0.0.1:{port}"
    assert run_tls("--url", url, "--cacert", ca, *mine) == (0, "tls: nobody waiting\n")
    assert run_tls("--tls", "--insecure", *mine, *where) == (0, "tls: nobody waiting\n")
    capsys.readouterr()
    # Without the CA, the server's certificate is not trusted; without the client's, the
    # server refuses the connection.
    assert run_tls("--tls", *mine, *where)[0] == 1
    assert "certificate verify failed" in capsys.readouterr().err
    assert run_tls("--tls", "--cacert", ca, *where)[0] == 1
    # A TLS setting without TLS is refused rather than ignored.
    for args in (
        ["--cacert", ca, *where],
        ["--insecure", *where],
        ["--url", f"redis://127.0.0.1:{port}", "--tls"],
        ["--url", f"redis://127.0.0.1:{port}", "--cacert", ca],
        ["--tls", "--cacert", ca, "--key", key, *where],
    ):
        assert run_tls(*args) == (2, ""), args
        assert capsys.readouterr().err.startswith("pathlock: "), args
