"""Kafka's sparse segment indexes: the offset index (.index) and the time index (.timeindex).

Both are flat files of fixed-size big-endian entries, appended with ordinary writes (no mmap,
no preallocation, so the file length is always entries * entry size):

    .index      8 bytes/entry:  relativeOffset int32, position int32
                relativeOffset = (last offset of the batch at `position`) - segment base offset;
                `position` is the byte position of that batch in the .log file.
    .timeindex  12 bytes/entry: timestamp int64, relativeOffset int32
                timestamp = segment max timestamp so far (strictly increasing between entries);
                relativeOffset = last offset of the batch that first reached it - base offset.

The entries are also held in memory (compact `array`s) and looked up with bisect.
An index is an accelerator only: any entry just needs to name a batch boundary whose batch
ends at or before the entry's offset, so a short (lagging) index is still correct.
"""

from __future__ import annotations

import operator
import os
import struct
import sys
from array import array
from bisect import bisect_right
from pathlib import Path

from offsetd.storage.file_pool import FilePool, PooledFile

__all__ = ["OffsetIndex", "TimeIndex"]

_BIG_ENDIAN_HOST = sys.byteorder == "big"
_OFFSET_ENTRY = struct.Struct(">ii")  # relativeOffset, position
_TIME_ENTRY = struct.Struct(">qi")  # timestamp, relativeOffset
_INT32_MAX = 2**31 - 1


def _strictly_increasing(a: array) -> bool:
    """True when every element is larger than the previous one (C-speed via map)."""
    return all(map(operator.lt, a, a[1:]))


def _non_decreasing(a: array) -> bool:
    """True when no element is smaller than the previous one."""
    return all(map(operator.le, a, a[1:]))


class _IndexFile:
    """Shared file handling: an append descriptor from the file pool, full rewrite, fsync, delete."""

    ENTRY_SIZE = 0

    def __init__(self, path: Path, base_offset: int, pool: FilePool | None = None) -> None:
        self.path = path
        self.base_offset = base_offset
        # Opened on the first write (created then); reopened on demand after the pool closed it.
        self.file = PooledFile(path, os.O_RDWR | os.O_APPEND, pool)

    @property
    def dirty(self) -> bool:
        """True when the file has writes not yet fsynced."""
        return self.file.dirty

    def _write(self, data: bytes) -> None:
        if not data:
            return
        f = self.file
        view = memoryview(data)
        while view:
            n = os.write(f.fileno(), view)
            view = view[n:]
        f.dirty = True

    def _entries_bytes(self) -> bytes:
        raise NotImplementedError

    def rewrite(self, *, fsync: bool) -> None:
        """Replace the file content with the in-memory entries."""
        os.ftruncate(self.file.fileno(), 0)
        self._write(self._entries_bytes())
        if fsync:
            self.file.dirty = True  # the new length is made durable too
            self.flush()

    def _drop_from(self, count: int) -> None:
        raise NotImplementedError

    def truncate_entries(self, count: int) -> None:
        """Forget the entries from `count` on, in memory and in the file (the undo of a failed
        append). Memory first: if the file cannot be cut, the index is still a valid prefix in
        memory, and a file of the wrong length is rebuilt when the segment is next opened."""
        self._drop_from(count)
        if self.file.created:  # written by us, so it may hold the entries dropped
            os.ftruncate(self.file.fileno(), count * self.ENTRY_SIZE)
            self.file.dirty = True

    @property
    def has_fd(self) -> bool:
        """True while the file is open for appends."""
        return self.file.is_open

    def flush(self) -> None:
        """fsync the index file if it has unflushed writes."""
        self.file.sync()

    def close(self) -> None:
        """Flush and close the file descriptor (entries stay in memory; a later write reopens)."""
        self.file.release()

    def delete_file(self) -> None:
        """Close and unlink the file."""
        self.file.close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass

    @classmethod
    def _read_file(cls, path: Path) -> bytes | None:
        try:
            with open(path, "rb") as f:
                return f.read()
        except FileNotFoundError:
            return None

    @classmethod
    def _read_entries(cls, path: Path) -> tuple[bytes, str | None]:
        """The file's bytes, and why they cannot be an index of ENTRY_SIZE entries (or None)."""
        data = cls._read_file(path)
        if data is None:
            return b"", "missing"
        if len(data) % cls.ENTRY_SIZE:  # type: ignore[attr-defined]
            return b"", f"size {len(data)} is not a multiple of {cls.ENTRY_SIZE}"  # type: ignore[attr-defined]
        return data, None


