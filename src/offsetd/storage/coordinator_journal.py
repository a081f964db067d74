"""The coordinators' journal: one file in the log directory that makes the appends of every
coordinator partition durable with one fdatasync (group commit across partitions, issue 24).

A coordinator batch (`__consumer_offsets`, `__transaction_state`, `__share_group_state`) is written
to its segment as before, and a copy of it is appended to the journal; only the journal is
fdatasync'ed before the batch is acknowledged. One sequential write and one device flush serve
however many partitions a round wrote to (16 partitions on this project's VM: 0.16 ms for the
journal against 0.94 ms for 16 fdatasyncs at once, bench/fsync_shapes.py). The segments are
fsynced when the journal rolls to its next file (server/journal_commit.py) and when their logs are
flushed or closed; only then is the older file removed. At start-up, before the coordinators load
their partitions, `restore_journaled` appends to each log the journaled batches its active segment
lost (a power loss keeps only what was fsynced), and the files are removed (broker/topics.py).

A transaction's markers in data partitions are appended without an fsync, like the data, but the
transaction's next `__transaction_state` record must not be durable before them: each marker's
batch is journaled too, in the same round as its `__consumer_offsets` marker, and restored at
start-up into a data partition that lost it while its transaction is still open there.

Files: `coordinator-journal-<sequence, 20 digits>.log` in the log directory, zero-filled ahead of
their end (an fdatasync that need not persist a new file size is the cheap one). Where the file
system takes O_DIRECT, a round whose space is already zero-filled (and durable) is one O_DIRECT |
O_DSYNC write of whole 4 KiB blocks, from the start of the block the previous round ended in (that
block's bytes written again, unchanged) to the end of the round's entries, zeros after them: the
device writes it through, no page cache to flush and no separate fdatasync (server/journal_commit.py
submits it through native AIO). Either way the file's bytes are the same. An entry:
    length   int32   bytes after this field
    crc      uint32  zlib CRC-32 of the bytes after this field
    name     int16 length + UTF-8: the partition's directory name, e.g. `__consumer_offsets-7`
    batches  the append's record batches exactly as written to the segment (offsets assigned)
A zero length (the zero-filled tail), a short entry or a bad CRC ends the file.
"""

from __future__ import annotations

import ctypes
import errno
import logging
import mmap
import os
import struct
import zlib
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from offsetd.records.batch import InvalidBatch, parse_header
from offsetd.storage.durable_file import fsync_dir
from offsetd.storage.partition_log import PartitionLog
from offsetd.storage.producer_state import ProduceError

__all__ = ["JournalFile", "JournalEntries", "encode_entry", "journal_paths", "next_sequence", "read_journals",
           "restore_journaled"]

log = logging.getLogger("offsetd.storage")

PREFIX = "coordinator-journal-"
SUFFIX = ".log"
_HEAD = struct.Struct(">iIh")  # length, crc, name length
_ZEROS = bytes(1 << 20)
#: Zero-fill this much ahead of the write position once less than half of it is left.
RESERVE_BYTES = 4 << 20
#: The unit of an O_DIRECT write (and its alignment in memory and in the file).
BLOCK = 4096

JournalEntries = dict[str, list[bytes]]
"""Per partition directory name, the journaled appends in order (each one or more batches)."""


def encode_entry(name: bytes, parts: Sequence[bytes | memoryview]) -> bytes:
    """One journal entry for an append of `parts` (its batches as written) to partition `name`
    (the batches copied once: the CRC runs over the pieces)."""
    crc = zlib.crc32(name, zlib.crc32(struct.pack(">h", len(name))))  # of the name length on
    size = len(name)
    for part in parts:
        crc = zlib.crc32(part, crc)
        size += len(part)
    return b"".join((_HEAD.pack(size + 6, crc, len(name)), name, *parts))


def _decode(data: bytes) -> Iterable[tuple[str, bytes]]:
    """(name, batches) of each whole, intact entry of one file, up to the first that is not."""
    pos, end = 0, len(data)
    while pos + _HEAD.size <= end:
        length, crc, name_len = _HEAD.unpack_from(data, pos)
        stop = pos + 4 + length
        if length <= 6 or stop > end or name_len < 0 or 10 + name_len > 4 + length:
            return
        if zlib.crc32(memoryview(data)[pos + 8:stop]) != crc:
            return
        name_end = pos + 10 + name_len
        yield data[pos + 10:name_end].decode("utf-8", "replace"), data[name_end:stop]
        pos = stop


