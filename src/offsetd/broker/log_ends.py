"""Log offsets and record timestamps of every partition, as the lag views need them (stub)."""

from __future__ import annotations

from typing import Any


class LogEnds:
    """Reads the partitions' bounds from this broker's logs (and PostgreSQL in cluster mode)."""

    def __init__(self, topics: Any, store: Any = None) -> None:
        self.topics = topics
        self.store = store
