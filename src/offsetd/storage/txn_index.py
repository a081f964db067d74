"""Kafka's aborted-transaction index: `<20-digit base>.txnindex` beside each segment (reference A9).

Each file lists the transactions aborted by an ABORT marker stored in its segment, in marker
order. Entry (34 bytes, big-endian):

    @0  version           int16  0
    @2  producerId        int64
    @10 firstOffset       int64  the transaction's first offset
    @18 lastOffset        int64  the ABORT marker's offset
    @26 lastStableOffset  int64  the LSO right after the abort

Aborts are rare, so every entry is appended and fsynced at once, and the entries of all segments
are kept in memory by storage/transactions.py.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

from offsetd.storage.durable_file import fsync_dir
from offsetd.storage.producer_state import AbortedTxn

__all__ = ["TXNINDEX_SUFFIX", "ENTRY_SIZE", "encode_entries", "decode_entries", "read_index",
           "append_entry", "write_index", "index_path"]

TXNINDEX_SUFFIX = ".txnindex"
_ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = _ENTRY.size
assert ENTRY_SIZE == 34
_VERSION = 0


def index_path(directory: Path, base_offset: int) -> Path:
    """The `.txnindex` file of the segment starting at `base_offset`."""
    return directory / f"{base_offset:020d}{TXNINDEX_SUFFIX}"


def encode_entries(entries: list[AbortedTxn]) -> bytes:
    """The bytes of a `.txnindex` file holding `entries`."""
    return b"".join(
        _ENTRY.pack(_VERSION, e.producer_id, e.first_offset, e.last_offset, e.last_stable_offset) for e in entries
    )


def decode_entries(data: bytes) -> list[AbortedTxn]:
    """The entries of a `.txnindex` file; a torn last entry or an unknown version ends the list."""
    out = []
    for pos in range(0, len(data) - ENTRY_SIZE + 1, ENTRY_SIZE):
        version, pid, first, last, lso = _ENTRY.unpack_from(data, pos)
        if version != _VERSION:
            break
        out.append(AbortedTxn(pid, first, last, lso))
    return out


def read_index(path: Path) -> list[AbortedTxn] | None:
    """The entries stored at `path`, None when there is no such file."""
    try:
        return decode_entries(path.read_bytes())
    except FileNotFoundError:
        return None


def append_entry(path: Path, entry: AbortedTxn) -> None:
    """Append one entry and fsync it (creating the file, durably)."""
    created = not path.exists()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, encode_entries([entry]))
        os.fsync(fd)
    finally:
        os.close(fd)
    if created:
        fsync_dir(path.parent)


def write_index(path: Path, entries: list[AbortedTxn]) -> None:
    """Replace the file with `entries` (fsynced; the caller fsyncs the directory); no entries
    removes it."""
    if not entries:
        path.unlink(missing_ok=True)
        return
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, encode_entries(entries))
        os.fsync(fd)
    finally:
        os.close(fd)
