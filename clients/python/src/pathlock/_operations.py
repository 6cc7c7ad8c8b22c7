"""The README's cloud-drive operations, each mapped to the locks it needs, shared by both handles.

Level 2: builds on `_requests` and `_types`.
"""

from __future__ import annotations

from typing import Any, Callable, Generic, Iterable, Optional, Sequence, TypeVar

from ._requests import Note, Options, checked, default_note, described, into, named
from ._types import LockRequest

L = TypeVar("L")


class Operations(Generic[L]):
    """Every operation asks for its locks in one all-or-nothing `PATHLOCK.ACQUIRE`.

    Each takes `ttl_ms`, `wait_ms`, `replicas`, `note` and `on_lost` overriding the handle's
    defaults. The note sent is the call's, else the handle's, else one naming the operation
    (`"move /A/C -> /B"`). The helpers refuse an empty path and the project root; `lock()` takes
    the root when it is written out (`lock([("WRITE", "/")])`).
    """

    options: Options

    def _acquire(self, locks: Sequence[LockRequest], options: Options) -> L:
        raise NotImplementedError

    def _operation(
        self,
        locks: Sequence[LockRequest],
        name: str,
        ttl_ms: Optional[int],
        wait_ms: Optional[int],
        replicas: Optional[int],
        note: Optional[Note],
        on_lost: Optional[Callable[[Any], Any]],
    ) -> L:
        if note is None and self.options.note is None:
            note = default_note(name)
        return self._acquire(locks, self.options.override(ttl_ms, wait_ms, replicas, note, on_lost))

    def lock(
        self,
        requests: Iterable[LockRequest],
        *,
        ttl_ms: Optional[int] = None,
        wait_ms: Optional[int] = None,
        replicas: Optional[int] = None,
        note: Optional[Note] = None,
        on_lost: Optional[Callable[[Any], Any]] = None,
    ) -> L:
        """Any `(mode, path)` pairs, `mode` being `"READ"` or `"WRITE"`; `"/"` is the whole
        project."""
        locks = checked(list(requests))
        return self._operation(locks, described(locks), ttl_ms, wait_ms, replicas, note, on_lost)

    def upload(
        self,
        path: str,
        *,
        ttl_ms: Optional[int] = None,
        wait_ms: Optional[int] = None,
        replicas: Optional[int] = None,
        note: Optional[Note] = None,
        on_lost: Optional[Callable[[Any], Any]] = None,
    ) -> L:
        """`WRITE path`."""
        return self._operation(
            [("WRITE", named(path))], f"upload {path}", ttl_ms, wait_ms, replicas, note, on_lost
        )

    def create(
        self,
        path: str,
        *,
        ttl_ms: Optional[int] = None,
        wait_ms: Optional[int] = None,
        replicas: Optional[int] = None,
        note: Optional[Note] = None,
        on_lost: Optional[Callable[[Any], Any]] = None,
    ) -> L:
        """`WRITE path` (a new file or folder)."""
        return self._operation(
            [("WRITE", named(path))], f"create {path}", ttl_ms, wait_ms, replicas, note, on_lost
        )

    def read(
        self,
        path: str,
        *,
        ttl_ms: Optional[int] = None,
        wait_ms: Optional[int] = None,
        replicas: Optional[int] = None,
        note: Optional[Note] = None,
        on_lost: Optional[Callable[[Any], Any]] = None,
    ) -> L:
        """`READ path`."""
        return self._operation(
            [("READ", named(path))], f"read {path}", ttl_ms, wait_ms, replicas, note, on_lost
        )

    def rename(
        self,
        path: str,
        new_path: str,
        *,
        ttl_ms: Optional[int] = None,
        wait_ms: Optional[int] = None,
        replicas: Optional[int] = None,
        note: Optional[Note] = None,
        on_lost: Optional[Callable[[Any], Any]] = None,
    ) -> L:
        """`WRITE path`, `WRITE new_path`."""
        locks = [("WRITE", named(path)), ("WRITE", named(new_path, "new_path"))]
        name = f"rename {path} -> {new_path}"
        return self._operation(locks, name, ttl_ms, wait_ms, replicas, note, on_lost)

    def move(
        self,
        path: str,
        into_folder: str,
        *,
        ttl_ms: Optional[int] = None,
        wait_ms: Optional[int] = None,
        replicas: Optional[int] = None,
        note: Optional[Note] = None,
        on_lost: Optional[Callable[[Any], Any]] = None,
    ) -> L:
        """`WRITE path`, `WRITE into_folder/<last segment of path>`."""
        locks = [("WRITE", path), ("WRITE", into(into_folder, path))]
        name = f"move {path} -> {into_folder}"
        return self._operation(locks, name, ttl_ms, wait_ms, replicas, note, on_lost)

    def copy(
        self,
        path: str,
        into_folder: str,
        *,
        ttl_ms: Optional[int] = None,
        wait_ms: Optional[int] = None,
        replicas: Optional[int] = None,
        note: Optional[Note] = None,
        on_lost: Optional[Callable[[Any], Any]] = None,
    ) -> L:
        """`READ path`, `WRITE into_folder/<last segment of path>`."""
        locks = [("READ", path), ("WRITE", into(into_folder, path))]
        name = f"copy {path} -> {into_folder}"
        return self._operation(locks, name, ttl_ms, wait_ms, replicas, note, on_lost)

    def delete(
        self,
        path: str,
        *,
        ttl_ms: Optional[int] = None,
        wait_ms: Optional[int] = None,
        replicas: Optional[int] = None,
        note: Optional[Note] = None,
        on_lost: Optional[Callable[[Any], Any]] = None,
    ) -> L:
        """`WRITE path`."""
        return self._operation(
            [("WRITE", named(path))], f"delete {path}", ttl_ms, wait_ms, replicas, note, on_lost
        )

    def purge(
        self,
        *paths: str,
        ttl_ms: Optional[int] = None,
        wait_ms: Optional[int] = None,
        replicas: Optional[int] = None,
        note: Optional[Note] = None,
        on_lost: Optional[Callable[[Any], Any]] = None,
    ) -> L:
        """`WRITE` each path: emptying the recycle bin."""
        locks = checked([("WRITE", named(path)) for path in paths])
        name = "purge " + " ".join(paths)
        return self._operation(locks, name, ttl_ms, wait_ms, replicas, note, on_lost)