class OffsetIndex(_IndexFile):
    """Sparse offset → file position index of one segment (.index file)."""

    ENTRY_SIZE = 8

    def __init__(self, path: Path, base_offset: int, pool: FilePool | None = None) -> None:
        super().__init__(path, base_offset, pool)
        self._rel = array("i")  # relative offsets (last offset of the indexed batch)
        self._pos = array("i")  # byte positions in the .log

    def __len__(self) -> int:
        return len(self._rel)

    @classmethod
    def load(cls, path: Path, base_offset: int) -> tuple["OffsetIndex", str | None]:
        """Read an existing .index file; return (index, problem) where problem explains a bad file."""
        idx = cls(path, base_offset)
        data, problem = cls._read_entries(path)
        if problem:
            return idx, problem
        flat = array("i")
        flat.frombytes(data)
        if not _BIG_ENDIAN_HOST:
            flat.byteswap()
        idx._rel = flat[0::2]
        idx._pos = flat[1::2]
        return idx, None

    def sanity_problem(self, log_size: int, max_relative_offset: int | None) -> str | None:
        """Describe why the entries cannot be trusted for a log of `log_size` bytes, or None."""
        if not self._rel:
            return None
        if self._rel[0] < 0 or self._pos[0] < 0:
            return "negative entry"
        if not _strictly_increasing(self._rel) or not _strictly_increasing(self._pos):
            return "entries not increasing"
        if self._pos[-1] >= log_size:
            return f"last position {self._pos[-1]} beyond log size {log_size}"
        if max_relative_offset is not None and self._rel[-1] > max_relative_offset:
            return f"last relative offset {self._rel[-1]} beyond segment end"
        return None

    def append(self, offset: int, position: int, *, write: bool = True) -> None:
        """Add an entry for the batch ending at `offset` that starts at byte `position`.

        With write=False only memory is updated (a rebuild writes the file once via rewrite()).
        """
        rel = offset - self.base_offset
        if self._rel and rel <= self._rel[-1]:
            return  # never write a non-increasing entry
        self._rel.append(rel)
        self._pos.append(position)
        if write:
            self._write(_OFFSET_ENTRY.pack(rel, position))

    def _drop_from(self, count: int) -> None:
        del self._rel[count:]
        del self._pos[count:]

    def set_entries(self, entries: list[tuple[int, int]]) -> None:
        """Replace the in-memory entries with (absolute last offset, position) pairs."""
        base = self.base_offset
        self._rel = array("i", [o - base for o, _ in entries])
        self._pos = array("i", [p for _, p in entries])

    def _entries_bytes(self) -> bytes:
        flat = array("i", bytes(8 * len(self._rel)))
        flat[0::2] = self._rel
        flat[1::2] = self._pos
        if not _BIG_ENDIAN_HOST:
            flat.byteswap()
        return flat.tobytes()

    def lookup(self, offset: int) -> int:
        """Byte position from which to scan for `offset` (a batch boundary at or before it)."""
        i = bisect_right(self._rel, offset - self.base_offset) - 1
        return self._pos[i] if i >= 0 else 0

    def floor_position(self, position: int) -> int:
        """Largest indexed batch boundary <= `position` (0 when none)."""
        i = bisect_right(self._pos, position) - 1
        return self._pos[i] if i >= 0 else 0

    def entries(self) -> list[tuple[int, int]]:
        """All entries as (absolute offset, position), for tests and tools."""
        base = self.base_offset
        return [(r + base, p) for r, p in zip(self._rel, self._pos)]


class TimeIndex(_IndexFile):
    """Sparse timestamp → offset index of one segment (.timeindex file)."""

    ENTRY_SIZE = 12

    def __init__(self, path: Path, base_offset: int, pool: FilePool | None = None) -> None:
        super().__init__(path, base_offset, pool)
        self._ts = array("q")  # timestamps, strictly increasing
        self._rel = array("i")  # relative offsets, non-decreasing

    def __len__(self) -> int:
        return len(self._ts)

    @classmethod
    def load(cls, path: Path, base_offset: int) -> tuple["TimeIndex", str | None]:
        """Read an existing .timeindex file; return (index, problem) where problem explains a bad file."""
        idx = cls(path, base_offset)
        data, problem = cls._read_entries(path)
        if problem:
            return idx, problem
        pairs = list(_TIME_ENTRY.iter_unpack(data))
        idx._ts = array("q", [t for t, _ in pairs])
        idx._rel = array("i", [r for _, r in pairs])
        return idx, None

    def sanity_problem(self, max_relative_offset: int | None) -> str | None:
        """Describe why the entries cannot be trusted, or None."""
        if not self._ts:
            return None
        if self._rel[0] < 0:
            return "negative relative offset"
        if not _strictly_increasing(self._ts) or not _non_decreasing(self._rel):
            return "entries not increasing"
        if max_relative_offset is not None and self._rel[-1] > max_relative_offset:
            return f"last relative offset {self._rel[-1]} beyond segment end"
        return None

    def maybe_append(self, timestamp: int, offset: int, *, write: bool = True) -> None:
        """Add (timestamp, offset) unless it does not raise the last entry's timestamp."""
        if self._ts and timestamp <= self._ts[-1]:
            return
        rel = offset - self.base_offset
        if self._rel and rel < self._rel[-1]:
            return
        self._ts.append(timestamp)
        self._rel.append(rel)
        if write:
            self._write(_TIME_ENTRY.pack(timestamp, rel))

    def _drop_from(self, count: int) -> None:
        del self._ts[count:]
        del self._rel[count:]

    def set_entries(self, entries: list[tuple[int, int]]) -> None:
        """Replace the in-memory entries with (timestamp, absolute offset) pairs."""
        base = self.base_offset
        self._ts = array("q", [t for t, _ in entries])
        self._rel = array("i", [o - base for _, o in entries])

    def _entries_bytes(self) -> bytes:
        pack = _TIME_ENTRY.pack
        return b"".join(pack(t, r) for t, r in zip(self._ts, self._rel))

    def lookup(self, timestamp: int) -> int | None:
        """Offset of the last entry with timestamp <= `timestamp`, or None when there is none."""
        i = bisect_right(self._ts, timestamp) - 1
        return self._rel[i] + self.base_offset if i >= 0 else None

    def last_entry(self) -> tuple[int, int] | None:
        """(timestamp, absolute offset) of the last entry, or None when empty."""
        if not self._ts:
            return None
        return self._ts[-1], self._rel[-1] + self.base_offset

    def entries(self) -> list[tuple[int, int]]:
        """All entries as (timestamp, absolute offset), for tests and tools."""
        base = self.base_offset
        return [(t, r + base) for t, r in zip(self._ts, self._rel)]
