"""One event-loop timer for all the async leases of a handle.

A `loop.call_at` per lease would leave a cancelled handle in the loop's own heap for every lease
released before its renewal (nearly all of them), and that heap compares its entries in Python:
every timer redis-py sets for its socket reads would then get slower. Here the leases' wake-ups
are plain tuples in a heap of their own, and the loop holds one handle, for the earliest.

Level 0: imports nothing of the package.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math
from typing import List, Optional, Protocol, Tuple

#: Entries due within this much of the loop's clock are run: asyncio itself runs a handle up to
#: its clock resolution early.
EARLY = 0.001


class Timer(Protocol):
    @property
    def finished(self) -> bool: ...

    def fire(self, when: float) -> None: ...


class LoopTimers:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._heap: List[Tuple[float, int, Timer]] = []
        self._seq = itertools.count()
        self._compact_at = 1024
        self._handle: Optional[asyncio.TimerHandle] = None
        self._handle_at = math.inf

    def at(self, when: float, timer: Timer) -> None:
        """Calls `timer.fire(when)` from the loop at loop time `when` (or a little later)."""
        heapq.heappush(self._heap, (when, next(self._seq), timer))
        # Released leases leave their entries behind; dropping them once the heap has doubled
        # keeps it proportional to the leases held, at a constant cost per push.
        if len(self._heap) >= self._compact_at:
            self._heap = [e for e in self._heap if not e[2].finished]
            heapq.heapify(self._heap)
            self._compact_at = max(1024, 2 * len(self._heap))
        self._arm()

    def _arm(self) -> None:
        if not self._heap or self._heap[0][0] >= self._handle_at:
            return
        if self._handle is not None:
            self._handle.cancel()
        self._handle_at = self._heap[0][0]
        self._handle = self.loop.call_at(self._handle_at, self._run)

    def _run(self) -> None:
        self._handle = None
        self._handle_at = math.inf
        now = self.loop.time() + EARLY
        while self._heap and self._heap[0][0] <= now:
            when, _, timer = heapq.heappop(self._heap)
            if not timer.finished:
                timer.fire(when)
        self._arm()