def journal_paths(root: Path) -> list[Path]:
    """The journal files in `root`, oldest first."""
    try:
        names = os.listdir(root)
    except FileNotFoundError:
        return []
    return sorted(root / n for n in names if n.startswith(PREFIX) and n.endswith(SUFFIX))


def next_sequence(root: Path) -> int:
    """The sequence number of the next journal file in `root`."""
    numbers = [int(p.name[len(PREFIX):-len(SUFFIX)]) for p in journal_paths(root)
               if p.name[len(PREFIX):-len(SUFFIX)].isdigit()]
    return max(numbers, default=0) + 1


def read_journals(paths: Sequence[Path]) -> JournalEntries:
    """Every partition's journaled appends, oldest first. An append at an offset an earlier one of
    its partition already covered replaces that one and what followed it (the earlier one was cut
    off from its log, never acknowledged, and its offsets were written again)."""
    entries: JournalEntries = {}
    for path in paths:
        for name, batches in _decode(path.read_bytes()):
            kept = entries.setdefault(name, [])
            first = parse_header(batches, 0).base_offset
            while kept and _next_offset(kept[-1]) > first:
                kept.pop()
            kept.append(batches)
    return entries


def _next_offset(batches: bytes) -> int:
    """The offset after the last batch of an append."""
    pos, header = 0, parse_header(batches, 0)
    while pos + header.size < len(batches):
        pos += header.size
        header = parse_header(batches, pos)
    return header.last_offset + 1


def restore_journaled(logs: Mapping[str, PartitionLog], entries: JournalEntries, now_ms: int,
                      data: Mapping[str, PartitionLog] | None = None) -> int:
    """Append to each coordinator log (`logs`) the journaled appends past its end (a power loss
    cut them off its active segment), with their own offsets, and to each data partition (`data`)
    its journaled transaction markers past its end; then fsync it. Returns how many were appended."""
    restored = 0
    for name, appends in entries.items():
        plog = logs.get(name)
        if plog is None:
            marked = data.get(name) if data is not None else None
            if marked is not None:
                restored += _restore_markers(marked, name, appends, now_ms)
                continue
            log.warning("coordinator journal: %d append(s) to %s, which is not a log here; dropped",
                        len(appends), name)
            continue
        missing = [b for b in appends if parse_header(b, 0).base_offset >= plog.log_end_offset]
        if missing and parse_header(missing[0], 0).base_offset > plog.log_end_offset:
            # A log shorter than anything the journal covers was changed outside the broker
            # (its directory removed or replaced while it was stopped): leave it as it is.
            log.warning("coordinator journal: %s ends at %d, its journaled appends start at %d; not restored",
                        name, plog.log_end_offset, parse_header(missing[0], 0).base_offset)
            continue
        count = 0
        for batches in missing:
            prepared = plog.prepare_append(batches, replica=True)
            plog.apply_append(prepared, now_ms)  # type: ignore[arg-type]
            count += 1
        if count:
            plog.flush()
            log.info("%s: %d append(s) restored from the coordinator journal, log end %d", name, count,
                     plog.log_end_offset)
            restored += count
    return restored


