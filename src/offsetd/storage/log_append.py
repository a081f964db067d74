"""Deciding an append before any I/O: validation, idempotent-producer rules, offset assignment and
the roll rules, so that PartitionLog.apply_append only writes what was decided here (and the
PostgreSQL engine can store the same bytes first).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from offsetd.records.batch import INVALID_RECORD, BatchHeader, InvalidBatch
from offsetd.storage.log_config import LogConfig
from offsetd.storage.producer_state import ProducerStateManager
from offsetd.storage.segment import Segment
from offsetd.storage.transactions import validate_log_batches

__all__ = ["AppendResult", "PreparedAppend", "prepare_append", "should_roll"]

_INT32_MAX = 2**31 - 1
_pack_int64 = struct.Struct(">q").pack
_pack_int32 = struct.Struct(">i").pack


@dataclass(slots=True)
class AppendResult:
    """Outcome of one append: offsets assigned (or, for a duplicate, originally assigned)."""

    base_offset: int
    last_offset: int
    log_append_time_ms: int = -1
    log_start_offset: int = 0
    duplicate: bool = False


@dataclass(slots=True)
class PreparedAppend:
    """An append decided but not yet written (PartitionLog.prepare_append): offsets
    [first, next_offset), the iovecs to write and the producer state to commit after."""

    first: int
    next_offset: int
    size: int
    parts: list[bytes | memoryview]
    batches: list[tuple[int, BatchHeader, int]]
    messages: int
    pending: object
    replica: bool = False  # copied with its own offsets (may start past the log end: a compacted gap)
    leader_epoch: int = -1  # the partition leader epoch its batches carry (-1: none)

    def data(self) -> bytes:
        """The bytes as they will be stored (base offsets and leader epoch patched)."""
        return b"".join(self.parts)


def prepare_append(
    records: bytes | bytearray | memoryview,
    validated: list[BatchHeader] | None,
    producers: ProducerStateManager,
    max_message_bytes: int,
    log_start_offset: int,
    log_end_offset: int,
    *,
    leader_epoch: int | None = None,
    replica: bool = False,
) -> "PreparedAppend | AppendResult":
    """PartitionLog.prepare_append on a log whose end is `log_end_offset`: validate, judge (or,
    for a `replica`, only record) producer rules and assign offsets. A duplicate gives its
    original AppendResult."""
    mv = records if isinstance(records, memoryview) else memoryview(records)
    if mv.ndim != 1 or mv.itemsize != 1:
        mv = mv.cast("B")
    if validated is None:  # the broker's own writers: markers allowed
        validated = validate_log_batches(mv, max_message_bytes)
    if not validated:
        raise InvalidBatch(INVALID_RECORD, "produce request contains no record batch")
    if replica:  # stored offsets are kept: a compacted log has gaps, never overlaps
        first = validated[0].base_offset
        if first < log_end_offset:
            raise InvalidBatch(INVALID_RECORD, f"replica batch at {first} below the log end {log_end_offset}")
        pending, dup = producers.replica_pending(validated, mv), None
    else:
        first = log_end_offset
        pending, dup = producers.validate(validated, first, mv)
    if dup is not None:
        return AppendResult(dup.base_offset, dup.last_offset, -1, log_start_offset, True)

    # iovecs: the patched 8-byte baseOffset, then the batch bytes as received.
    parts: list[bytes | memoryview] = []
    batches: list[tuple[int, BatchHeader, int]] = []
    pos = 0
    offset = first
    messages = 0
    for h in validated:
        size = h.batch_length + 12
        if replica:
            if h.base_offset < offset:
                raise InvalidBatch(INVALID_RECORD, f"replica batches out of order at {h.base_offset}")
            offset = h.base_offset
            parts.append(mv[pos : pos + size])
        elif leader_epoch is None:
            parts.append(_pack_int64(offset))
            parts.append(mv[pos + 8 : pos + size])
        else:
            parts.append(_pack_int64(offset))
            parts.append(mv[pos + 8 : pos + 12])
            parts.append(_pack_int32(leader_epoch))
            parts.append(mv[pos + 16 : pos + size])
        batches.append((pos, h, offset))
        pos += size
        offset += h.last_offset_delta + 1
        messages += h.records_count
    if pos != len(mv):
        raise ValueError(f"validated headers cover {pos} bytes but the blob has {len(mv)}")
    epoch = validated[0].partition_leader_epoch if leader_epoch is None or replica else leader_epoch
    return PreparedAppend(first, offset, pos, parts, batches, messages, pending, replica, epoch)


def should_roll(seg: Segment, config: LogConfig, size: int, last_offset: int, now_ms: int) -> bool:
    """Kafka's roll rules for appending `size` bytes up to `last_offset` to the active segment
    `seg`: segment full, segment_ms elapsed since its first batch, or offsets no longer fitting
    the index's int32 relative offset."""
    if seg.size == 0:
        return False
    if seg.size + size > min(config.segment_bytes, _INT32_MAX):  # index positions are int32
        return True
    if seg.rolling_base_ms is not None and now_ms - seg.rolling_base_ms > config.segment_ms:
        return True
    return last_offset - seg.base_offset > _INT32_MAX
