"""A bounded pool of open segment and index files: descriptors are opened on demand and the least
recently used one is closed when the pool is full, so a broker with 100,000 partitions holds at
most `log.max.open.files` descriptors for them and idle partitions hold none.

A `PooledFile` names a file and is asked for its descriptor right before each system call
(`os.pread(f.fileno(), ...)`): an O(1) lookup that also marks it most recently used, reopening
the file when it was closed to make room. Nothing may keep a pooled descriptor across another
pool call; a zero-copy send keeps an `os.dup` of its own (storage/file_records.py).

Durability: a file with writes not yet fsynced is marked `dirty` by its owner. Closing a
descriptor loses nothing (the data stays in the page cache), but a failed writeback would then be
reported to nobody, so the pool fdatasyncs a dirty file before closing it. If that fails the error
is kept and raised by the owner's next `sync()`, which is where the owner learns that data it
meant to make durable may be lost (storage/log_dir.py then takes the directory offline).

One pool per process (`SHARED`, sized at start-up from RLIMIT_NOFILE, as the limit is per
process); used only by the thread that owns the logs (the event loop). The cleaner's worker
thread opens its few files itself. Synchronous file I/O only; no clock.
"""

from __future__ import annotations

import errno
import logging
import os
import resource
from collections import OrderedDict
from pathlib import Path

__all__ = ["FilePool", "PooledFile", "SHARED", "open_file_limit", "raise_open_file_limit", "default_capacity"]

log = logging.getLogger("offsetd.storage")


def _sync(fd: int) -> None:
    """fdatasync where available (enough for written data and the file's length), else fsync."""
    getattr(os, "fdatasync", os.fsync)(fd)


# When opening fails for want of descriptors, this share of the pool is closed before one retry.
_EMFILE_SHED = 4


class FilePool:
    """Open descriptors of `PooledFile`s, at most `capacity`, least recently used closed first."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"a file pool needs room for at least one file, not {capacity}")
        self.capacity = capacity
        self._lru: OrderedDict[PooledFile, None] = OrderedDict()
        self.opens = 0  # files opened (first opens and reopens), for tests and diagnostics
        self.evictions = 0  # files closed to make room

    def __len__(self) -> int:
        return len(self._lru)

    def resize(self, capacity: int) -> None:
        """Set a new capacity, closing the least recently used files beyond it."""
        if capacity < 1:
            raise ValueError(f"a file pool needs room for at least one file, not {capacity}")
        self.capacity = capacity
        while len(self._lru) > capacity:
            self._evict()

    def _open(self, f: PooledFile) -> int:
        """Open `f` (making room first) and make it the most recently used."""
        if f.closed:
            raise ValueError(f"{f.path} was closed for good")
        while len(self._lru) >= self.capacity:
            self._evict()
        flags = f.flags if f.created else f.flags | os.O_CREAT
        try:
            fd = os.open(f.path, flags, 0o644)
        except OSError as exc:
            if exc.errno not in (errno.EMFILE, errno.ENFILE) or not self._lru:
                raise
            # Descriptors ran out elsewhere (connections, sends in flight): give some back, retry once.
            for _ in range(max(1, len(self._lru) // _EMFILE_SHED)):
                self._evict()
            fd = os.open(f.path, flags, 0o644)
        f.fd = fd
        f.created = True
        self._lru[f] = None
        self.opens += 1
        return fd

    def _evict(self) -> None:
        """Close the least recently used file, fdatasyncing it first when it is dirty."""
        f, _ = self._lru.popitem(last=False)
        self.evictions += 1
        f._close_fd()

    def _forget(self, f: PooledFile) -> None:
        """Drop `f` from the pool (its owner closes the descriptor)."""
        self._lru.pop(f, None)

    def close_all(self) -> None:
        """Close every open file (syncing dirty ones): what a test's clean shutdown may want."""
        while self._lru:
            self._evict()


class PooledFile:
    """One segment or index file the pool opens on demand: path, open flags, dirty state."""

    __slots__ = ("path", "flags", "pool", "fd", "created", "dirty", "closed", "error")

    def __init__(self, path: Path, flags: int, pool: FilePool | None = None) -> None:
        """`flags` are used for every open; O_CREAT is added until the file has been opened once
        (or its owner sets `created`: it exists already), so a file deleted under us is never
        silently recreated."""
        self.path = path
        self.flags = flags
        self.pool = pool if pool is not None else SHARED
        self.fd = -1
        self.created = False
        self.dirty = False  # written since the last fsync (set by the owner)
        self.closed = False  # close() ran: never opened again
        self.error: OSError | None = None  # a failed fsync before an eviction, for sync() to raise

    def __repr__(self) -> str:
        return f"PooledFile({self.path.name}, fd={self.fd}{', dirty' if self.dirty else ''})"

    def fileno(self) -> int:
        """The open descriptor (opened now if needed), valid until the next pool call."""
        fd = self.fd
        if fd >= 0:
            self.pool._lru.move_to_end(self)
            return fd
        return self.pool._open(self)

    @property
    def is_open(self) -> bool:
        """True while a descriptor is held (it may be closed at any pool call)."""
        return self.fd >= 0

    def sync(self) -> None:
        """fdatasync when dirty; raises what a sync before an eviction met (then stays dirty)."""
        if self.error is not None:
            exc, self.error = self.error, None
            raise exc
        if self.dirty:
            _sync(self.fileno())
            self.dirty = False

    def release(self) -> None:
        """Sync when dirty (or raise what a sync at eviction met) and close the descriptor now;
        the file may be opened again later."""
        self.sync()
        if self.fd >= 0:
            self.pool._forget(self)
            self._close_fd()

    def close(self) -> None:
        """Close the descriptor without syncing and never open the file again (it is deleted,
        renamed, or its owner synced it and is done)."""
        self.closed = True
        if self.fd >= 0:
            self.pool._forget(self)
            fd, self.fd = self.fd, -1
            os.close(fd)

    def _close_fd(self) -> None:
        """Close the descriptor after an fdatasync when dirty; a failed sync is kept in `error`."""
        fd, self.fd = self.fd, -1
        if self.dirty:
            try:
                _sync(fd)
                self.dirty = False
            except OSError as exc:
                log.error("%s: fsync before closing it failed: %s", self.path, exc)
                self.error = exc
        os.close(fd)


def open_file_limit() -> int:
    """The soft RLIMIT_NOFILE (2**20 when unlimited)."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return (1 << 20) if soft == resource.RLIM_INFINITY else soft


def raise_open_file_limit() -> int:
    """Raise the soft RLIMIT_NOFILE to the hard limit (where allowed); the soft limit now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError) as exc:
            log.warning("could not raise the open-file limit from %d to %d: %s", soft, hard, exc)
    return open_file_limit()


def default_capacity(limit: int) -> int:
    """The pool's share of a process limit of `limit` descriptors: half of it (a quarter goes to
    zero-copy sends, the rest to connections, the cleaner and everything else), at least 16."""
    return max(16, limit // 2)


SHARED = FilePool(default_capacity(open_file_limit()))
"""The process's pool; server start-up resizes it (`log.max.open.files`)."""