class JournalFile:
    """One journal file being written: appends at its end into zero-filled space (`reserve`);
    `direct`: it also has an O_DIRECT | O_DSYNC descriptor for `stage`d rounds."""

    def __init__(self, root: Path, sequence: int, direct: bool = False) -> None:
        self.path = root / f"{PREFIX}{sequence:020d}{SUFFIX}"
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o644)
        self.position = 0  # where the next entry goes
        self.allocated = 0  # zero-filled up to here
        self._direct_fd = -1
        self._tail = b""  # the bytes of the block the position is in, before the position
        self._buffer: mmap.mmap | None = None  # page-aligned memory of the staged round
        self._pin: ctypes.c_char | None = None  # holds the buffer's address (and the buffer open)
        self.address = 0
        try:
            self.reserve(0)
            os.fdatasync(self._fd)
            fsync_dir(root)
            if direct:
                self._open_direct()
        except OSError:
            self.remove()
            raise

    def _open_direct(self) -> None:
        try:
            self._direct_fd = os.open(self.path, os.O_WRONLY | os.O_DIRECT | os.O_DSYNC  # type: ignore[attr-defined]
                                      | getattr(os, "O_CLOEXEC", 0))
        except OSError as exc:
            if exc.errno != errno.EINVAL:  # EINVAL: a file system without O_DIRECT; written as before
                raise

    @property
    def direct(self) -> bool:
        return self._direct_fd >= 0

    def fileno(self) -> int:
        return self._fd

    def direct_fileno(self) -> int:
        return self._direct_fd

    def reserve(self, size: int) -> bool:
        """Make sure `size` bytes past the position are zero-filled (raises OSError, e.g. a full
        disk, having written nothing of an entry). True when it zero-filled more: the file's new
        length (and its blocks) become durable with the next fdatasync, so that round must take one."""
        if self.allocated - self.position >= size + RESERVE_BYTES // 2:
            return False
        target = self.position + size + RESERVE_BYTES
        while self.allocated < target:
            self.allocated += os.pwrite(self._fd, _ZEROS[:min(len(_ZEROS), target - self.allocated)], self.allocated)
        return True

    def write(self, data: bytes) -> None:
        """Write entries at the position (reserved first: `reserve(len(data))`)."""
        view, pos = memoryview(data), 0
        while pos < len(data):
            pos += os.pwrite(self._fd, view[pos:], self.position + pos)
        self._advance(data)

    def stage(self, data: bytes) -> tuple[int, int, int]:
        """Entries for one O_DIRECT write, reserved first: (address, length, file offset) of whole
        blocks in the aligned buffer, from the start of the position's block (its bytes again) to
        past `data`, zeros after it. The buffer must stay as it is until that write completes."""
        tail = self._tail
        start = self.position - len(tail)
        end = len(tail) + len(data)
        length = -(-end // BLOCK) * BLOCK
        buffer = self._buffer
        if buffer is None or len(buffer) < length:
            buffer = self._grow(length)
        buffer[:len(tail)] = tail
        buffer[len(tail):end] = data
        buffer[end:length] = bytes(length - end)
        self._advance(data)
        return self.address, length, start

    def staged(self, length: int) -> memoryview:
        """The write `stage` made ready: the first `length` bytes of the aligned buffer."""
        assert self._buffer is not None and len(self._buffer) >= length
        return memoryview(self._buffer)[:length]

    def write_staged(self, length: int, offset: int) -> None:
        """Write what `stage` made ready through the page cache instead (the same bytes: the
        block's earlier bytes, the entries, zeros)."""
        with self.staged(length) as view:
            done = 0
            while done < length:
                done += os.pwrite(self._fd, view[done:], offset + done)

    def _grow(self, length: int) -> mmap.mmap:
        """A larger buffer (at least doubled: rounds that grow a little at a time map it rarely)."""
        size = max(length, 16 * BLOCK, 2 * len(self._buffer) if self._buffer is not None else 0)
        self._release_buffer()
        self._buffer = buffer = mmap.mmap(-1, size)
        self._pin = ctypes.c_char.from_buffer(buffer)
        self.address = ctypes.addressof(self._pin)
        return buffer

    def _advance(self, data: bytes) -> None:
        """The position past `data`, and the bytes of its block before it."""
        self.position += len(data)
        into = self.position % BLOCK
        if not into:
            self._tail = b""
        elif len(data) >= into:
            self._tail = bytes(data[len(data) - into:])
        else:
            self._tail = self._tail[len(self._tail) + len(data) - into:] + data

    def _release_buffer(self) -> None:
        self._pin = None
        if self._buffer is not None:
            self._buffer.close()
            self._buffer = None

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        if self._direct_fd >= 0:
            os.close(self._direct_fd)
            self._direct_fd = -1
        self._release_buffer()

    def remove(self) -> None:
        """Close and delete the file (every append in it is durable in its segment by now)."""
        self.close()
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass


def _restore_markers(plog: PartitionLog, name: str, markers: list[bytes], now_ms: int) -> int:
    """Append a data partition's journaled transaction markers that are past its end (a power
    loss cut them off with what followed them) and whose producer has a transaction open there,
    as a leader appends: at their own offsets, or, where the data before them was lost too, at the
    log's end. A marker missing would leave its transaction open for good, every read_committed
    reader of the partition held at its start. A marker with nothing left to close (its
    transaction's records were lost too, or the topic was made again under the same name) is
    skipped, as is one the producer state refuses."""
    count = 0
    for batches in markers:
        header = parse_header(batches, 0)
        if header.base_offset < plog.log_end_offset or plog.ongoing_transaction(header.producer_id) is None:
            continue  # still in the log, or nothing to close
        try:
            plog.append(batches, now_ms, [header])
        except (ProduceError, InvalidBatch) as exc:
            log.warning("%s: journaled transaction marker at offset %d not restored: %s", name,
                        header.base_offset, exc)
            continue
        count += 1
    if count:
        plog.flush()
        log.info("%s: %d transaction marker(s) restored from the coordinator journal, log end %d", name, count,
                 plog.log_end_offset)
    return count
