"""The `*.cleaned` segments one cleaning writes: the batches pass 2 (storage/compaction.py) keeps,
streamed into as few segments as `segment.bytes` allows, indexed and fsynced for the swap.

Surviving batches are written in order into the current output segment, and a new output segment
starts (based at the offset of the batch that starts it, which need not be a source segment's
base) when the next batch would overflow `segment.bytes` or the index's int32 relative offsets.
The first output keeps the log start offset as its base, even when it ends up empty (the log
start offset never moves); offsets of dropped records become gaps that reads skip. Indexes are
rebuilt with `index.interval.bytes`, and each new .log file gets the newest mtime of its sources
(the time-based retention fallback). Files are written as `<base>.log.cleaned` (+
`.index.cleaned`, `.timeindex.cleaned`) and fsynced, then `PartitionLog.replace_segments` swaps
them in crash-safely (storage/segment_swap.py).
"""

from __future__ import annotations

import os
from pathlib import Path

from offsetd.storage.cleaning_job import CleanerStats, SourceSegment
from offsetd.storage.file_pool import FilePool
from offsetd.storage.index import OffsetIndex, TimeIndex
from offsetd.storage.log_config import LogConfig
from offsetd.storage.segment import INDEX_SUFFIX, LOG_SUFFIX, TIMEINDEX_SUFFIX, segment_file_name
from offsetd.storage.segment_swap import CLEANED_SUFFIX

__all__ = ["CleanedSegment", "CleanedSegments"]

_INT32_MAX = 2**31 - 1
_WRITE_BUFFER = 4 << 20


def _cleaned_name(base: int, suffix: str) -> str:
    """The name of a cleaned segment's file before the swap: `<base><suffix>.cleaned`."""
    return segment_file_name(base, suffix) + CLEANED_SUFFIX


class CleanedSegment:
    """One cleaned segment being written: `<base>.log.cleaned` plus its two indexes."""

    def __init__(self, pdir: Path, base: int, config: LogConfig) -> None:
        self.pdir = pdir
        self.base = base
        self.log_path = pdir / _cleaned_name(base, LOG_SUFFIX)
        self.fd = os.open(self.log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        # The cleaner's thread must not share the owner thread's file pool: a pool of its own.
        files = FilePool(2)
        self.offset_index = OffsetIndex(pdir / _cleaned_name(base, INDEX_SUFFIX), base, files)
        self.time_index = TimeIndex(pdir / _cleaned_name(base, TIMEINDEX_SUFFIX), base, files)
        self.interval = config.index_interval_bytes
        self.size = 0
        self.parts: list[bytes | memoryview] = []
        self.buffered = 0
        self.bytes_since_index = 0
        self.max_ts = -1
        self.offset_of_max_ts = -1
        self.mtime_ns = 0
        self.batches = 0

    def add(self, parts: tuple, size: int, last_offset: int, max_ts: int) -> None:
        """Append one batch given as byte parts; index it as Segment._track does."""
        if max_ts > self.max_ts:
            self.max_ts = max_ts
            self.offset_of_max_ts = last_offset
        if self.bytes_since_index > self.interval:
            self.offset_index.append(last_offset, self.size, write=False)
            if self.max_ts >= 0:
                self.time_index.maybe_append(self.max_ts, self.offset_of_max_ts, write=False)
            self.bytes_since_index = 0
        self.bytes_since_index += size
        self.parts.extend(parts)
        self.size += size
        self.buffered += size
        self.batches += 1
        if self.buffered >= _WRITE_BUFFER:
            self._drain()

    def _drain(self) -> None:
        """Write the buffered batches."""
        if not self.parts:
            return
        view = memoryview(b"".join(self.parts))
        while view:
            view = view[os.write(self.fd, view) :]
        self.parts = []
        self.buffered = 0

    def finish(self) -> None:
        """Write the rest, fsync the log and both indexes, give the log its sources' mtime."""
        self._drain()
        os.fsync(self.fd)
        os.close(self.fd)
        self.fd = -1
        if self.max_ts >= 0:
            self.time_index.maybe_append(self.max_ts, self.offset_of_max_ts, write=False)
        for idx in (self.offset_index, self.time_index):
            idx.rewrite(fsync=True)
            idx.close()
        if self.mtime_ns:
            os.utime(self.log_path, ns=(self.mtime_ns, self.mtime_ns))

    def discard(self) -> None:
        """Close and delete this segment's files (a cleaning that failed or was abandoned)."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        self.offset_index.delete_file()
        self.time_index.delete_file()
        self.log_path.unlink(missing_ok=True)


class CleanedSegments:
    """The output segments of one cleaning, in log order (see the module docstring): where each
    batch goes, and the base offsets of the segments finished (`new_bases`)."""

    def __init__(self, pdir: Path, config: LogConfig, stats: CleanerStats) -> None:
        self.pdir = pdir
        self.config = config
        self.stats = stats
        self.segment_limit = min(config.segment_bytes, _INT32_MAX)
        self.src: SourceSegment | None = None
        self.outputs: list[CleanedSegment] = []
        self.out: CleanedSegment | None = None
        self.new_bases: list[int] = []

    def begin_source(self, src: SourceSegment) -> None:
        """The batches that follow come from `src` (its mtime is the output's, at the least)."""
        self.src = src
        if self.out is None and not self.outputs:
            # The first output keeps the log start offset as its base, even if it stays empty.
            self._open(src.base_offset)
        if self.out is not None:
            self.out.mtime_ns = max(self.out.mtime_ns, src.mtime_ns)

    def _open(self, base: int) -> None:
        """Start the output segment based at `base`."""
        out = self.out = CleanedSegment(self.pdir, base, self.config)
        out.mtime_ns = self.src.mtime_ns
        self.outputs.append(out)

    def add(self, parts: tuple, size: int, base_offset: int, last_offset: int, max_ts: int) -> None:
        """Append a batch to the current output, first starting a new output segment (based at
        this batch) when the batch would overflow segment.bytes or the int32 relative offsets."""
        out = self.out
        if (out.size > 0 and out.size + size > self.segment_limit) or last_offset - out.base > _INT32_MAX:
            self.close()
            self._open(base_offset)
            out = self.out
        out.add(parts, size, last_offset, max_ts)

    def close(self) -> None:
        """Finish the current output segment (fsynced) and count it."""
        out = self.out
        if out is None:
            return
        self.out = None
        out.finish()
        self.new_bases.append(out.base)
        self.stats.output_segments += 1
        self.stats.output_bytes += out.size
        self.stats.batches_written += out.batches

    def discard(self) -> None:
        """Delete every output segment written so far."""
        for out in self.outputs:
            out.discard()
        self.outputs = []
        self.out = None
