"""One timer thread and a few worker threads per process, shared by every sync lease.

A thread per lease would cost a thread start on every acquire and a thread per held lock; instead
the timer thread keeps a heap of wake-up times and only ever does quick bookkeeping, and commands
that may block (a renewal to a paused server) run on worker threads, so that a stuck renewal never
delays the deadline check that declares its lease lost.

Level 0: imports nothing of the package.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import os
import queue
import threading
import time
from typing import Callable, List, Optional, Protocol, Tuple

log = logging.getLogger("pathlock")

#: Worker threads at most; renewals beyond that wait in the queue, deadlines are still checked.
MAX_WORKERS = 8


class Timer(Protocol):
    """Something the timer thread wakes: `fire` must be quick and never block on the network."""

    @property
    def finished(self) -> bool: ...

    def fire(self, when: float) -> None: ...


class Scheduler:
    def __init__(self) -> None:
        self._reset()
        # A forked child inherits the heap but not the threads.
        os.register_at_fork(after_in_child=self._reset)

    def _reset(self) -> None:
        self._cond = threading.Condition()
        self._heap: List[Tuple[float, int, Timer]] = []
        self._seq = itertools.count()
        self._compact_at = 1024
        self._timer_thread: Optional[threading.Thread] = None
        self._jobs: "queue.SimpleQueue[Callable[[], None]]" = queue.SimpleQueue()
        self._workers = 0
        self._idle = 0

    def at(self, when: float, timer: Timer) -> None:
        """Calls `timer.fire(when)` on the timer thread at monotonic time `when`."""
        with self._cond:
            if self._timer_thread is None:
                self._timer_thread = threading.Thread(
                    target=self._run_timers, name="pathlock-watchdog", daemon=True
                )
                self._timer_thread.start()
            entry = (when, next(self._seq), timer)
            heapq.heappush(self._heap, entry)
            # Released leases leave their entries behind; dropping them once the heap has doubled
            # keeps it proportional to the leases held, at a constant cost per push.
            if len(self._heap) >= self._compact_at:
                self._heap = [e for e in self._heap if not e[2].finished]
                heapq.heapify(self._heap)
                self._compact_at = max(1024, 2 * len(self._heap))
            # Most pushes land behind the earliest entry and need not wake the thread.
            if self._heap[0] is entry:
                self._cond.notify()

    def submit(self, job: Callable[[], None]) -> None:
        """Runs `job` on a worker thread; it may block."""
        with self._cond:
            # An idle worker is claimed for this job, so that two jobs submitted together do not
            # both count on the same one.
            if self._idle > 0:
                self._idle -= 1
            elif self._workers < MAX_WORKERS:
                self._workers += 1
                threading.Thread(target=self._run_jobs, name="pathlock-worker", daemon=True).start()
        self._jobs.put(job)

    def _run_timers(self) -> None:
        while True:
            with self._cond:
                while True:
                    now = time.monotonic()
                    if self._heap and self._heap[0][0] <= now:
                        when, _, timer = heapq.heappop(self._heap)
                        break
                    timeout = self._heap[0][0] - now if self._heap else None
                    self._cond.wait(timeout)
            if timer.finished:
                continue
            try:
                timer.fire(when)
            except Exception:  # a bug in one lease must not stop every other lease's watchdog
                log.exception("pathlock: watchdog timer failed")

    def _run_jobs(self) -> None:
        while True:
            job = self._jobs.get()
            try:
                job()
            except Exception:
                log.exception("pathlock: watchdog job failed")
            with self._cond:
                self._idle += 1


SCHEDULER = Scheduler()
