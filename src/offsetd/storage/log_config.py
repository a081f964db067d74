"""Per-partition log settings, named after Kafka's topic/broker config keys."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["LogConfig"]


@dataclass(frozen=True)
class LogConfig:
    """Settings of one partition log (Kafka names in the comments); immutable, swap to change."""

    segment_bytes: int = 1073741824  # log.segment.bytes / segment.bytes
    segment_ms: int = 604800000  # log.roll.ms / segment.ms
    retention_ms: int = 604800000  # log.retention.ms / retention.ms (-1 = unlimited)
    retention_bytes: int = -1  # log.retention.bytes / retention.bytes (-1 = unlimited)
    # log.local.retention.bytes / local.retention.bytes: cluster mode, how much of a log a new
    # owner copies from PostgreSQL (-2 = retention_bytes, -1 = all; storage/cold_range.py)
    local_retention_bytes: int = -2
    flush_interval_messages: int = 2**63 - 1  # log.flush.interval.messages
    # log.flush.interval.ms: None = never by time; the shell runs the timer and calls flush().
    flush_interval_ms: int | None = None
    index_interval_bytes: int = 4096  # log.index.interval.bytes / index.interval.bytes
    max_message_bytes: int = 1048588  # message.max.bytes / max.message.bytes (per batch)
    cleanup_policy: str = "delete"  # cleanup.policy: "delete" | "compact" | "compact,delete"
    producer_id_expiration_ms: int = 86400000  # producer.id.expiration.ms
    # Log cleaner (compaction), used when the policy contains "compact" (see storage/cleaner.py):
    delete_retention_ms: int = 86400000  # delete.retention.ms: tombstones live at least this long
    min_cleanable_dirty_ratio: float = 0.5  # min.cleanable.dirty.ratio: dirty / cleanable bytes
    min_compaction_lag_ms: int = 0  # min.compaction.lag.ms: younger segments are not cleaned
    # log.preallocate / preallocate: keep zero-filled space ahead of the active segment's end, so
    # an fdatasync after an append flushes data only, not a new file size (segment.py).
    preallocate: bool = False

    @property
    def deletes(self) -> bool:
        """True when delete-retention applies (policy contains "delete")."""
        return "delete" in (p.strip() for p in self.cleanup_policy.split(","))

    @property
    def compacts(self) -> bool:
        """True when the policy contains "compact"."""
        return "compact" in (p.strip() for p in self.cleanup_policy.split(","))
