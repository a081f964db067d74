"""Stored batches handed out as file ranges instead of bytes, for zero-copy Fetch responses.

A Fetch of v4+ lays these out in its response by length only (protocol.encoder) and the connection
sends them with sendfile(2) straight from the page cache (server/connection.py), so record bytes
never pass through Python buffers. Each range holds a descriptor of its own (an os.dup of the
segment's, taken from the file pool right when the range is read, storage/file_pool.py), so a
pool that closes the segment's descriptor to make room never breaks a send, and a segment that
retention deletes, the cleaner replaces or a truncation unlinks while the response waits in line
or is being sent still reads as it did when the fetch read it: the inode lives until the last
descriptor is closed.

The descriptors held at once are capped at a quarter of RLIMIT_NOFILE (`FileRecords.hold` says
None beyond it, and the caller reads bytes instead), so responses waiting on slow consumers can
never take the descriptors a segment roll, an index or a new connection needs.
"""

from __future__ import annotations

import os
from typing import Protocol

from offsetd.storage.file_pool import open_file_limit

__all__ = ["FileRecords"]


class _FileLike(Protocol):
    """Anything that gives a descriptor valid until the next call elsewhere (a PooledFile)."""

    def fileno(self) -> int: ...


def descriptor_budget(limit: int) -> int:
    """A quarter of a process limit of `limit` descriptors (at least 16)."""
    return max(16, limit // 4)


class FileRecords:
    """Whole batches as (own fd, position, length) ranges of segment files, in log order.

    `len()` is the byte count (what the response frames); `read()` gives the bytes (for a
    connection that cannot sendfile); `close()` releases the descriptors, which also happens
    when the object is dropped unsent (a long poll's earlier pass, a closed connection)."""

    __slots__ = ("ranges", "size")

    held = 0  # descriptors held by all FileRecords not yet closed
    budget = descriptor_budget(open_file_limit())  # server start-up sets it again after raising the limit

    def __init__(self, ranges: list[tuple[int, int, int]]) -> None:
        """Take ownership of `ranges`' descriptors (see `hold` for dup'ing a file's own)."""
        self.ranges = ranges
        self.size = sum(r[2] for r in ranges)
        FileRecords.held += len(ranges)

    @classmethod
    def hold(cls, ranges: "list[tuple[_FileLike, int, int]]") -> "FileRecords | None":
        """FileRecords over (file, position, length) ranges of files owned elsewhere (a
        segment's), each file's descriptor dup'd as soon as it is asked for (the next file's may
        close it); None when that would pass the budget or dup fails (EMFILE)."""
        if cls.held + len(ranges) > cls.budget:
            return None
        own: list[tuple[int, int, int]] = []
        try:
            for file, pos, length in ranges:
                own.append((os.dup(file.fileno()), pos, length))
        except OSError:
            for fd, _, _ in own:
                os.close(fd)
            return None
        return cls(own)

    def __len__(self) -> int:
        return self.size

    def __repr__(self) -> str:
        return f"FileRecords({self.size} bytes in {len(self.ranges)} ranges)"

    def read(self) -> bytes:
        """The bytes of every range, read with pread; OSError if a range comes back short
        (the file was cut under us: the length already framed cannot be honoured)."""
        out = []
        for fd, pos, length in self.ranges:
            data = os.pread(fd, length, pos)
            if len(data) != length:
                raise OSError(f"segment file shrank under a fetch: {len(data)} of {length} bytes at {pos}")
            out.append(data)
        return out[0] if len(out) == 1 else b"".join(out)

    def close(self) -> None:
        """Close the descriptors (idempotent)."""
        ranges, self.ranges = self.ranges, []
        FileRecords.held -= len(ranges)
        for fd, _, _ in ranges:
            os.close(fd)

    def __del__(self) -> None:
        if self.ranges:
            self.close()
