"""Recovery of a segment that may hold unsynced data after a crash (the active one, or one rolled
but not yet fsynced): every batch verified by header and CRC, the file cut at the first bad one
and its indexes rebuilt (storage/log_loader.py calls it for the segments past the recovery point).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Callable

from crc32c import crc32c

from offsetd.records.batch import BATCH_HEADER_SIZE, CRC_START, LOG_OVERHEAD, MIN_BATCH_LENGTH, BatchHeader
from offsetd.storage.log_config import LogConfig
from offsetd.storage.segment import _HEADER_UNPACK_FROM, _LENGTH_UNPACK_FROM, _SCAN_CHUNK, _ZEROS, Segment

__all__ = ["recover_segment"]

log = logging.getLogger("offsetd.storage")


def recover_segment(
    directory: Path,
    base_offset: int,
    config: LogConfig,
    now_ms: int,
    on_batch: Callable[[BatchHeader], None] | None = None,
) -> Segment:
    """Open a segment that may hold unsynced data (the active one, or one rolled but not yet
    fsynced): verify every batch (header + CRC), truncate at the first bad one, rebuild both
    indexes, and call on_batch(header) for each valid batch in order. The data is marked
    dirty since it may exist only in the page cache."""
    seg = Segment(directory, base_offset, config)
    file = seg.file
    file_size = os.fstat(file.fileno()).st_size
    buf = b""
    buf_start = 0
    pos = 0
    expected_next = base_offset
    reason = None
    first = True
    mv = memoryview(buf)
    while pos < file_size:
        if file_size - pos < BATCH_HEADER_SIZE:
            reason = "torn batch header"
            break
        if pos + BATCH_HEADER_SIZE > buf_start + len(buf):
            buf = os.pread(file.fileno(), max(_SCAN_CHUNK, BATCH_HEADER_SIZE), pos)
            buf_start = pos
            mv = memoryview(buf)
        h = BatchHeader(*_HEADER_UNPACK_FROM(buf, pos - buf_start))
        size = h.batch_length + LOG_OVERHEAD
        if h.batch_length < MIN_BATCH_LENGTH:
            reason = f"invalid batch length {h.batch_length}"
            break
        if pos + size > file_size:
            reason = "torn batch (file ends inside it)"
            break
        if h.magic != 2:
            reason = f"invalid magic {h.magic}"
            break
        if h.last_offset_delta < 0 or h.base_offset < expected_next:
            reason = f"batch offsets {h.base_offset}..{h.last_offset} out of order"
            break
        if h.last_offset - base_offset > 2**31 - 1:
            reason = "batch offset beyond the segment's relative range"
            break
        if pos + size > buf_start + len(buf):
            buf = os.pread(file.fileno(), max(_SCAN_CHUNK, size), pos)
            buf_start = pos
            mv = memoryview(buf)
        rel = pos - buf_start
        if crc32c(mv[rel + CRC_START : rel + size]) != h.crc:
            reason = "CRC-32C mismatch"
            break
        if first:
            seg.rolling_base_ms = h.max_timestamp if h.max_timestamp >= 0 else now_ms
            first = False
        seg._track(pos, h, h.base_offset, write_index=False)
        if on_batch is not None:
            on_batch(h)
        expected_next = h.next_offset
        pos += size
    mv.release()
    seg.size = seg.allocated = pos
    seg.dirty = pos > 0
    if reason is not None and _zero_from(seg, pos, file_size):
        log.info("recovery of %s: trimming %d preallocated bytes after byte %d", seg.log_path,
                 file_size - pos, pos)
        os.ftruncate(file.fileno(), pos)
        os.fsync(file.fileno())
    elif reason is not None:
        dropped = seg.truncated_bytes = file_size - pos
        batches = _count_batches(seg, pos, file_size)
        # A torn or corrupt tail is what a crash leaves; offsets out of order never are (appends
        # are atomic, a failed one is cut back): that is a bug, said at ERROR level.
        out_of_order = reason.endswith("out of order")
        log.log(
            logging.ERROR if out_of_order else logging.WARNING,
            "recovery of %s: %s at byte %d; truncating %d bytes (%d batch%s) to keep %d bytes%s",
            seg.log_path,
            reason,
            pos,
            dropped,
            batches,
            "" if batches == 1 else "es",
            pos,
            " (offsets out of order are a bug: please report it)" if out_of_order else "",
        )
        os.ftruncate(file.fileno(), pos)
        os.fsync(file.fileno())
    seg.offset_index.rewrite(fsync=False)
    seg.time_index.rewrite(fsync=False)
    return seg


def _zero_from(seg: Segment, start: int, end: int) -> bool:
    """True when the file holds only zero bytes in [start, end): preallocated, never written."""
    pos = start
    while pos < end:
        chunk = os.pread(seg.file.fileno(), min(len(_ZEROS), end - pos), pos)
        if not chunk or chunk != _ZEROS[: len(chunk)]:
            return False
        pos += len(chunk)
    return True


def _count_batches(seg: Segment, start: int, end: int) -> int:
    """Best-effort count of (possibly partial) batches in [start, end) by their length fields."""
    count = 0
    pos = start
    while pos < end:
        count += 1
        head = os.pread(seg.file.fileno(), LOG_OVERHEAD, pos)
        if len(head) < LOG_OVERHEAD:
            break
        length = _LENGTH_UNPACK_FROM(head, 8)[0]
        if length < MIN_BATCH_LENGTH:
            break
        pos += LOG_OVERHEAD + length
    return count
