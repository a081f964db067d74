"""Kafka's retention rules for a log's oldest parts (retention.ms by largest timestamp, then
retention.bytes by size), kept apart from the deletion itself: PartitionLog deletes segments, the
cluster engine the appends only PostgreSQL holds (storage/cold_range.py).
"""

from __future__ import annotations

from typing import Callable

from offsetd.storage.log_config import LogConfig
from offsetd.storage.segment import Segment

__all__ = ["expired_prefix", "retention_deletions"]


def expired_prefix(count: int, size: Callable[[int], int], largest_timestamp: Callable[[int], int],
                   config: LogConfig, now_ms: int, *, after_bytes: int = 0) -> int:
    """How many of a log's `count` oldest parts (each asked for lazily by index, oldest first)
    retention deletes: those past retention_ms by largest timestamp, then while the log (these
    parts and `after_bytes` more after them) exceeds retention_bytes."""
    deleted = 0
    retention_ms = config.retention_ms
    if retention_ms >= 0:
        while deleted < count and now_ms - largest_timestamp(deleted) > retention_ms:
            deleted += 1
    retention_bytes = config.retention_bytes
    if retention_bytes >= 0:
        excess = sum(size(i) for i in range(deleted, count)) + after_bytes - retention_bytes
        while deleted < count and excess - size(deleted) >= 0:
            excess -= size(deleted)
            deleted += 1
    return deleted


def retention_deletions(segments: list[Segment], config: LogConfig, now_ms: int) -> int:
    """How many of the oldest `segments` retention deletes. Like Kafka, an expired active segment
    counts too (the log rolls it first and then stays empty at its log end offset); an empty
    active segment is the log's end and stays (a sealed one the cleaner emptied may go)."""
    count = len(segments) - (1 if segments and segments[-1].size == 0 else 0)
    return expired_prefix(count, lambda i: segments[i].size, lambda i: segments[i].largest_timestamp, config,
                          now_ms)
