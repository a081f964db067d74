"""Reading whole batches from a segmented log (Fetch): which byte ranges of which segments hold
them, bounded by a byte budget and by the last stable offset, and how they are handed out.

Only batch headers are read to find the boundaries; the bytes go out as one pread per segment
or as file ranges held open for sendfile (storage/file_records.py).
"""

from __future__ import annotations

from bisect import bisect_right

from offsetd.storage.file_records import FileRecords
from offsetd.storage.segment import Segment

__all__ = [
    "OffsetOutOfRange",
    "read_ranges",
    "ranges_end_offset",
    "pread_all",
    "ranges_data",
]

OFFSET_OUT_OF_RANGE = 1


class OffsetOutOfRange(Exception):
    """A read asked for an offset outside [log_start_offset, log_end_offset]."""

    error_code = OFFSET_OUT_OF_RANGE

    def __init__(self, offset: int, log_start_offset: int, log_end_offset: int) -> None:
        super().__init__(
            f"offset {offset} is out of range [{log_start_offset}, {log_end_offset}]"
        )
        self.offset = offset
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset


def segment_index(bases: list[int], offset: int) -> int:
    """Index into the segments (base offsets `bases`) of the one holding `offset` (clamped to
    the first)."""
    return max(bisect_right(bases, offset) - 1, 0)


def pread_all(ranges: list[tuple[Segment, int, int]]) -> bytes:
    """The bytes of `read_ranges`' ranges (one pread per segment)."""
    if len(ranges) == 1:
        seg, pos, length = ranges[0]
        return seg.pread(length, pos)
    return b"".join(seg.pread(length, pos) for seg, pos, length in ranges)


def ranges_data(ranges: list[tuple[Segment, int, int]], min_file_bytes: int) -> bytes | FileRecords:
    """The ranges as FileRecords, or bytes below `min_file_bytes` or when no descriptor is left."""
    if not ranges or sum(r[2] for r in ranges) < min_file_bytes:
        return pread_all(ranges)
    held = FileRecords.hold([(seg.file, pos, length) for seg, pos, length in ranges])
    return pread_all(ranges) if held is None else held


def ranges_end_offset(ranges: list[tuple[Segment, int, int]], bases: list[int], log_end_offset: int) -> int:
    """The offset just past the data of non-empty `ranges`: the next batch's base offset, else
    the next segment's base, else the log end (a read_committed Fetch's upper bound)."""
    seg, pos, length = ranges[-1]
    end = pos + length
    if end < seg.size:
        return seg.header_at(end).base_offset
    i = segment_index(bases, seg.base_offset) + 1
    return bases[i] if i < len(bases) else log_end_offset


def read_ranges(segments: list[Segment], bases: list[int], offset: int, max_bytes: int, min_one_batch: bool,
                log_start_offset: int, log_end_offset: int,
                max_offset: int | None = None) -> list[tuple[Segment, int, int]]:
    """(segment, position, length) of the whole batches `PartitionLog.read` returns, in log
    order; no record byte is read, only batch headers to find the boundaries. `max_offset` (the
    LSO, a batch boundary) excludes the batches starting at or after it, even a first one.
    Raises OffsetOutOfRange outside [log_start_offset, log_end_offset]."""
    if offset < log_start_offset or offset > log_end_offset:
        raise OffsetOutOfRange(offset, log_start_offset, log_end_offset)
    ranges: list[tuple[Segment, int, int]] = []
    if max_offset is None or max_offset > log_end_offset:
        max_offset = log_end_offset
    if offset >= max_offset:
        return ranges
    # The segment holding max_offset and the byte where its batch starts (None: no bound).
    stop_seg: Segment | None = None
    stop_pos = 0
    if max_offset < log_end_offset:
        stop_seg = segments[segment_index(bases, max_offset)]
        found = stop_seg.find_batch(max_offset)
        stop_pos = stop_seg.size if found is None else found
    remaining = max_bytes
    searching = True
    for seg in segments[segment_index(bases, offset) :]:
        if seg.size == 0:
            if seg is stop_seg:
                break
            continue
        if searching:
            pos = seg.find_batch(offset)
            if pos is None:
                if seg is stop_seg:
                    break
                continue  # offset lies in a gap after this segment's last batch
            searching = False
        else:
            pos = 0
        seg_end = stop_pos if seg is stop_seg else seg.size
        if seg_end <= pos:
            break
        limit = pos + max(remaining, 0)
        end = seg_end if limit >= seg_end else seg.last_boundary(pos, limit)
        if end == pos:
            if not ranges and min_one_batch:
                ranges.append((seg, pos, min(seg.header_at(pos).size, seg_end - pos)))
            break
        ranges.append((seg, pos, end - pos))
        remaining -= end - pos
        if end < seg.size or remaining <= 0 or seg is stop_seg:
            break
    return ranges
