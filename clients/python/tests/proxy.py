"""A TCP proxy in front of a real server that cuts a connection right after the server has
answered a PATHLOCK.ACQUIRE, before the client sees the reply: the grant happened, the client
does not know."""

from __future__ import annotations

import socket
import threading
from typing import List


class DroppingProxy:
    def __init__(self, target_port: int, drops: int = 1) -> None:
        self.target_port = target_port
        self.drops_left = drops
        self.acquires = 0
        self.dropped = 0
        self._lock = threading.Lock()
        self._sockets: List[socket.socket] = []
        self._listener = socket.socket()
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(16)
        self.port = self._listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        for s in [self._listener, *self._sockets]:
            try:
                s.close()
            except OSError:
                pass

    def _accept(self) -> None:
        while True:
            try:
                downstream, _ = self._listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            self._sockets += [downstream, upstream]
            state = {"drop": False}
            threading.Thread(
                target=self._forward_requests, args=(downstream, upstream, state), daemon=True
            ).start()
            threading.Thread(
                target=self._forward_replies, args=(upstream, downstream, state), daemon=True
            ).start()

    def _forward_requests(
        self, downstream: socket.socket, upstream: socket.socket, state: dict
    ) -> None:
        try:
            while True:
                data = downstream.recv(65536)
                if not data:
                    break
                if b"PATHLOCK.ACQUIRE" in data.upper():
                    with self._lock:
                        self.acquires += 1
                        if self.drops_left > 0:
                            self.drops_left -= 1
                            state["drop"] = True
                upstream.sendall(data)
        except OSError:
            pass
        _close(upstream, downstream)

    def _forward_replies(
        self, upstream: socket.socket, downstream: socket.socket, state: dict
    ) -> None:
        try:
            while True:
                data = upstream.recv(65536)
                if not data:
                    break
                if state["drop"]:
                    # The server has answered: the grant is made. The client never hears of it.
                    with self._lock:
                        self.dropped += 1
                    break
                downstream.sendall(data)
        except OSError:
            pass
        _close(upstream, downstream)


def _close(*sockets: socket.socket) -> None:
    for s in sockets:
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        try:
            s.close()
        except OSError:
            pass
