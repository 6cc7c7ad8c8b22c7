"""The README's cloud-drive operations, each mapped to the locks it needs, shared by both handles."""

from __future__ import annotations

from typing import Any, Callable, Generic, Iterable, Optional, Sequence, TypeVar

from ._requests import LockRequest, checked, into

L = TypeVar("L")


class Operations(Generic[L]):
    """Every operation asks for its locks in one all-or-nothing `PATHLOCK.ACQUIRE`.

    Each takes `ttl_ms`, `wait_ms`, `replicas` and `on_lost` overriding the handle's defaults.
    """

    def _acquire(
        self,
        locks: Sequence[LockRequest],
        ttl_ms: Optional[int],
        wait_ms: Optional[int],
        replicas: Optional[int],
        on_lost: Optional[Callable[[Any], Any]],
    ) -> L:
        raise NotImplementedError

    def lock(
        self,
        requests: Iterable[LockRequest],
        *,
        ttl_ms: Optional[int] = None,
        wait_ms: Optional[int] = None,
        replicas: Optional[int] = None,
        on_lost: Optional[Callable[[Any], Any]] = None,
    ) -> L:
        """Any `(mode, path)` pairs, `mode` being `"READ"` or `"WRITE"`."""
        return self._acquire(checked(list(requests)), ttl_ms, wait_ms, replicas, on_lost)

    def upload(
        self,
        path: str,
        *,
        ttl_ms: Optional[int] = None,
        wait_ms: Optional[int] = None,
        replicas: Optional[int] = None,
        on_lost: Optional[Callable[[Any], Any]] = None,
    ) -> L:
        """`WRITE path`."""
        return self.lock(
            [("WRITE", path)], ttl_ms=ttl_ms, wait_ms=wait_ms, replicas=replicas, on_lost=on_lost
        )

    def create(
        self,
        path: str,
        *,
        ttl_ms: Optional[int] = None,
        wait_ms: Optional[int] = None,
        replicas: Optional[int] = None,
        on_lost: Optional[Callable[[Any], Any]] = None,
    ) -> L:
        """`WRITE path` (a new file or folder)."""
        return self.lock(
            [("WRITE", path)], ttl_ms=ttl_ms, wait_ms=wait_ms, replicas=replicas, on_lost=on_lost
        )

    def read(
        self,
        path: str,
        *,
        ttl_ms: Optional[int] = None,
        wait_ms: Optional[int] = None,
        replicas: Optional[int] = None,
        on_lost: Optional[Callable[[Any], Any]] = None,
    ) -> L:
        """`READ path`."""
        return self.lock(
            [("READ", path)], ttl_ms=ttl_ms, wait_ms=wait_ms, replicas=replicas, on_lost=on_lost
        )

    def rename(
        self,
        path: str,
        new_path: str,
        *,
        ttl_ms: Optional[int] = None,
        wait_ms: Optional[int] = None,
        replicas: Optional[int] = None,
        on_lost: Optional[Callable[[Any], Any]] = None,
    ) -> L:
        """`WRITE path`, `WRITE new_path`."""
        return self.lock(
            [("WRITE", path), ("WRITE", new_path)],
            ttl_ms=ttl_ms,
            wait_ms=wait_ms,
            replicas=replicas,
            on_lost=on_lost,
        )

    def move(
        self,
        path: str,
        into_folder: str,
        *,
        ttl_ms: Optional[int] = None,
        wait_ms: Optional[int] = None,
        replicas: Optional[int] = None,
        on_lost: Optional[Callable[[Any], Any]] = None,
    ) -> L:
        """`WRITE path`, `WRITE into_folder/<last segment of path>`."""
        return self.lock(
            [("WRITE", path), ("WRITE", into(into_folder, path))],
            ttl_ms=ttl_ms,
            wait_ms=wait_ms,
            replicas=replicas,
            on_lost=on_lost,
        )

    def copy(
        self,
        path: str,
        into_folder: str,
        *,
        ttl_ms: Optional[int] = None,
        wait_ms: Optional[int] = None,
        replicas: Optional[int] = None,
        on_lost: Optional[Callable[[Any], Any]] = None,
    ) -> L:
        """`READ path`, `WRITE into_folder/<last segment of path>`."""
        return self.lock(
            [("READ", path), ("WRITE", into(into_folder, path))],
            ttl_ms=ttl_ms,
            wait_ms=wait_ms,
            replicas=replicas,
            on_lost=on_lost,
        )

    def delete(
        self,
        path: str,
        *,
        ttl_ms: Optional[int] = None,
        wait_ms: Optional[int] = None,
        replicas: Optional[int] = None,
        on_lost: Optional[Callable[[Any], Any]] = None,
    ) -> L:
        """`WRITE path`."""
        return self.lock(
            [("WRITE", path)], ttl_ms=ttl_ms, wait_ms=wait_ms, replicas=replicas, on_lost=on_lost
        )

    def purge(
        self,
        *paths: str,
        ttl_ms: Optional[int] = None,
        wait_ms: Optional[int] = None,
        replicas: Optional[int] = None,
        on_lost: Optional[Callable[[Any], Any]] = None,
    ) -> L:
        """`WRITE` each path: emptying the recycle bin."""
        return self.lock(
            [("WRITE", path) for path in paths],
            ttl_ms=ttl_ms,
            wait_ms=wait_ms,
            replicas=replicas,
            on_lost=on_lost,
        )
