"""Stored batches handed out as file ranges instead of bytes, for zero-copy Fetch responses.

A Fetch of v4+ lays these out in its response by length only (protocol.codec) and the connection
sends them with sendfile(2) straight from the page cache (server/connection.py), so record bytes
never pass through Python buffers. Each range holds a descriptor of its own (os.dup of the
segment's), so a segment that retention deletes, the cleaner replaces or a truncation unlinks
while the response waits in line or is being sent still reads as it did when the fetch read it:
the inode lives until the last descriptor is closed.
"""

from __future__ import annotations

import os

__all__ = ["FileRecords"]


class FileRecords:
    """Whole batches as (own fd, position, length) ranges of segment files, in log order.

    `len()` is the byte count (what the response frames); `read()` gives the bytes (for a
    connection that cannot sendfile); `close()` releases the descriptors, which also happens
    when the object is dropped unsent (a long poll's earlier pass, a closed connection)."""

    __slots__ = ("ranges", "size")

    def __init__(self, ranges: list[tuple[int, int, int]]) -> None:
        self.ranges = ranges
        self.size = sum(r[2] for r in ranges)

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
        for fd, _, _ in ranges:
            os.close(fd)

    def __del__(self) -> None:
        if self.ranges:
            self.close()
