"""Sans-IO timers: keyed deadlines the shell polls; scheduling a key again replaces it."""

from __future__ import annotations

import heapq
from typing import Hashable


class Timers:
    """A min-heap of (deadline, key) with lazy cancellation."""

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, Hashable]] = []
        self._live: dict[Hashable, tuple[int, int]] = {}
        self._seq = 0

    def schedule(self, key: Hashable, deadline_ms: int) -> None:
        self._seq += 1
        self._live[key] = (deadline_ms, self._seq)
        heapq.heappush(self._heap, (deadline_ms, self._seq, key))

    def cancel(self, key: Hashable) -> None:
        self._live.pop(key, None)

    def deadline(self, key: Hashable) -> int | None:
        entry = self._live.get(key)
        return entry[0] if entry else None

    def next_deadline(self) -> int | None:
        """The earliest live deadline, or None."""
        heap = self._heap
        while heap and self._live.get(heap[0][2]) != (heap[0][0], heap[0][1]):
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def pop_expired(self, now_ms: int) -> list[Hashable]:
        """Keys whose deadline is <= now, earliest first; they are removed."""
        expired = []
        heap = self._heap
        while heap and heap[0][0] <= now_ms:
            deadline, seq, key = heapq.heappop(heap)
            if self._live.get(key) == (deadline, seq):
                del self._live[key]
                expired.append(key)
        return expired

    def __len__(self) -> int:
        return len(self._live)
