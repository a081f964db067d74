"""Kafka's retention rules for a log's oldest segments (retention.ms by largest timestamp, then
retention.bytes by size), kept apart from the deletion itself, which PartitionLog does.
"""

from __future__ import annotations

from offsetd.storage.log_config import LogConfig
from offsetd.storage.segment import Segment

__all__ = ["retention_deletions"]


def _deletable(segments: list[Segment], i: int) -> bool:
    """Retention may delete segment i: it holds data, or it is a sealed segment the cleaner
    emptied (an empty active segment is the log's end and stays)."""
    return segments[i].size > 0 or i < len(segments) - 1


def retention_deletions(segments: list[Segment], config: LogConfig, now_ms: int) -> int:
    """How many of the oldest `segments` retention deletes: those past retention_ms (by largest
    timestamp), then while the log exceeds retention_bytes. Like Kafka, an expired active
    segment counts too (the log rolls it first and then stays empty at its log end offset)."""
    deleted = 0
    retention_ms = config.retention_ms
    if retention_ms >= 0:
        while (deleted < len(segments) and _deletable(segments, deleted)
               and now_ms - segments[deleted].largest_timestamp > retention_ms):
            deleted += 1
    retention_bytes = config.retention_bytes
    if retention_bytes >= 0:
        excess = sum(s.size for s in segments[deleted:]) - retention_bytes
        while deleted < len(segments) and _deletable(segments, deleted) and excess - segments[deleted].size >= 0:
            excess -= segments[deleted].size
            deleted += 1
    return deleted
