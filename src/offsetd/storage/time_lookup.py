"""ListOffsets by time over a segmented log: the earliest record at or after a timestamp, and the
record with the largest timestamp, found through the time index and batch headers so that at
most a few batches are decoded (decompressed, whatever their codec).
"""

from __future__ import annotations

from offsetd.records.compression import batch_record_timestamps
from offsetd.storage.segment import Segment

__all__ = ["offset_for_timestamp", "max_timestamp"]


def offset_for_timestamp(segments: list[Segment], log_start_offset: int, ts: int) -> tuple[int, int] | None:
    """(offset, timestamp) of the earliest record with timestamp >= ts (ListOffsets).

    The time index gives the batch to start from; batches whose maxTimestamp is below ts are
    skipped by their headers, and the first one that may hold a match is decoded (and
    decompressed, whatever its codec) to find the exact record. Only when that batch has no
    qualifying record (e.g. all of them below the log start offset) are the next ones read.
    None when no record qualifies. Raises InvalidBatch when a batch cannot be decoded.
    """
    start_offset = log_start_offset
    for seg in segments:
        if seg.size == 0 or seg.max_timestamp < ts:
            continue
        hint = seg.time_index.lookup(ts)
        start = seg.offset_index.lookup(hint) if hint is not None else 0
        for pos, h in seg.iter_headers(start, 16 * 1024):
            if h.max_timestamp < ts or h.last_offset < start_offset:
                continue
            for rec_offset, rec_ts in batch_record_timestamps(seg.pread(h.size, pos)):
                if rec_ts >= ts and rec_offset >= start_offset:
                    return rec_offset, rec_ts
    return None


def max_timestamp(segments: list[Segment], log_start_offset: int) -> tuple[int, int]:
    """(offset, timestamp) of the record with the largest timestamp (ListOffsets -3, KIP-734).

    Ties go to the earliest such record, as Kafka: the first segment reaching the largest
    timestamp, its first batch whose maxTimestamp equals it, and in that batch (decompressed
    if need be) the first record carrying it. (-1, -1) when the log has no timestamped
    record. Raises InvalidBatch when the batch cannot be decoded.
    """
    best: Segment | None = None
    for seg in segments:
        if seg.size and seg.max_timestamp >= 0 and (best is None or seg.max_timestamp > best.max_timestamp):
            best = seg
    if best is None:
        return -1, -1
    target = best.max_timestamp
    start = best.find_batch(best.offset_of_max_timestamp)
    if start is None:
        start = 0
    for pos, h in best.iter_headers(start, 16 * 1024):
        if h.max_timestamp != target:
            continue
        for rec_offset, rec_ts in batch_record_timestamps(best.pread(h.size, pos)):
            if rec_ts == target and rec_offset >= log_start_offset:
                return rec_offset, rec_ts
    return -1, -1
