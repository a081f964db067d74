"""One log segment: `<base>.log` plus its `.index` and `.timeindex`, in Kafka's on-disk format.

The .log file is a plain concatenation of magic-v2 batches whose baseOffset fields hold the
assigned offsets. Its descriptor comes from the process's file pool (storage/file_pool.py), opened
on demand and possibly closed between calls; it is written with os.pwritev at the segment's size
and read with os.pread, so no file position is shared and records are never decoded. The segment
tracks its size, next offset and largest timestamp in memory; the indexes are updated per batch
following Kafka's rule (an entry when more than `index_interval_bytes` were appended since the
previous entry).

Durability: `seal` (on roll) does not fsync; the owning PartitionLog fsyncs sealed segments
later and keeps a recovery point, so after a crash only segments from the recovery point on
(at most the active one and the one sealed before it) need recovery (storage/segment_recovery.py).

Preallocation (`preallocate`): the active segment keeps zero-filled bytes written ahead of its
end. Appends then overwrite blocks the file already has, and the fdatasync that makes them
durable need not also persist a new file size: on this project's test machines its p99 drops
from ~3-4 ms to ~0.4 ms. The zeros are cut off when the segment is sealed or closed; after a
crash recovery trims an all-zero tail quietly (it is not damage).
"""

from __future__ import annotations

import logging
import os
import struct
from pathlib import Path
from typing import Iterator, NamedTuple, Sequence

from offsetd.records.batch import (
    BATCH_HEADER_SIZE,
    LOG_OVERHEAD,
    MIN_BATCH_LENGTH,
    BatchHeader,
    parse_header,
)
from offsetd.storage.file_pool import PooledFile
from offsetd.storage.index import OffsetIndex, TimeIndex
from offsetd.storage.log_config import LogConfig

__all__ = ["Segment", "SegmentMark", "segment_file_name", "LOG_SUFFIX", "INDEX_SUFFIX", "TIMEINDEX_SUFFIX"]

log = logging.getLogger("offsetd.storage")

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIMEINDEX_SUFFIX = ".timeindex"

_HEADER_UNPACK_FROM = struct.Struct(">qiibIhiqqqhii").unpack_from
# baseOffset int64 @0, batchLength int32 @8, (skip 11 bytes), lastOffsetDelta int32 @23
_HOP = struct.Struct(">qi11xi")
_HOP_SIZE = _HOP.size  # 27
_HOP_UNPACK_FROM = _HOP.unpack_from
_LENGTH_UNPACK_FROM = struct.Struct(">i").unpack_from

# Preallocation: zero-fill ahead of the end by the segment's size, within these bounds, once
# less than half of that is left (so a busy segment extends once per 4 MiB written).
_PREALLOCATE_MIN = 64 * 1024
_PREALLOCATE_MAX = 4 * 1024 * 1024
_ZEROS = bytes(1024 * 1024)

_HOP_CHUNK = 16 * 1024  # pread size when hopping from an index entry to a target batch
_SCAN_CHUNK = 1024 * 1024  # pread size for full header / CRC scans
_IOV_MAX = 1024


def segment_file_name(base_offset: int, suffix: str) -> str:
    """Kafka's segment file name: base offset zero-padded to 20 digits plus the suffix."""
    return f"{base_offset:020d}{suffix}"


class SegmentMark(NamedTuple):
    """What `Segment.rollback` restores: the in-memory summary and the index lengths."""

    size: int
    next_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    rolling_base_ms: int | None
    bytes_since_index: int
    index_entries: int
    time_entries: int


