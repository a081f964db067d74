"""Reading a cleaning's source segments, shared by both passes (storage/offset_map.py, then
storage/compaction.py): chunked scans of whole batches, record decoding for the slow paths
(compressed and transactional batches), and which batches belong to aborted transactions.
"""

from __future__ import annotations

import os
import struct
from bisect import bisect_right
from typing import Callable

from offsetd.records.batch import (
    BATCH_HEADER_SIZE,
    CONTROL_MASK,
    LOG_OVERHEAD,
    MIN_BATCH_LENGTH,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    InvalidBatch,
)
from offsetd.records.compression import decompress
from offsetd.records.varint import VarintError, decode_varint
from offsetd.storage.cleaning_job import CleanerError, SourceSegment

__all__ = ["COMPRESSION_MASK", "SPECIAL_MASK", "AbortedTransactions", "scan_source", "decode_records"]

COMPRESSION_MASK = 0x07
# Batches that are not plain: compressed, transactional or control.
SPECIAL_MASK = COMPRESSION_MASK | TRANSACTIONAL_MASK | CONTROL_MASK

_LENGTH_UNPACK_FROM = struct.Struct(">i").unpack_from
_PID_UNPACK_FROM = struct.Struct(">q").unpack_from  # producerId @43


def _parse_records(
    d: bytes, p: int, end: int, count: int, base_ts: int, max_ts: int, log_append_time: bool
) -> list[tuple[int, int, bytes | None, bool]]:
    """(offset delta, timestamp, key, is tombstone) of each record in d[p:end]."""
    out = []
    for _ in range(count):
        length, p = decode_varint(d, p)
        rec_end = p + length
        ts_delta, p = decode_varint(d, p + 1)
        off_delta, p = decode_varint(d, p)
        klen, p = decode_varint(d, p)
        key = None
        if klen >= 0:
            key = d[p : p + klen]
            p += klen
        vlen, p = decode_varint(d, p)
        if length <= 0 or rec_end > end or p > rec_end or p + max(vlen, 0) > rec_end:
            raise CleanerError(f"malformed record (offset delta {off_delta})")
        out.append((off_delta, max_ts if log_append_time else base_ts + ts_delta, key, vlen < 0))
        p = rec_end
    if p != end:
        raise CleanerError(f"{end - p} bytes after the last record of a batch")
    return out


def decode_records(buf: bytes, pos: int, end: int, attrs: int, count: int, bts: int, mts: int):
    """Records of a batch as (offset delta, ts, key, tombstone), None when undecodable."""
    codec = attrs & COMPRESSION_MASK
    lat = bool(attrs & TIMESTAMP_TYPE_MASK)
    if codec == 0:
        return _parse_records(buf, pos + BATCH_HEADER_SIZE, end, count, bts, mts, lat)
    try:
        d = decompress(codec, buf[pos + BATCH_HEADER_SIZE : end])
    except InvalidBatch:
        return None  # a client could not read it either; keep it as it is
    return _parse_records(d, 0, len(d), count, bts, mts, lat)


class AbortedTransactions:
    """The aborted transactions of a cleaning's range (the job's producer id -> [(first, last
    offset)]): their batches are dropped whole and never enter the map."""

    def __init__(self, aborted: dict[int, list[tuple[int, int]]]) -> None:
        self.aborted = aborted
        self.aborted_firsts = {pid: [r[0] for r in ranges] for pid, ranges in aborted.items()}

    def is_aborted(self, pid: int, offset: int) -> bool:
        """True when `offset` of producer `pid` lies in one of its aborted transactions."""
        firsts = self.aborted_firsts.get(pid)
        if not firsts:
            return False
        i = bisect_right(firsts, offset) - 1
        return i >= 0 and offset <= self.aborted[pid][i][1]

    def committed_plain(self, buf: bytes, pos: int, base: int, attrs: int) -> bool:
        """An uncompressed batch of a committed transaction: compacted like any batch (every
        transaction of the cleanable range is over, so not aborted means committed)."""
        return (attrs & (COMPRESSION_MASK | CONTROL_MASK)) == 0 and not self.is_aborted(
            _PID_UNPACK_FROM(buf, pos + 43)[0], base)


def scan_source(src: SourceSegment, fn: Callable[[bytes], int], chunk_bytes: int) -> None:
    """Feed the batches of a source segment to fn(buf) -> bytes consumed, in chunks."""
    try:
        fd = os.open(src.path, os.O_RDONLY)
    except FileNotFoundError as exc:
        raise CleanerError(f"{src.path} disappeared (deleted by retention?)") from exc
    try:
        pos = 0
        size = src.size
        while pos < size:
            want = min(chunk_bytes, size - pos)
            buf = os.pread(fd, want, pos)
            if len(buf) < want:
                raise CleanerError(f"{src.path}: short read at byte {pos}")
            used = _call(fn, buf, src, pos)
            if used == 0:  # a batch larger than the chunk, or garbage
                if len(buf) < LOG_OVERHEAD:
                    raise CleanerError(f"{src.path}: {len(buf)} stray bytes at byte {pos}")
                length = _LENGTH_UNPACK_FROM(buf, 8)[0]
                if length < MIN_BATCH_LENGTH or pos + LOG_OVERHEAD + length > size:
                    raise CleanerError(f"{src.path}: invalid batch length {length} at byte {pos}")
                buf = os.pread(fd, LOG_OVERHEAD + length, pos)
                used = _call(fn, buf, src, pos)
                if used == 0:
                    raise CleanerError(f"{src.path}: unreadable batch at byte {pos}")
            pos += used
    finally:
        os.close(fd)


def _call(fn: Callable[[bytes], int], buf: bytes, src: SourceSegment, pos: int) -> int:
    """fn(buf), its errors named by the source file and byte."""
    try:
        return fn(buf)
    except CleanerError as exc:
        raise CleanerError(f"{src.path} near byte {pos}: {exc}") from None
    except (IndexError, struct.error, VarintError, ValueError) as exc:
        raise CleanerError(f"{src.path}: malformed batch near byte {pos}: {exc!r}") from exc