class Segment:
    """A .log file with its offset and time indexes and in-memory summary."""

    def __init__(self, directory: Path, base_offset: int, config: LogConfig) -> None:
        self.directory = directory
        self.base_offset = base_offset
        self.config = config
        self.log_path = directory / segment_file_name(base_offset, LOG_SUFFIX)
        self.offset_index = OffsetIndex(directory / segment_file_name(base_offset, INDEX_SUFFIX), base_offset)
        self.time_index = TimeIndex(directory / segment_file_name(base_offset, TIMEINDEX_SUFFIX), base_offset)
        self.file = PooledFile(self.log_path, os.O_RDWR)
        self.size = 0  # bytes of valid batches in the .log
        self.allocated = 0  # bytes in the file: size plus preallocated zeros
        self.next_offset = base_offset  # offset after the last batch (base_offset when empty)
        self.max_timestamp = -1  # largest batch maxTimestamp seen
        self.offset_of_max_timestamp = -1  # last offset of the batch that first reached it
        self.rolling_base_ms: int | None = None  # when the first batch arrived (for segment_ms)
        self.bytes_since_index = 0
        self.sealed = False
        self.truncated_bytes = 0  # bytes cut off by recovery (storage/segment_recovery.py)

    @property
    def dirty(self) -> bool:
        """True when the .log has bytes (or a length) not yet fsynced."""
        return self.file.dirty

    @dirty.setter
    def dirty(self, value: bool) -> None:
        self.file.dirty = value

    # ----------------------------------------------------------------- construction

    @classmethod
    def create(cls, directory: Path, base_offset: int, config: LogConfig) -> "Segment":
        """Create a new empty active segment (any stale files of that name are emptied)."""
        seg = cls(directory, base_offset, config)
        try:
            os.ftruncate(seg.file.fileno(), 0)
            seg.offset_index.rewrite(fsync=False)
            seg.time_index.rewrite(fsync=False)
        except OSError:
            seg.delete()  # no half-made segment (or open descriptor) is left behind
            raise
        return seg

    @classmethod
    def open_sealed(
        cls, directory: Path, base_offset: int, config: LogConfig, next_base: int | None
    ) -> "Segment":
        """Open an older (non-active) segment; rebuild its indexes when missing or corrupt.

        `next_base` is the following segment's base offset, used to bound index entries.
        """
        seg = cls(directory, base_offset, config)
        seg.file.created = True  # it exists: a stat is enough, the pool opens it when read
        seg.size = seg.allocated = os.stat(seg.log_path).st_size
        seg.sealed = True
        max_rel = None if next_base is None else next_base - base_offset - 1
        oidx, problem = OffsetIndex.load(seg.offset_index.path, base_offset)
        if problem is None:
            problem = oidx.sanity_problem(seg.size, max_rel)
        tidx, tproblem = TimeIndex.load(seg.time_index.path, base_offset)
        if tproblem is None:
            tproblem = tidx.sanity_problem(max_rel)
        if problem is None and tproblem is None:
            seg.offset_index = oidx
            seg.time_index = tidx
            last = tidx.last_entry()
            if last is not None:
                seg.max_timestamp, seg.offset_of_max_timestamp = last
            seg.next_offset = next_base if next_base is not None else base_offset
            if seg.size and next_base is None:
                seg.next_offset = seg._last_batch_next_offset()
        else:
            which = seg.offset_index.path if problem else seg.time_index.path
            log.warning(
                "rebuilding indexes of %s: %s is unusable (%s)",
                seg.log_path,
                which.name,
                problem or tproblem,
            )
            seg._rebuild_indexes()
        return seg

    def _last_batch_next_offset(self) -> int:
        """Walk from the last index entry to find the offset after the last batch."""
        nxt = self.base_offset
        start = self.offset_index.floor_position(self.size)
        for _pos, h in self.iter_headers(start, _HOP_CHUNK):
            nxt = h.next_offset
        return nxt

    def _rebuild_indexes(self) -> None:
        """Recompute both indexes of a sealed segment from its batch headers and fsync them."""
        self.offset_index.set_entries([])
        self.time_index.set_entries([])
        self.bytes_since_index = 0
        self.max_timestamp = -1
        self.offset_of_max_timestamp = -1
        end = 0
        for pos, h in self.iter_headers(0):
            self._track(pos, h, h.base_offset, write_index=False)
            end = pos + h.size
        if end < self.size:
            log.warning("%s: %d bytes after the last complete batch are ignored", self.log_path, self.size - end)
            self.size = end
        self._final_time_entry(write_index=False)
        self.offset_index.rewrite(fsync=True)
        self.time_index.rewrite(fsync=True)
        self.offset_index.close()
        self.time_index.close()

    # ----------------------------------------------------------------- appends

    def _track(self, pos: int, h: BatchHeader, base: int, *, write_index: bool = True) -> None:
        """Account for the batch at `pos` (assigned base offset `base`): max timestamp, indexes."""
        last = base + h.last_offset_delta
        if h.max_timestamp > self.max_timestamp:
            self.max_timestamp = h.max_timestamp
            self.offset_of_max_timestamp = last
        if self.bytes_since_index > self.config.index_interval_bytes:
            self.offset_index.append(last, pos, write=write_index)
            if self.max_timestamp >= 0:
                self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp, write=write_index)
            self.bytes_since_index = 0
        self.bytes_since_index += h.batch_length + LOG_OVERHEAD
        self.next_offset = last + 1

    def mark(self) -> SegmentMark:
        """The segment's state now, to `rollback` to if what follows fails."""
        return SegmentMark(self.size, self.next_offset, self.max_timestamp, self.offset_of_max_timestamp,
                           self.rolling_base_ms, self.bytes_since_index, len(self.offset_index),
                           len(self.time_index))

    def rollback(self, mark: SegmentMark) -> None:
        """Undo everything appended since `mark`: memory first (so the segment is consistent
        even if the files cannot be cut), then the .log and both indexes are cut back to their
        length at the mark. An OSError here means the files may still hold the undone bytes
        beyond the segment's size: they are overwritten by the next append and cut by recovery,
        but the caller should stop trusting the directory (storage/log_dir.py)."""
        (self.size, self.next_offset, self.max_timestamp, self.offset_of_max_timestamp, self.rolling_base_ms,
         self.bytes_since_index, index_entries, time_entries) = mark
        self.dirty = True  # the file's length changed since the last fsync
        errors: list[OSError] = []
        for undo in (lambda: self.offset_index.truncate_entries(index_entries),
                     lambda: self.time_index.truncate_entries(time_entries),
                     self.discard_ahead):
            try:
                undo()
            except OSError as exc:
                errors.append(exc)
        if errors:
            raise errors[0]

    def discard_ahead(self) -> None:
        """Cut the .log back to its valid size (dropping anything written or preallocated beyond)."""
        if not self.file.closed:
            os.ftruncate(self.file.fileno(), self.size)
        self.allocated = self.size

    def append(
        self,
        parts: Sequence[bytes | memoryview],
        total: int,
        batches: Sequence[tuple[int, BatchHeader, int]],
        now_ms: int,
    ) -> None:
        """Write `parts` (total bytes) with one writev and index the batches.

        `batches` holds (position within the written bytes, header, assigned base offset).
        Not atomic by itself: if this raises (ENOSPC, EIO), the log or an index may hold part of
        it, and the caller undoes it with `rollback` to a `mark` taken before.
        """
        self.write_ahead(parts, total)
        self.add_written(total, batches, now_ms)

    def write_ahead(self, parts: Sequence[bytes | memoryview], total: int) -> None:
        """Write `parts` (total bytes) after the valid end, with no change readers see (size,
        indexes) until `add_written`; `discard_ahead` cuts them off instead (also after a raise)."""
        start = self.size
        fd = self.file.fileno()
        if len(parts) <= _IOV_MAX:
            written = os.pwritev(fd, parts, start)
        else:
            written = 0
        if written < total:
            # Short write (or too many iovecs): write the rest the slow way.
            rest = memoryview(b"".join(parts))[written:]
            while rest:
                n = os.pwrite(fd, rest, start + written)
                written += n
                rest = rest[n:]
        self.allocated = max(self.allocated, start + total)
        self.file.dirty = True  # an eviction fsyncs it (and keeps a failure for the owner's sync)

    def add_written(self, total: int, batches: Sequence[tuple[int, BatchHeader, int]], now_ms: int) -> None:
        """Take in the `total` bytes `write_ahead` wrote: the size moves past them, their batches
        are indexed (`batches` as for `append`)."""
        start = self.size
        if start == 0:
            self.rolling_base_ms = now_ms
        self.size = start + total
        self.file.dirty = True
        track = self._track
        for rel_pos, h, base in batches:
            track(start + rel_pos, h, base)

    def _final_time_entry(self, *, write_index: bool = True) -> None:
        """Make the time index end with the segment's max timestamp (done when sealing)."""
        if self.max_timestamp >= 0:
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp, write=write_index)

    def seal(self) -> None:
        """Stop being the active segment: add the final time-index entry. Does not fsync:
        the owner flushes sealed segments later (flush()) and recovers them until then."""
        if self.sealed:
            return
        self._final_time_entry()
        self._trim()
        self.sealed = True

    def _trim(self) -> None:
        """Cut preallocated zeros off the end of the file; the next flush makes that durable (a
        sealed segment's file size is what a restart reads)."""
        if self.allocated > self.size and not self.file.closed:
            os.ftruncate(self.file.fileno(), self.size)
            self.allocated = self.size
            self.dirty = True

    def preallocate(self, end: int) -> None:
        """Zero-fill ahead of byte `end` when preallocating and less than half the margin is left
        (an fdatasync follows, so the zeros and the file size are durable before they are used)."""
        ahead = min(max(end, _PREALLOCATE_MIN), _PREALLOCATE_MAX)
        if not self.config.preallocate or self.sealed or self.allocated - end >= ahead // 2:
            return
        target = min(end + ahead, max(self.config.segment_bytes, end))
        pos = self.allocated
        try:
            while pos < target:
                pos += os.pwrite(self.file.fileno(), _ZEROS[: min(len(_ZEROS), target - pos)], pos)
        except OSError as exc:
            # Only an optimisation: on a full disk appends extend the file as they go (and the
            # fdatasync persists the size too), rather than failing a commit that fits.
            log.debug("preallocating %s stopped at byte %d: %s", self.log_path, pos, exc)
        self.allocated = pos

    @property
    def needs_flush(self) -> bool:
        """True when the log, or (for a sealed segment) an index file, has unsynced writes."""
        if self.dirty:
            return True
        return self.sealed and (
            self.offset_index.dirty or self.time_index.dirty or self.offset_index.has_fd or self.time_index.has_fd
        )

    def flush(self, *, indexes: bool = False, extend: bool = True) -> None:
        """fsync the log; for sealed segments (or when asked) also fsync the index files.

        A sealed segment's index writers are closed once flushed (its indexes never change).
        An active preallocating segment first zero-fills ahead if needed (unless `extend` is
        False), so one fdatasync covers both.
        """
        file = self.file
        if (file.dirty or file.error is not None) and not file.closed:
            if extend and file.error is None:
                self.preallocate(self.size)
            file.sync()
        if self.sealed:
            self.offset_index.close()
            self.time_index.close()
        elif indexes:
            self.offset_index.flush()
            self.time_index.flush()

    def close(self) -> None:
        """Final time-index entry, flush everything and close the files for good."""
        if self.file.closed:
            return
        if not self.sealed:
            self._final_time_entry()
            self._trim()
        self.flush(indexes=True, extend=False)
        self.offset_index.close()
        self.time_index.close()
        self.file.close()

    def forget_files(self) -> None:
        """Close the three files for good without syncing them (they were swapped away or are
        about to be removed with their directory)."""
        self.file.close()
        self.offset_index.file.close()
        self.time_index.file.close()

    def delete(self) -> None:
        """Close and unlink the segment's three files."""
        self.file.close()
        self.offset_index.delete_file()
        self.time_index.delete_file()
        try:
            os.unlink(self.log_path)
        except FileNotFoundError:
            pass

    # ----------------------------------------------------------------- reads

    def last_modified_ms(self) -> int:
        """The .log file's mtime in ms (retention fallback when batches carry no timestamps)."""
        return os.stat(self.log_path).st_mtime_ns // 1_000_000

    @property
    def largest_timestamp(self) -> int:
        """Largest record timestamp, or the file's mtime when no batch has a timestamp."""
        return self.max_timestamp if self.max_timestamp >= 0 else self.last_modified_ms()

    def pread(self, n: int, pos: int) -> bytes:
        """Read up to n bytes at pos (never past the valid size)."""
        n = min(n, self.size - pos)
        if n <= 0:
            return b""
        return os.pread(self.file.fileno(), n, pos)

    def iter_headers(self, start: int = 0, chunk: int = _SCAN_CHUNK) -> Iterator[tuple[int, BatchHeader]]:
        """Yield (position, header) of each batch from `start` using `chunk`-sized preads; no CRC check."""
        pos = start
        end = self.size
        file = self.file  # asked for its descriptor per read: the caller may use the pool between yields
        while end - pos >= BATCH_HEADER_SIZE:
            buf = os.pread(file.fileno(), min(chunk, end - pos), pos)
            p = 0
            n = len(buf)
            if n < BATCH_HEADER_SIZE:
                return
            while n - p >= BATCH_HEADER_SIZE:
                h = BatchHeader(*_HEADER_UNPACK_FROM(buf, p))
                if h.batch_length < MIN_BATCH_LENGTH or pos + p + h.size > end:
                    return
                yield pos + p, h
                p += h.batch_length + LOG_OVERHEAD
            pos += p

    def find_batch(self, offset: int, start: int | None = None) -> int | None:
        """Position of the first batch whose last offset >= `offset`, None if past the end.

        Starts at the offset index's entry (or `start`) and hops over batch headers.
        """
        pos = self.offset_index.lookup(offset) if start is None else start
        end = self.size
        fd = self.file.fileno()  # no other pool call before this returns
        hop = _HOP_UNPACK_FROM
        while end - pos >= _HOP_SIZE:
            buf = os.pread(fd, min(_HOP_CHUNK, end - pos), pos)
            n = len(buf)
            p = 0
            while n - p >= _HOP_SIZE:
                base, length, last_delta = hop(buf, p)
                if base + last_delta >= offset:
                    return pos + p
                if length < MIN_BATCH_LENGTH:
                    return None
                p += LOG_OVERHEAD + length
            if p == 0:
                return None
            pos += p
        return None

    def header_at(self, pos: int) -> BatchHeader:
        """Parse the batch header stored at `pos`."""
        return parse_header(os.pread(self.file.fileno(), BATCH_HEADER_SIZE, pos))

    def last_boundary(self, start: int, limit: int) -> int:
        """Largest batch boundary b with start <= b <= limit (`start` must be a boundary).

        Jumps to the last indexed boundary <= limit, then hops batch lengths with small preads,
        so the caller can pread exactly the whole batches that fit (no copy, no decode).
        """
        limit = min(limit, self.size)
        pos = max(start, self.offset_index.floor_position(limit))
        fd = self.file.fileno()  # no other pool call before this returns
        lengths = _LENGTH_UNPACK_FROM
        while limit - pos >= LOG_OVERHEAD:
            buf = os.pread(fd, min(_HOP_CHUNK, limit - pos), pos)
            n = len(buf)
            q = 0
            while n - q >= LOG_OVERHEAD:
                length = lengths(buf, q + 8)[0]
                nxt = q + LOG_OVERHEAD + length
                if length < MIN_BATCH_LENGTH or pos + nxt > limit:
                    return pos + q
                q = nxt
            if q == 0:
                return pos
            pos += q
        return pos
